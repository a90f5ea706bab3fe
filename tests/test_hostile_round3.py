"""Hostile input, round 3 (issue 31): each break a fresh adversary found, rebuilt small.

Each case runs the real CLI (in a subprocess under the limits of :mod:`test_hostile` when it
could crash, hang or grow) and checks the promise of docs/security.md: one clean line and the
right exit status, bounded time and memory, no file outside ``--out``, the same answer again.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from bad_inputs import mini_trace
from test_hostile import _env, _limit, inproc, one_line, run, trace

REGRESSIONS = Path(__file__).resolve().parents[1] / "fuzz" / "regressions"


@pytest.fixture
def box(tmp_path):
    """A test root with its own HOME and cache, and the input folder ``in`` (as test_hostile's)."""
    for d in ("in", "home", "xdg", "cache"):
        (tmp_path / d).mkdir()
    return tmp_path


# Linux starts an exec'd child's peak RSS at its parent's RSS at fork (the old mm's high-water
# mark is kept across exec), so wait4 on a child of a long pytest run reports pytest's size.
# A small launcher forks the CLI and reports the CLI's own rusage: its peak starts at the
# launcher's ~15 MB.
_LAUNCH = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "tracekit.cli", *sys.argv[2:]])
_, status, use = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump([use.ru_utime + use.ru_stime, use.ru_maxrss * 1024], f)
code = os.waitstatus_to_exitcode(status)
os._exit(code if code >= 0 else 128 - code)
"""


def _child(box: Path, *args: str) -> tuple[subprocess.CompletedProcess, float, int]:
    """``tracekit *args`` in a child under the limits: the result, the child's own CPU seconds
    and peak RSS (bytes), from ``wait4`` in a small launcher (see ``_LAUNCH``)."""
    usage = box / "rusage.json"
    with open(box / "stdout", "w+b") as out, open(box / "stderr", "w+b") as err:
        p = subprocess.run(
            [sys.executable, "-c", _LAUNCH, str(usage), *args],
            stdout=out,
            stderr=err,
            preexec_fn=_limit,
            env=_env(box),
            cwd=box,
        )
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(args, p.returncode, out.read(), err.read())
    for name in ("stdout", "stderr"):
        (box / name).unlink()
    done.err = done.stderr.decode()
    assert "Traceback" not in done.err, done.err
    cpu, rss = json.loads(usage.read_text())
    usage.unlink()
    return done, cpu, rss


def spaces_gzip(path: Path, prefix: bytes, n_spaces: int, suffix: bytes, block: int = 1 << 20) -> None:
    """``prefix``, ``n_spaces`` spaces and ``suffix`` as one gzip member, written by repeating
    one deflate block of spaces (each ends with a full flush, so it stands alone): 2 GiB of
    spaces is a 2 MB file made in about a second."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    spaces = b" " * block
    crc = zlib.crc32(prefix)
    with open(path, "wb") as f:
        f.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
        f.write(c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH))
        one = c.compress(spaces) + c.flush(zlib.Z_FULL_FLUSH)
        for _ in range(n_spaces // block):
            f.write(one)
            crc = zlib.crc32(spaces, crc)
        f.write(c.compress(suffix) + c.flush(zlib.Z_FINISH))
        crc = zlib.crc32(suffix, crc)
        f.write(struct.pack("<II", crc, (len(prefix) + n_spaces + len(suffix)) & 0xFFFFFFFF))


def _inflate_cpu(path: Path) -> float:
    """CPU seconds zlib alone takes to inflate ``path`` (the floor for reading it)."""
    t0 = time.process_time()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            while chunk:
                d.decompress(chunk, 1 << 24)
                chunk = d.unconsumed_tail
    return time.process_time() - t0


# 1. Whitespace streams in bounded memory at the speed of decompression ---------------------


@pytest.mark.parametrize("valid", [False, True], ids=["empty-array", "between-events"])
def test_a_gzip_of_2gib_of_spaces_streams_in_bounded_memory(box, valid):
    """2 GiB of spaces inside ``"traceEvents": [...]`` (a 2 MB file): it took 95 s and 2.3 GB
    of RSS. Now the spaces are squeezed out as they are inflated: the analysis costs about the
    CPU time of the inflate itself, and the text held stays small."""
    doc = json.dumps(mini_trace()).encode()
    if valid:  # the spaces between two events; the answer is the plain file's
        cut = doc.index(b"}, {") + 2
        prefix, suffix = doc[:cut], doc[cut:]
    else:
        prefix, suffix = b'{"traceEvents": [', b"]}"
    path = box / "in" / "spaces.json.gz"
    spaces_gzip(path, prefix, 2 << 30, suffix)
    assert path.stat().st_size < 4 << 20
    floor = _inflate_cpu(path)
    p, cpu, rss = _child(box, "analyze", "in/spaces.json.gz", "--format", "json", "--no-cache")
    if valid:
        assert p.returncode == 0, p.err
        (box / "in" / "plain.json").write_bytes(doc)
        want = inproc(box, "analyze", box / "in" / "plain.json", "--format", "json", "--no-cache")
        assert json.loads(p.stdout)["tables"] == json.loads(want.stdout)["tables"]
    else:
        one_line(p, 2, "nothing to analyse")
    assert rss < 600 << 20, rss
    assert cpu < 3 * floor + 10, (cpu, floor)


# 3, 4. Damaged or planted cache entries are misses ----------------------------------------


def _result_entry(box: Path) -> Path:
    entries = [p for p in (box / "cache").iterdir() if p.name.endswith(".result.parquet")]
    assert len(entries) == 1, entries
    return entries[0]


def _replace_footer(loc: Path, key: bytes, value: bytes) -> None:
    import pyarrow.parquet as pq

    table = pq.read_table(loc)
    md = dict(table.schema.metadata)
    md[key] = value
    pq.write_table(table.replace_schema_metadata(md), loc)


@pytest.mark.parametrize("blob", sorted((REGRESSIONS / "ipc").glob("ipc-*.bin")), ids=lambda p: p.stem)
def test_a_result_entry_with_damaged_frames_is_a_miss_and_rewritten(box, blob):
    """A few flipped bytes in the footer's Arrow IPC stream (key intact) made every later run
    die with SIGSEGV: ``table.nbytes`` was read before ``validate(full=True)``."""
    t = trace(box)
    first = run(box, "analyze", t, "--format", "json")
    assert first.returncode == 0, first.err
    loc = _result_entry(box)
    _replace_footer(loc, b"tracekit-frames", blob.read_bytes())
    for _ in range(2):  # the damaged entry is a miss, then the rewritten one is a hit
        again = run(box, "analyze", t, "--format", "json")
        assert again.returncode == 0 and again.err == "", (again.returncode, again.err)
        assert json.loads(again.stdout)["tables"] == json.loads(first.stdout)["tables"]
    from tracekit.ranks import packed_ipc

    assert packed_ipc.decode([], blob.read_bytes(), 1 << 30) is None


def test_damaged_frames_are_refused_in_process(blob_dir=REGRESSIONS / "ipc"):
    """The same streams, decoded in a child (a crash must fail the test, not the run)."""
    code = "import sys; from tracekit.ranks import packed_ipc; print(packed_ipc.decode([], open(sys.argv[1], 'rb').read(), 1 << 30))"
    for blob in sorted(blob_dir.glob("ipc-*.bin")):
        p = subprocess.run([sys.executable, "-c", code, blob], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and p.stdout.strip() == "None", (blob.name, p.returncode, p.stderr[-300:])


def _planted(box: Path, rows: int) -> Path:
    """A parse-cache entry for ``t.json`` with the right key and ``rows`` rows of one repeated
    event (so Parquet encodes them in a few bytes per column)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracekit.read import cache
    from tracekit.read.reader import DEFAULT_MAX_BYTES, read_trace

    t = trace(box)
    raw = read_trace(t)
    key = cache.file_key(t, DEFAULT_MAX_BYTES)
    one = pa.Table.from_pandas(raw.events.iloc[:1], preserve_index=False)
    table = pa.concat_tables([one] * 1024).combine_chunks()
    table = pa.concat_tables([table] * (rows // 1024))
    info = json.dumps({"key": key, "meta": raw.meta, "warnings": []}).encode()
    loc = cache._entry(key)
    loc.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata({b"tracekit": info}), loc, compression="zstd")
    return t


def test_a_planted_parse_entry_is_bounded_by_its_decoded_size(box, monkeypatch):
    """1.2 MB on disk, its Parquet metadata claiming 1 MB, 12 GB decoded: it was accepted (65 s,
    12 GB of RSS) and its forged rows shown. The bound is rows times column widths now, from
    the footer, before anything is decoded."""
    import pyarrow.parquet as pq

    from tracekit.read import cache
    from tracekit.read.files import DEFAULT_MAX_BYTES

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(box / "cache"))
    t = _planted(box, 1 << 20)  # ~100 MB decoded for a trace of a few KiB (bound ~16 MiB)
    loc = cache._entry(cache.file_key(t, DEFAULT_MAX_BYTES))
    md = pq.ParquetFile(loc).metadata
    assert loc.stat().st_size < 1 << 20
    assert sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups)) < cache._SLACK
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("decoded"))
    assert cache.load(t, DEFAULT_MAX_BYTES) is None


def test_a_planted_parse_entry_within_bounds_is_never_shown(box, monkeypatch):
    """Columns that were not read from this trace (a planted entry, or bits flipped in a stored
    one: here every duration doubled, the key intact) fail the entry's seal: the analysis shown
    is the trace's own."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracekit.read import cache
    from tracekit.read.reader import DEFAULT_MAX_BYTES, read_trace

    monkeypatch.setattr("tracekit.ranks.analyse.SMALL_FILE", -1)
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(box / "cache"))
    t = trace(box)
    want = inproc(box, "analyze", t, "--format", "json", "--no-cache")
    raw = read_trace(t)
    raw.events["dur"] *= 2
    key = cache.file_key(t, DEFAULT_MAX_BYTES)
    info = json.dumps({"key": key, "meta": raw.meta, "warnings": raw.warnings}).encode()
    table = pa.Table.from_pandas(raw.events, preserve_index=False).replace_schema_metadata(
        {b"tracekit": info}
    )
    loc = cache._entry(key)
    pq.write_table(table, loc)
    got = inproc(box, "analyze", t, "--format", "json")
    assert got.returncode == 0 and json.loads(got.stdout)["tables"] == json.loads(want.stdout)["tables"]


# 5, 26.7. Step ranges are checked against the steps that exist ------------------------------


def test_a_huge_step_range_is_checked_before_anything_is_allocated(box):
    p = run(box, "analyze", trace(box), "--steps", "1-99999999999999999999999", "--format", "json")
    assert p.returncode == 0, p.err
    assert json.loads(p.stdout)["meta"]["filters"]["steps"] == [1, 2, 3]
    one_line(run(box, "analyze", trace(box), "--steps", "4-99999999999999999999999"), 2, "--steps", "1-3")


def test_a_step_that_does_not_exist_is_one_line_naming_the_steps(box):
    line = one_line(inproc(box, "analyze", trace(box), "--steps", "99"), 2, "--steps")
    assert "99" in line and "1-3" in line


# 6. explain's pattern runs in linear time -------------------------------------------------


def test_explain_pattern_cannot_backtrack(box):
    doc = mini_trace()
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "k" * 40 + "!"
    p = run(box, "explain", trace(box, doc=doc), "(k+)+$x", "--no-cache")
    assert p.returncode == 0 and p.seconds < 30, (p.seconds, p.err)


# 7, 8, 10. One answer from both readers, and one rule for odd numbers ------------------------


def _both_readers(box: Path, raw: bytes, gz: bool = False) -> list[subprocess.CompletedProcess]:
    path = box / "in" / ("odd.json.gz" if gz else "odd.json")
    path.write_bytes(gzip.compress(raw) if gz else raw)
    out = []
    for native in ("1", "0"):
        os.environ["TRACEKIT_NATIVE"] = native
        try:
            out.append(inproc(box, "analyze", path, "--format", "json", "--no-cache"))
        finally:
            del os.environ["TRACEKIT_NATIVE"]
    assert (out[0].returncode, out[0].err, out[0].stdout) == (out[1].returncode, out[1].err, out[1].stdout)
    return out


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_after_trace_events_is_the_same_error_from_both_readers(box, gz):
    doc = mini_trace()
    doc["host_name"] = "HOST"
    raw = json.dumps(doc).encode().replace(b"HOST", b"h\xffst")
    p, _ = _both_readers(box, raw, gz)
    one_line(p, 2, "not UTF-8 text")


BIG = b"1" + b"0" * 400  # an integer past float64's range


def _odd(field: str, value: bytes, epoch: bool = False, floats: bool = False) -> bytes:
    """The mini trace with ``value`` (JSON text) as one CPU op's ``field``."""
    doc = mini_trace()
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    for e in doc["traceEvents"]:
        if "ts" in e and epoch:
            e["ts"] += 1_700_000_000_000_000.5
        elif "ts" in e and floats:
            e["ts"] += 0.5
    if field == "bytes":
        ops[1].setdefault("args", {})["bytes"] = 4242
        return json.dumps(doc).encode().replace(b"4242", value)
    ops[1][field] = 4242
    return json.dumps(doc).encode().replace(b"4242", value)


@pytest.mark.parametrize(
    "raw, warning",
    [
        (_odd("bytes", BIG), "number out of range"),
        (_odd("ts", BIG, floats=True), "no valid timestamp"),
        (_odd("ts", BIG), "no valid timestamp"),
        (_odd("dur", BIG, floats=True), "overflowing durations"),
        (_odd("ts", b"0e+99999999999999999999", epoch=True), None),
        (_odd("ts", b"1e-99999999999999999999", epoch=True), None),
        (_odd("ts", b"-0", epoch=True), None),
        (_odd("ts", b"-0.0e0", floats=True), None),
        (_odd("ts", b"9" * 40 + b"e-20", epoch=True), "no valid timestamp"),
    ],
    ids=[
        "bytes-beyond-float",
        "ts-bigint-among-floats",
        "ts-bigint",
        "dur-bigint-among-floats",
        "ts-zero-huge-exponent",
        "ts-tiny-huge-exponent",
        "ts-minus-zero",
        "ts-minus-zero-float",
        "ts-long-mantissa",
    ],
)
def test_an_odd_number_is_an_odd_event(box, raw, warning):
    """Out-of-range integers and huge exponents gave "could not analyse (OverflowError)" or
    "(ValueError)". An odd number now drops its event with a warning (or is a plain value)."""
    p, _ = _both_readers(box, raw)
    assert p.returncode == 0, p.err
    if warning is None:
        assert p.err == "", p.err
    else:
        assert len(p.err.splitlines()) == 1 and warning in p.err, p.err


@pytest.mark.parametrize("text", [b"NaN", b"-Infinity", b"1e400", b"-1e400"])
@pytest.mark.parametrize("field", ["ts", "dur", "bytes"])
def test_nan_inf_and_float_overflow_are_one_clean_line(box, text, field):
    p, _ = _both_readers(box, _odd(field, text, epoch=True))
    one_line(p, 2, "odd.json")
    assert "could not analyse" not in p.err


# 9. --scheduler: usage errors, and the three misleading lines ------------------------------


def test_scheduler_that_is_not_an_address_is_a_usage_error(box):
    one_line(inproc(box, "analyze", trace(box), "--scheduler", "not a url"), 2, "--scheduler", "not a url")


def _dask_env(box: Path) -> dict:
    return {**_env(box), "DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}


def test_scheduler_time_out_says_so(box):
    pytest.importorskip("distributed")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit.cli",
            "analyze",
            str(trace(box)),
            "--scheduler",
            "tcp://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_dask_env(box),
    )
    line = p.stderr.strip()
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "--scheduler" in line and "cannot connect" in line and "cannot write" not in line, line


def test_a_service_that_is_not_dask_says_so(box):
    pytest.importorskip("distributed")
    import socket
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def answer() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.recv(65536)
            c.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n" * 10)
            c.close()

    threading.Thread(target=answer, daemon=True).start()
    try:
        p = subprocess.run(
            [
                sys.executable,
                "-m",
                "tracekit.cli",
                "analyze",
                str(trace(box)),
                "--scheduler",
                f"tcp://127.0.0.1:{port}",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=_dask_env(box),
        )
    finally:
        srv.close()
    line = p.stderr.strip()
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert "--scheduler" in line and "memory" not in line, line


def test_whitespace_past_the_read_limit_is_refused_not_out_of_memory(box):
    """9 GiB of whitespace under a 4 GiB cap read "out of memory" after 66 s; squeezed as it is
    inflated, it reaches the read limit instead (here 1 GiB, to be quick)."""
    spaces_gzip(box / "in" / "ws.json.gz", b'{"traceEvents": [', 1536 << 20, b"]}")
    p = run(box, "analyze", "in/ws.json.gz", "--max-bytes", str(1 << 30), "--no-cache")
    one_line(p, 2, "1,073,741,824-byte limit")


# 11. SIGTERM cleans up as Ctrl-C does ------------------------------------------------------


_TERM_DURING_WRITE = """
import os, signal, sys
import tracekit.safewrite as safewrite

real = safewrite.write_members


def write_members(out_dir, members):
    def second(write):
        def writer(f):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered while this member is written
            write(f)
        return writer

    items = list(members.items())
    return real(out_dir, {n: second(w) if i == 1 else w for i, (n, w) in enumerate(items)})


safewrite.write_members = write_members
from tracekit.cli import main

sys.argv = ["tracekit", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize("exists", [False, True], ids=["new-dir", "existing-dir"])
def test_sigterm_during_a_directory_write_leaves_nothing_behind(box, exists):
    """SIGTERM (kill, Kubernetes, CI) while ``--out DIR`` is written: no ``.o...tmp``
    left beside it or in it, exit 143 with one line, and a later run gives the same answer."""
    t = trace(box)
    if exists:
        (box / "o").mkdir()
    p = subprocess.run(
        [sys.executable, "-c", _TERM_DURING_WRITE, "analyze", str(t), "--format", "csv", "--out", "o"],
        capture_output=True,
        timeout=120,
        env=_env(box),
        cwd=box,
    )
    assert p.returncode == 143 and p.stderr.decode().strip() == "tracekit: terminated", (
        p.returncode,
        p.stderr,
    )
    assert sorted(q.name for q in box.iterdir()) == sorted(["cache", "home", "in", "xdg"] + ["o"] * exists)
    if exists:
        assert [q.name for q in (box / "o").iterdir() if q.name.endswith(".tmp")] == []
    again = run(box, "analyze", t, "--format", "csv", "--out", "o", allowed=("o",))
    fresh = run(box, "analyze", t, "--format", "csv", "--out", "o2", "--no-cache", allowed=("o2",))
    assert again.returncode == fresh.returncode == 0
    assert {q.name: q.read_bytes() for q in (box / "o").iterdir()} == {
        q.name: q.read_bytes() for q in (box / "o2").iterdir()
    }
