"""Hostile input, end to end: each case runs the real CLI in a subprocess under a memory limit
and a timeout, and checks the promise of docs/security.md:

* the exit status (2 for a refused input or output, 1 for a partial result, 0 with a named
  warning for an odd but valid one, 130 for Ctrl-C);
* stderr is the expected number of ``tracekit: ...`` lines (one, mostly), with no raw control
  or bidi character and no traceback;
* bounded time (``TIMEOUT``) and memory (``RLIMIT_AS``);
* no file is written anywhere but ``--out``: the listing of the whole test directory (the
  input's directory, HOME, XDG_CACHE_HOME, the cache) is compared before and after.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bad_inputs import mini_trace
from signal_harness import TIMEOUT, held_run, signal_group
from signal_harness import limit as _limit

#: Raw characters that must never reach a terminal: C0/C1 controls (but \n ending lines), bidi.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def box(tmp_path):
    """A test root with its own HOME and cache, and the input folder ``in``."""
    for d in ("in", "home", "xdg", "cache"):
        (tmp_path / d).mkdir()
    return tmp_path


def _env(box: Path, cache: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRACEKIT_", "XDG_"))}
    env.update(
        HOME=str(box / "home"), XDG_CACHE_HOME=str(box / "xdg"), COLUMNS="100", PYTHONWARNINGS="default"
    )
    if cache:
        env["TRACEKIT_CACHE_DIR"] = str(box / "cache")
    return env


def _listing(root: Path) -> set[Path]:
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.add(Path(dirpath, n).relative_to(root))
    return out


def run(box: Path, *args, allowed: tuple = (), **kw) -> subprocess.CompletedProcess:
    """``tracekit *args`` under the limits; asserts no new file outside ``allowed`` (paths
    relative to the box; the cache folder is always allowed)."""
    before = _listing(box)
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "tracekit.cli", *map(os.fsencode, args)],
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
        preexec_fn=_limit,
        env=_env(box, **kw),
        cwd=box,
    )
    p.seconds = time.monotonic() - t0
    p.err = p.stderr.decode("utf-8", errors="strict")
    new = {
        q
        for q in _listing(box) - before
        if q.parts[0] != "cache" and not any(q == Path(a) or Path(a) in q.parents for a in allowed)
    }
    assert not new, f"files written outside --out: {sorted(new)}"
    assert "Traceback" not in p.err, p.err
    assert not RAW.search(p.err), repr(p.err)
    return p


def inproc(box: Path, *args, monkeypatch=None) -> subprocess.CompletedProcess:
    """The same checks as :func:`run`, in this process (cheap cases: no limits needed)."""
    from click.testing import CliRunner

    from tracekit.cli import main

    before = _listing(box)
    r = CliRunner().invoke(main, [os.fspath(a) for a in args], env=_env(box))
    assert not r.exception or isinstance(r.exception, SystemExit), repr(r.exception)
    p = subprocess.CompletedProcess(args, r.exit_code, r.stdout_bytes, r.stderr_bytes)
    p.err = r.stderr
    new = {q for q in _listing(box) - before if q.parts[0] != "cache"}
    assert not new, f"files written outside --out: {sorted(new)}"
    assert "Traceback" not in p.err and not RAW.search(p.err), repr(p.err)
    return p


def one_line(p, status: int, *needles: str) -> str:
    lines = p.err.splitlines()
    assert p.returncode == status, (p.returncode, p.err)
    assert len(lines) == 1, lines
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def trace(box: Path, name: str = "t.json", doc: dict | None = None) -> Path:
    p = box / "in" / name
    p.write_text(json.dumps(doc or mini_trace()))
    return p


# Inputs that are refused (held since round 1) -------------------------------------------------


@pytest.mark.parametrize(
    "content, needle",
    [
        (b'{"traceEvents": [{"ph": "X"', "truncated JSON"),
        (b"\x1f\x8b\x08\x00garbage", "gzip"),
        (b"", "empty file"),
        (b'{"traceEvents": [{"ts": NaN}]}', "NaN"),
    ],
)
def test_malformed_input_is_one_line(box, content, needle):
    (box / "in" / "bad.json").write_bytes(content)
    one_line(run(box, "analyze", "in/bad.json"), 2, "in/bad.json", needle)


def test_fifo_as_trace_and_as_out_is_refused_not_blocking(box):
    os.mkfifo(box / "in" / "pipe.json")
    one_line(run(box, "analyze", "in/pipe.json"), 2, "not a regular file")
    t = trace(box)
    os.mkfifo(box / "out.json")
    one_line(
        run(box, "analyze", t, "--format", "json", "--out", "out.json"), 2, "out.json", "not a regular file"
    )


def test_many_events_bounded(box):
    doc = mini_trace(steps=2, kernels=25_000)  # 150k events
    one = run(box, "analyze", trace(box, doc=doc), "--format", "json", "--no-cache")
    assert one.returncode == 0, one.err


def test_html_is_inert(box):
    doc = mini_trace()
    doc["traceEvents"][-1]["name"] = "<script>alert(1)</script>\u202e"
    t = trace(box, doc=doc)
    p = run(box, "analyze", t, "--format", "html", "--out", "r.html", allowed=("r.html",))
    assert p.returncode == 0, p.err
    html = (box / "r.html").read_text()
    assert "<script>alert(1)" not in html and "\u202e" not in html


# Unbounded time or memory from small inputs --------------------------------------------------


def test_long_name_renders_in_linear_time(box):
    doc = mini_trace()
    doc["deviceProperties"] = [{"name": "A" * 100_000}]
    doc["traceEvents"][-1]["name"] = "k(" * 50_000
    p = run(box, "analyze", trace(box, doc=doc))
    assert p.returncode == 0 and p.seconds < 30, (p.seconds, p.err)
    assert max(map(len, p.stdout.decode().splitlines())) < 1000


def test_whitespace_gzip_bomb_is_linear(box):
    """256 MiB of whitespace in a small gzip, behind the last event (the reader walked it back
    one byte at a time in Python, and copied the inflated buffer)."""
    doc = json.dumps(mini_trace()).encode()
    cut = doc.rindex(b"]")
    with gzip.open(box / "in" / "ws.json.gz", "wb", compresslevel=1) as f:
        f.write(doc[:cut])
        block = b" " * (1 << 20)
        for _ in range(256):
            f.write(block)
        f.write(doc[cut:])
    p = run(box, "analyze", "in/ws.json.gz", "--format", "json", "--no-cache")
    assert p.returncode == 0 and p.seconds < 40, (p.seconds, p.err)


def test_user_rule_cannot_hang(box):
    doc = mini_trace()
    doc["traceEvents"][-1]["name"] = "a" * 41 + "!"
    rules = box / "in" / "rules.toml"
    rules.write_text("[[rule]]\ncategory = 'GEMM'\nkernel = '(a+)+$'\n")
    p = run(box, "analyze", trace(box, doc=doc), "--kernel-rules", rules, "--format", "json")
    assert p.returncode == 0 and p.seconds < 30, (p.seconds, p.err)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("[[rule]\ncategory = 'x'", "not valid TOML"),
        ("[[rule]]\ncategory = 'GEMM'\nkernel = 'a(?!b)'\n", "linear time"),
        ("[[rule]]\ncategory = 'GEMM'\nkernel = '('\n", "bad kernel rules"),
    ],
)
def test_bad_rules_are_one_line(box, text, needle):
    rules = box / "in" / "rules.toml"
    rules.write_text(text)
    one_line(inproc(box, "analyze", trace(box), "--kernel-rules", rules), 2, needle)


# Caches ----------------------------------------------------------------------------------------


def test_forged_cache_is_a_miss_and_repaired(box, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tracekit.read import cache
    from tracekit.read.reader import DEFAULT_MAX_BYTES

    t = trace(box)
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(box / "cache"))
    key = cache.file_key(t, DEFAULT_MAX_BYTES)
    info = json.dumps({"key": key, "meta": {}, "warnings": []}).encode()
    pq.write_table(pa.table({"x": [1]}).replace_schema_metadata({b"tracekit": info}), cache._entry(key))
    # Files of at most analyse.SMALL_FILE keep only their result entry; store the parsed
    # columns too here, so that the forged entry is read, refused and rewritten.
    monkeypatch.setattr("tracekit.ranks.analyse.SMALL_FILE", -1)
    for _ in range(2):
        p = inproc(box, "analyze", t, "--format", "json")
        assert p.returncode == 0 and p.err == "", p.err
    assert cache.load(t, DEFAULT_MAX_BYTES) is not None  # rewritten
    assert any(e.name.endswith(".result.parquet") for e in cache.entries())


def test_concurrent_runs_share_the_cache(box):
    t = trace(box)
    env = _env(box)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tracekit.cli", "analyze", str(t), "--format", "json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=_limit,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert len({o[0] for o in outs}) == 1
    assert not [q for q in (box / "cache").iterdir() if q.name.endswith(".tmp")]


# Tracebacks and raw bytes ----------------------------------------------------------------------


def test_compare_with_a_zero_duration_op(box):
    zero = mini_trace()
    for e in zero["traceEvents"]:
        if e.get("cat") in ("kernel", "cpu_op", "cuda_runtime"):
            e["dur"] = 0
    p = run(box, "compare", trace(box, "a.json"), trace(box, "b.json", zero))
    assert p.returncode == 0 and p.err == "", p.err


def test_non_utf8_file_name_with_html(box):
    t = trace(box, "t.json")
    odd = box / "in" / os.fsdecode(b"r\xffnk\xfe.json")
    t.rename(odd)
    p = run(box, "analyze", odd, "--format", "html", "--out", "r.html", allowed=("r.html",))
    assert p.returncode == 0, p.err
    assert (box / "r.html").stat().st_size > 1000


def test_non_utf8_rank_directory_with_cache(box):
    d = box / "in" / os.fsdecode(b"run\xff")
    d.mkdir()
    for r in range(2):
        doc = mini_trace()
        doc["distributedInfo"] = {"rank": r, "world_size": 2}
        (d / f"rank{r}.json").write_text(json.dumps(doc))
    for _ in range(2):  # cold, then from the cache
        p = run(box, "analyze", d, "--format", "table")
        assert p.returncode == 0, p.err
        assert "\ufffd" in p.stdout.decode()


@pytest.mark.parametrize(
    "name", ["a\nb\x1b[31mred.json", "\u202egnp.json", "x\u2066y.json", "[link=https:evil.example]click.json"]
)
def test_hostile_file_names_reach_no_terminal_raw(box, name):
    bad = box / "in" / name
    bad.write_bytes(b"{")
    line = one_line(inproc(box, "analyze", bad), 2, "truncated")
    assert "\ufffd" in line or "[link=" in line


def test_hostile_trace_names_in_the_table(box):
    doc = mini_trace()
    doc["deviceProperties"] = [{"name": "GPU\x1b]8;;http://x\x07\u202e"}]
    p = run(box, "analyze", trace(box, doc=doc), "--format", "md")
    assert p.returncode == 0 and not RAW.search(p.stdout.decode()), p.stdout[:300]


def test_progress_bar_does_not_render_markup_in_file_names(tmp_path, monkeypatch):
    import io

    from tracekit.cli import io as cli_io

    t = tmp_path / "[link=https:evil.example]x\u202e.json"
    t.write_text(json.dumps(mini_trace()))

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    err = Tty()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    from tracekit import load

    seen = []
    cli_io.load_with_progress(lambda p, **kw: seen.append(load(p, **kw)), t)
    assert seen
    out = err.getvalue()
    assert "\x1b]8;" not in out and "\u202e" not in out  # no hyperlink escape, no bidi


def test_numpy_warnings_are_one_line(box, tmp_path, monkeypatch):
    from click.testing import CliRunner

    import tracekit.ranks.analyse
    from tracekit.cli import main

    real = tracekit.ranks.analyse.analyse_parts

    def noisy(path, options, **kw):
        import numpy as np

        np.float64(1e308) * np.float64(10)  # RuntimeWarning: overflow
        return real(path, options, **kw)

    monkeypatch.setattr(tracekit.ranks.analyse, "analyse_parts", noisy)
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    r = CliRunner().invoke(main, ["analyze", str(trace(box)), "--format", "json"])
    assert r.exit_code == 0
    expected = "tracekit: warning: RuntimeWarning: overflow encountered in scalar multiply"
    assert r.stderr.splitlines() == [expected]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["analyze", "in/t.json", "--max-bytes", "-5"], "--max-bytes"),
        (["analyze", "in/t.json", "--no-such-option"], "no-such-option"),
        (["analyze"], "PATH"),
        (["analyze", "in/t.json", "--format", "xml"], "--format"),
    ],
)
def test_usage_errors_are_one_line(box, args, needle):
    trace(box)
    one_line(inproc(box, *args), 2, "tracekit: error: ", needle)


# Writes ----------------------------------------------------------------------------------------


def test_out_never_writes_through_a_link(box):
    t = trace(box)
    target = box / "victim.txt"
    target.write_text("precious")
    (box / "link.json").symlink_to(target)
    (box / "dangling.json").symlink_to(box / "created-by-link.json")
    one_line(run(box, "analyze", t, "--format", "json", "--out", "link.json"), 2, "symbolic link")
    one_line(run(box, "analyze", t, "--format", "json", "--out", "dangling.json"), 2, "symbolic link")
    assert target.read_text() == "precious" and not (box / "created-by-link.json").exists()
    (box / "outdir").mkdir()
    (box / "outdir" / "phases.csv").symlink_to(target)
    one_line(run(box, "analyze", t, "--format", "csv", "--out", "outdir"), 2, "phases.csv")
    assert target.read_text() == "precious"
    assert [q.name for q in (box / "outdir").iterdir()] == ["phases.csv"]  # nothing half-done


def test_directory_outputs_appear_whole(box):
    t = trace(box)
    for fmt in ("csv", "parquet"):
        p = run(box, "analyze", t, "--format", fmt, "--out", f"o-{fmt}", allowed=(f"o-{fmt}",))
        assert p.returncode == 0, p.err
        assert {q.suffix for q in (box / f"o-{fmt}").iterdir()} == {"." + fmt}
    p = run(box, "analyze", t, "--format", "html", "--out", "o-csv", allowed=("o-csv",))
    assert p.returncode == 0 and (box / "o-csv" / "report.html").stat().st_size > 1000


@pytest.mark.parametrize(
    "fmt, out", [("json", "r.json"), ("html", "r.html"), ("csv", "d"), ("parquet", "d"), ("table", "r.txt")]
)
def test_full_disk_leaves_nothing_behind(tmp_path, monkeypatch, fmt, out):
    """ENOSPC on the first write (as on a full tmpfs): one line, no temporaries, nothing at
    ``--out`` (or the previous file untouched)."""
    import errno

    from click.testing import CliRunner

    from tracekit import safewrite
    from tracekit.cli import main

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    src = tmp_path / "t.json"
    src.write_text(json.dumps(mini_trace()))
    work = tmp_path / "w"
    work.mkdir()
    if fmt == "json":
        (work / out).write_text("previous")
    real_fdopen, real_open = os.fdopen, open

    class Full:
        def __init__(self, f):
            self.f = f

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(safewrite.os, "fdopen", lambda *a, **k: Full(real_fdopen(*a, **k)))
    monkeypatch.setattr(safewrite, "open", lambda *a, **k: Full(real_open(*a, **k)), raising=False)
    r = CliRunner().invoke(main, ["analyze", str(src), "--format", fmt, "--out", str(work / out)])
    assert r.exit_code == 2, (r.exit_code, r.stderr, r.exception)
    assert len(r.stderr.splitlines()) == 1 and "No space left" in r.stderr, r.stderr
    left = sorted(q.name for q in work.iterdir())
    assert left == (["r.json"] if fmt == "json" else []), left
    if fmt == "json":
        assert (work / out).read_text() == "previous"


def test_interrupted_directory_write_leaves_nothing(tmp_path, monkeypatch):
    from tracekit.safewrite import write_members

    def second(f):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_members(tmp_path / "d", {"a.csv": lambda f: f.write(b"1"), "b.csv": second})
    assert list(tmp_path.iterdir()) == []


# Directories of ranks --------------------------------------------------------------------------


def _ranks(box: Path, n: int = 2) -> Path:
    d = box / "in" / "run"
    d.mkdir()
    for r in range(n):
        doc = mini_trace()
        doc["distributedInfo"] = {"rank": r, "world_size": n}
        (d / f"rank{r}.json").write_text(json.dumps(doc))
    return d


def test_bad_files_in_a_rank_directory_are_skipped_and_named(box):
    d = _ranks(box)
    (d / "rank2.json").write_text(json.dumps(mini_trace())[:200])  # a job killed mid-write
    (d / "config.json").write_text('{"lr": 0.1}')
    os.mkfifo(d / "rank3.json")
    p = run(box, "analyze", d, "--format", "json")
    assert p.returncode == 1, p.err
    lines = p.err.splitlines()
    assert len(lines) == 3 and all(x.startswith("tracekit: warning: skipped ") for x in lines)
    assert {x.split()[3] for x in lines} == {"config.json:", "rank2.json:", "rank3.json:"}
    meta = json.loads(p.stdout)["meta"]
    assert meta["partial"] and meta["ranks"] == [0, 1] and len(meta["skipped"]) == 3
    one_line(run(box, "analyze", d, "--strict"), 2)


def test_copies_are_not_ranks_warning(box):
    d = box / "in" / "copies"
    d.mkdir()
    for i in range(2):
        doc = mini_trace()
        doc["distributedInfo"] = {"rank": 0, "world_size": 1}
        (d / f"w{i}.json").write_text(json.dumps(doc))
    p = run(box, "analyze", d, "--format", "json")
    assert p.returncode == 0 and "rank 0 of world size 1" in p.err, p.err


@pytest.mark.parametrize("where", ["task", "start"])
def test_ctrl_c_with_jobs_is_one_line_and_exit_130(box, where):
    """Ctrl-C while the pool works (``task``) or while its workers start (``start``): one line,
    exit 130, no hang. The signal is sent once a worker says it is there, and the workers
    never finish (see :data:`signal_harness.HELD`): the test no longer races its own signal
    (it sent it when the pool had children and, on a loaded machine, could land after the
    run; exit 0)."""
    d = _ranks(box, 4)
    with held_run(where, ["analyze", d, "-j", "2", "--no-cache"], _env(box)) as p:
        err = signal_group(p, signal.SIGINT, "Ctrl-C")  # as a terminal does: the whole group
    assert p.returncode == 130, (p.returncode, err)
    assert err.decode().splitlines() == ["tracekit: interrupted"]


def test_api_partial_result_and_every_warning_in_analysis_warnings(box, monkeypatch):
    import tracekit

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(box / "cache"))
    d = _ranks(box)
    (d / "rank2.json").write_text("{")
    a = tracekit.load(d)
    assert sorted(a.ranks) == [0, 1] and a.skipped == [
        {"file": "rank2.json", "problem": "truncated JSON (the file ends early)"}
    ]
    assert [w.as_dict() for w in a.warnings] == a.meta["warnings"]
    assert any(w.code == "skipped_file" for w in a.warnings) and a.meta["partial"]
    with pytest.raises(tracekit.TraceError, match="rank2.json"):
        tracekit.load(d, strict=True)
