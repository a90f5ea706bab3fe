"""Untrusted input (issue 6): every broken trace is one line and exit 2; odd traces still analyse.

Each broken case checks the whole contract: exit status 2, exactly one stderr line that names
the file and the problem, no traceback, and the input file left byte-for-byte untouched. Each
odd-but-valid case checks that the tables come out (exit 0) with a warning on stderr.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time

import pytest
from bad_inputs import analyze, assert_one_line_error, fingerprint, mini_trace, warnings_of, write

import tracekit
from tracekit.errors import TraceError


def _text(trace: dict) -> str:
    return json.dumps(trace)


def _deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


MINI = _text(mini_trace())
#: The mini trace's events as a bare array (the Chrome trace format's other form).
ARRAY = json.dumps(mini_trace()["traceEvents"]).encode()
EVENTS_AT = MINI.index('"traceEvents": [') + len('"traceEvents": [')


def _with_event(raw: str) -> bytes:
    """The mini trace with one extra event written as raw JSON text (first in the list)."""
    return (MINI[:EVENTS_AT] + raw + ", " + MINI[EVENTS_AT:]).encode()


# (case id, file name, bytes, words the one-line message must contain)
BROKEN = [
    ("empty", "t.json", b"", ["empty file"]),
    ("whitespace", "t.json", b"  \n\t\n", ["empty file"]),
    ("binary", "t.json", bytes(range(256)) * 8, ["binary"]),
    ("png", "t.json", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(64), ["binary"]),
    ("utf16-bom", "t.json", MINI.encode("utf-16"), ["UTF-16"]),
    ("utf16-le", "t.json", MINI.encode("utf-16-le"), ["UTF-16"]),
    ("utf16-be", "t.json", MINI.encode("utf-16-be"), ["UTF-16"]),
    ("utf32", "t.json", MINI.encode("utf-32"), ["UTF-32"]),
    ("latin-1", "t.json", _with_event('{"name": "caf\u00e9"}').decode().encode("latin-1"), ["not UTF-8"]),
    ("csv", "t.json", b"name,dur\ngemm,12\n", ["not valid JSON"]),
    ("html", "t.json", b"<html><body>404</body></html>", ["not valid JSON"]),
    ("no-traceEvents", "t.json", b'{"schemaVersion": 1, "events": []}', ["no `traceEvents`"]),
    ("truncated", "t.json", MINI.encode()[: len(MINI) // 2], ["truncated"]),
    ("truncated-1-byte", "t.json", MINI.encode()[:-1], ["truncated"]),
    ("trailing-garbage", "t.json", MINI.encode() + b" xyz", ["not valid JSON"]),
    ("top-array", "t.json", b"[1, 2, 3]", ["malformed", "$[0]"]),
    ("top-array-unterminated", "t.json", b"[1, 2", ["malformed", "$[0]"]),
    ("array-cut-in-event", "t.json", ARRAY[: len(ARRAY) // 2], ["truncated"]),
    ("array-cut-after-a-key", "t.json", ARRAY[: ARRAY.rindex(b'"ph": ') + 6], ["truncated"]),
    ("array-cut-in-event-gz", "t.json.gz", gzip.compress(ARRAY[:-2]), ["truncated"]),
    ("array-trailing-garbage", "t.json", ARRAY + b" xyz", ["not valid JSON"]),
    ("array-closed-twice", "t.json", ARRAY + b"]", ["not valid JSON"]),
    ("array-empty", "t.json", b" [ ] ", ["nothing to analyse"]),
    ("array-unterminated-empty", "t.json", b"[\n", ["nothing to analyse"]),
    ("top-string", "t.json", b'"traceEvents"', ["top level must be a JSON object or array"]),
    ("top-number", "t.json", b"42", ["top level must be a JSON object or array"]),
    ("top-null", "t.json", b"null", ["top level must be a JSON object or array"]),
    ("traceEvents-object", "t.json", b'{"traceEvents": {"ph": "X"}}', ["malformed", "traceEvents"]),
    ("traceEvents-null", "t.json", b'{"traceEvents": null}', ["malformed", "traceEvents"]),
    ("event-number", "t.json", _with_event("5"), ["malformed", "traceEvents[0]"]),
    ("ph-int", "t.json", _with_event('{"ph": 88, "cat": "kernel"}'), ["malformed", ".ph"]),
    ("ts-string", "t.json", _with_event('{"ph": "X", "cat": "kernel", "ts": "early"}'), ["malformed", ".ts"]),
    (
        "name-list",
        "t.json",
        _with_event('{"ph": "X", "cat": "kernel", "name": ["a"]}'),
        ["malformed", ".name"],
    ),
    (
        "args-string",
        "t.json",
        _with_event('{"ph": "X", "cat": "kernel", "args": "x"}'),
        ["malformed", ".args"],
    ),
    (
        "correlation-float-list",
        "t.json",
        _with_event('{"ph": "X", "cat": "kernel", "args": {"correlation": [1.5]}}'),
        ["malformed", "correlation"],
    ),
    ("NaN", "t.json", _with_event('{"ph": "X", "cat": "kernel", "ts": NaN, "dur": 1}'), ["NaN or Infinity"]),
    (
        "Infinity",
        "t.json",
        _with_event('{"ph": "X", "cat": "kernel", "ts": 1, "dur": Infinity}'),
        ["NaN or Infinity"],
    ),
    (
        "-Infinity",
        "t.json",
        _with_event('{"ph": "X", "cat": "kernel", "ts": -Infinity}'),
        ["NaN or Infinity"],
    ),
    (
        "number-out-of-range",
        "t.json",
        _with_event('{"ph": "X", "cat": "kernel", "ts": 1e999}'),
        ["out of range"],
    ),
    (
        "deep-args",
        "t.json",
        _with_event('{"ph": "X", "args": {"x": ' + _deep(200_000).decode() + "}}"),
        ["nested too deeply"],
    ),
    (
        "deep-skipped-key",
        "t.json",
        b'{"junk": ' + _deep(1_000_000) + b', "traceEvents": []}',
        ["nested too deeply"],
    ),
    (
        "deep-distributedInfo",
        "t.json",
        b'{"traceEvents": [], "distributedInfo": ' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b"}",
        ["nested too deeply"],
    ),
    ("deep-top", "t.json", _deep(1_000_000), ["malformed", "$[0]"]),
    ("no-events", "t.json", b'{"traceEvents": []}', ["nothing to analyse"]),
    (
        "only-metadata",
        "t.json",
        json.dumps({"traceEvents": [e for e in mini_trace()["traceEvents"] if e["ph"] == "M"]}).encode(),
        ["nothing to analyse"],
    ),
    (
        "only-overflowing-times",
        "t.json",
        b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 123456789012345678901234567890,'
        b' "dur": 1, "args": {"correlation": 99999999999999999999999999}}]}',
        ["nothing to analyse", "invalid times"],
    ),
    ("gzip-corrupt", "t.json.gz", b"\x1f\x8b\x08\x00" + bytes(range(7, 200)), ["corrupt gzip"]),
    ("gzip-truncated", "t.json.gz", gzip.compress(MINI.encode())[:-40], ["truncated gzip"]),
    ("gzip-of-binary", "t.json.gz", gzip.compress(bytes(range(256)) * 4), ["binary"]),
    ("gzip-of-truncated-json", "t.json.gz", gzip.compress(MINI.encode()[:200]), ["truncated"]),
    ("gzip-header-only", "t.json.gz", b"\x1f\x8b", ["gzip"]),
    ("plain-json-named-gz", "t.json.gz", MINI[:50].encode(), ["truncated"]),
]


@pytest.mark.parametrize("name,data,needles", [pytest.param(n, d, k, id=i) for i, n, d, k in BROKEN])
def test_broken_trace_is_one_line_exit_2(tmp_path, name, data, needles):
    p = write(tmp_path / name, data)
    before = fingerprint(p)
    line = assert_one_line_error(analyze(p, "--format", "json"), p, *needles)
    assert len(line) < 400, line  # one readable line, not a dump of the input
    assert fingerprint(p) == before
    # The Python API raises TraceError, the one error type that reaches users, and nothing else.
    with pytest.raises(TraceError):
        tracekit.load(p)


def test_broken_traces_never_print_a_traceback_in_a_real_process(tmp_path):
    """The CLI as a user runs it (its own interpreter): deep nesting must not crash the process."""
    cases = {
        "deep.json": _with_event('{"args": {"x": ' + _deep(500_000).decode() + "}}"),
        "nan.json": _with_event('{"ts": NaN}'),
        "empty.json": b"",
    }
    for name, data in cases.items():
        p = write(tmp_path / name, data)
        r = subprocess.run(
            [sys.executable, "-m", "tracekit.cli", "analyze", str(p)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 2, (name, r.returncode, r.stderr)
        assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
        assert r.stdout == ""


def test_missing_file_and_empty_directory(tmp_path):
    assert_one_line_error(analyze(tmp_path / "nope.json"), tmp_path / "nope.json", "no such file")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "notes.txt").write_text("not a trace")
    assert_one_line_error(analyze(tmp_path / "d"), tmp_path / "d", "no trace files")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX named pipes")
def test_fifo_is_refused_not_read_forever(tmp_path):
    p = tmp_path / "pipe.json"
    os.mkfifo(p)
    t = time.monotonic()
    assert_one_line_error(analyze(p), p, "not a regular file")
    assert time.monotonic() - t < 10


def test_missing_rank_is_one_line(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in (0, 1):
        t = mini_trace()
        t["distributedInfo"] = {"rank": r, "world_size": 2}
        write(d / f"rank{r}.json", t)
    assert_one_line_error(analyze(d, "--rank", "5"), d, "no rank 5", "ranks here: 0, 1")


def test_missing_distributed_info_and_profiler_steps_still_analyse(tmp_path):
    t = mini_trace()
    del t["distributedInfo"]
    t["traceEvents"] = [e for e in t["traceEvents"] if not e["name"].startswith("ProfilerStep")]
    p = write(tmp_path / "t.json", t)
    r = analyze(p, "--format", "json")
    assert r.exit_code == 0, r.stderr
    meta = json.loads(r.stdout)["meta"]
    assert any("no ProfilerStep" in n for n in meta["notices"])


# ------------------------------------------------------------------------- resource bounds


def test_gzip_bomb_is_refused_and_the_limit_can_be_raised(tmp_path):
    # 64 MiB of JSON whitespace inside a valid trace compresses to ~64 KiB.
    body = MINI.encode()
    data = body[:-1] + b" " * (64 << 20) + body[-1:]
    p = write(tmp_path / "bomb.json.gz", gzip.compress(data, compresslevel=9))
    assert p.stat().st_size < 1 << 20
    assert_one_line_error(analyze(p, "--max-bytes", str(16 << 20)), p, "gzip bomb", "--max-bytes")
    r = analyze(p, "--max-bytes", str(128 << 20), "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["tables"]["kernels"]


def test_concatenated_gzip_members_are_bounded_together(tmp_path):
    member = gzip.compress(b" " * (4 << 20))
    p = write(tmp_path / "multi.json.gz", gzip.compress(b"{") + member * 8 + gzip.compress(b"}"))
    assert_one_line_error(analyze(p, "--max-bytes", str(16 << 20)), p, "gzip bomb")


def test_plain_file_over_the_limit_is_refused(tmp_path):
    p = write(tmp_path / "big.json", MINI.encode() + b" " * 5000)
    assert_one_line_error(analyze(p, "--max-bytes", "4096"), p, "larger than", "--max-bytes")


def test_huge_single_string_is_bounded_by_max_bytes(tmp_path):
    t = mini_trace()
    t["traceEvents"][3]["name"] = "k" * (8 << 20)  # one 8 MiB kernel name
    p = write(tmp_path / "t.json", t)
    assert_one_line_error(analyze(p, "--max-bytes", str(4 << 20)), p, "larger than")
    # Under the limit it analyses, and the reader keeps no more than a few copies of it.
    import tracemalloc

    tracemalloc.start()
    try:
        tracekit.load(p, max_bytes=32 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 12 * (8 << 20), f"peak {peak / 2**20:.0f} MiB for an 8 MiB string"


def test_huge_string_in_a_skipped_field_is_not_materialised(tmp_path):
    t = mini_trace()
    # "Input Dims" is read since the perf model (its text is kept, once); "Call stack" never is
    t["traceEvents"][3]["args"]["Call stack"] = "x" * (32 << 20)
    p = write(tmp_path / "t.json", t)
    import tracemalloc

    tracemalloc.start()
    try:
        tracekit.load(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The file's bytes are held once (32 MiB); the skipped string is never decoded into a str.
    assert peak < 3 * (32 << 20), f"peak {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("shape", ["many-pids", "many-phase-pids", "deep-stack", "same-corr"])
def test_pathological_shapes_finish_quickly(tmp_path, shape):
    """Adversarial shapes that make naive per-thread / per-process loops quadratic."""
    n = 20_000
    ev: list[dict] = []
    if shape == "many-pids":  # every op on its own process and thread
        for i in range(n):
            ev.append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": i, "tid": i, "ts": i, "dur": 1}
            )
    elif shape == "many-phase-pids":  # a phase range per process (was quadratic in link)
        n = 100_000
        for i in range(n):
            ev.append(
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": "tracekit.phase:forward",
                    "pid": i,
                    "tid": 1,
                    "ts": i,
                    "dur": 1,
                }
            )
            ev.append(
                {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": i, "tid": 1, "ts": i, "dur": 1}
            )
    elif shape == "deep-stack":  # ranges nested 20 000 deep on one thread
        for i in range(n):
            ev.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": f"op{i % 7}",
                    "pid": 1,
                    "tid": 1,
                    "ts": i,
                    "dur": 2 * (n - i),
                }
            )
    else:  # every kernel and launch shares one correlation id
        for i in range(n):
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": 2 * i,
                    "dur": 1,
                    "args": {"correlation": 1},
                }
            )
            ev.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": "k",
                    "pid": 0,
                    "tid": 7,
                    "ts": 2 * i + 1,
                    "dur": 1,
                    "args": {"correlation": 1, "stream": 7},
                }
            )
    p = write(tmp_path / "t.json", {"traceEvents": ev})
    t = time.monotonic()
    r = analyze(p, "--format", "json")
    elapsed = time.monotonic() - t
    assert r.exit_code in (0, 2), r.stderr
    if r.exit_code == 2:
        assert_one_line_error(r, p)
    assert elapsed < 30, f"{shape}: {elapsed:.1f} s"


# -------------------------------------------------------------- valid but odd: warn, analyse


def _odd(tmp_path, trace: dict, *needles: str) -> dict:
    p = write(tmp_path / "odd.json", trace)
    before = fingerprint(p)
    r = analyze(p, "--format", "json")
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 0, r.stderr
    assert "Traceback" not in r.stderr
    warns = warnings_of(r)
    for needle in needles:
        assert any(needle.lower() in w.lower() for w in warns), (needle, r.stderr)
    assert fingerprint(p) == before
    doc = json.loads(r.stdout)
    assert doc["tables"]["kernels"], "the odd trace must still give tables"
    return doc


def test_unknown_categories_warn(tmp_path):
    t = mini_trace()
    t["traceEvents"] += [
        {"ph": "X", "cat": "quantum_flux", "name": "q", "pid": 1, "tid": 1, "ts": 1010, "dur": 3}
    ] * 3
    _odd(tmp_path, t, "unknown categories", "'quantum_flux' (3)")


def test_negative_durations_warn_and_clamp(tmp_path):
    t = mini_trace()
    t["traceEvents"][5]["dur"] = -50  # a kernel
    _odd(tmp_path, t, "negative duration")


def test_overflowing_durations_warn_and_drop(tmp_path):
    t = mini_trace()
    kernels = [e for e in t["traceEvents"] if e.get("cat") == "kernel"]
    kernels[0]["dur"] = 2**70  # past int64 in any unit
    kernels[1]["dur"] = 10**15  # ~32 years: garbage
    kernels[2]["dur"] = 1.5e300  # a float far out of range
    _odd(tmp_path, t, "3 events with overflowing durations")


def test_overflowing_timestamps_and_ids_warn_and_drop(tmp_path):
    t = mini_trace()
    t["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "late",
            "pid": 0,
            "tid": 7,
            "ts": 2**64 + 5,
            "dur": 1,
            "args": {"correlation": 2**80},
        }
    )
    t["traceEvents"].append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "later",
            "pid": 0,
            "tid": 7,
            "ts": 9.9e250,
            "dur": 1,
            "args": {"correlation": -(2**70)},
        }
    )
    _odd(tmp_path, t, "2 events with no valid timestamp")


def test_ids_above_int64_still_link(tmp_path):
    t = mini_trace()
    for e in t["traceEvents"]:
        a = e.get("args") or {}
        if "correlation" in a:
            a["correlation"] += 2**64 - 100  # as a uint64 id, and wider still
    doc = _odd(tmp_path, t)
    assert not any("no launching" in w["message"] for w in doc["meta"]["warnings"])


def test_duplicate_correlation_ids_warn(tmp_path):
    t = mini_trace()
    rt = [e for e in t["traceEvents"] if e.get("cat") == "cuda_runtime"]
    rt[1]["args"]["correlation"] = rt[0]["args"]["correlation"]
    _odd(tmp_path, t, "duplicate correlation ids")


def test_kernels_with_no_launch_warn(tmp_path):
    t = mini_trace()
    k = [e for e in t["traceEvents"] if e.get("cat") == "kernel"]
    k[0]["args"]["correlation"] = 999_999
    _odd(tmp_path, t, "no launching runtime call")


def test_steps_cut_by_the_profiling_window_warn(tmp_path):
    t = mini_trace(steps=5)
    # The last step: the profiling window closed just after its first launch, so its device
    # activity is a sliver of a normal step's.
    last = [e for e in t["traceEvents"] if e.get("cat") == "kernel" and e["ts"] >= 1000 + 4 * 100]
    for i, e in enumerate(last):
        e["ts"], e["dur"] = last[0]["ts"] + i, 1
    doc = _odd(tmp_path, t, "cut by the profiling window")
    assert 5 not in doc["meta"]["complete_steps"]["0"]
    assert doc["meta"]["complete_steps"]["0"] == [1, 2, 3, 4]


def test_float_string_and_bool_fields_in_odd_places_analyse(tmp_path):
    t = mini_trace()
    ev = t["traceEvents"]
    ev[3]["pid"] = "1"  # string pid (older Kineto writes "Spans" and names)
    ev[4]["tid"] = "stream 7"  # a non-numeric tid
    ev[5]["args"]["stream"] = "7"
    ev[6]["ts"] = float(ev[6]["ts"]) + 0.0005
    t["distributedInfo"] = {"rank": True, "world_size": [1, 2, 3]}
    _odd(tmp_path, t)


def test_events_in_any_order_and_unknown_phases(tmp_path):
    t = mini_trace()
    t["traceEvents"].reverse()
    t["traceEvents"] += [
        {"ph": "Z", "cat": "kernel", "name": "z", "ts": 1},
        {"ph": None},
        {},
        {"cat": None, "ph": "X"},
        {"ph": "i", "cat": "cpu_instant_event"},
    ]
    _odd(tmp_path, t)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_one_broken_rank_in_a_directory_names_that_file(tmp_path, jobs):
    """Ranks are read in worker processes: the error must come back whole (it is pickled).
    By default the readable ranks are analysed (exit 1, the file named); --strict: exit 2."""
    d = tmp_path / "ranks"
    d.mkdir()
    write(d / "rank0.json", mini_trace())
    bad = write(d / "rank1.json", MINI.encode()[:100])
    assert_one_line_error(analyze(d, "--jobs", jobs, "--no-cache", "--strict"), bad, "truncated")
    r = analyze(d, "--jobs", jobs, "--no-cache", "--format", "json")
    assert r.exit_code == 1
    assert r.stderr.splitlines() == [
        "tracekit: warning: skipped rank1.json: truncated JSON (the file ends early)"
    ]
    assert json.loads(r.stdout)["meta"]["skipped"] == [
        {"file": "rank1.json", "problem": "truncated JSON (the file ends early)"}
    ]


def test_trace_error_pickles():
    import pickle

    e = pickle.loads(pickle.dumps(TraceError("a/b.json", "bad\nthing")))
    assert isinstance(e, TraceError) and (e.path, e.problem) == ("a/b.json", "bad thing")
