"""Paths (issue 6): rank directories refuse escaping symlinks; output stays inside ``--out``.

Names from a trace (kernels, threads, processes, ranks) never become path components: the only
files tracekit writes are the ones the user named (``--out``), plus its parse cache beside the
trace unless ``--no-cache``. Capture refuses to replace a previous run without ``--force``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from bad_inputs import analyze, assert_one_line_error, fingerprint, mini_trace, write
from click.testing import CliRunner
from tracekit.analyses import REGISTRY
from tracekit.analyses._registry import MEMORY_EVENTS

TABLES = [  # a bare trace's: no cross-rank, manifest or memory table
    n
    for n, s in REGISTRY.items()
    if not s.cross_rank and s.from_manifest is None and s.reads != MEMORY_EVENTS
]

pytestmark = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")

EVIL_NAMES = [
    "../../escaped",
    "/tmp/abs_escape",
    "..",
    "a/b/c",
    "C:\\windows\\x",
    "\x00nul",
    "rank0.json",
    "~/.bashrc",
    "phases.csv/../../x",
]


def _rank_dir(root: Path, n: int = 2) -> Path:
    d = root / "ranks"
    d.mkdir()
    for r in range(n):
        t = mini_trace()
        t["distributedInfo"] = {"rank": r, "world_size": n}
        write(d / f"rank{r}.json", t)
    return d


def _files(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def test_symlink_to_a_file_outside_the_directory_is_refused(tmp_path):
    d = _rank_dir(tmp_path)
    outside = write(tmp_path / "secret.json", mini_trace())
    (d / "rank2.json").symlink_to(outside)
    assert_one_line_error(analyze(d), d / "rank2.json", "outside the trace directory")


def test_relative_symlink_climbing_out_is_refused(tmp_path):
    d = _rank_dir(tmp_path)
    write(tmp_path / "other.json", mini_trace())
    (d / "rank2.json").symlink_to(Path("..") / "other.json")
    assert_one_line_error(analyze(d), d / "rank2.json", "outside the trace directory")


def test_symlink_to_a_system_file_or_device_is_refused(tmp_path):
    d = _rank_dir(tmp_path)
    (d / "rank2.json.gz").symlink_to("/dev/zero")
    assert_one_line_error(analyze(d), d / "rank2.json.gz", "outside the trace directory")


def test_symlinked_directory_outside_is_refused(tmp_path):
    d = _rank_dir(tmp_path)
    other = tmp_path / "elsewhere.json"
    other.mkdir()
    (d / "sub.json").symlink_to(other)
    assert_one_line_error(analyze(d), d / "sub.json", "outside the trace directory")


def test_symlink_inside_the_directory_is_followed(tmp_path):
    d = _rank_dir(tmp_path)
    (d / "store").mkdir()
    t = mini_trace()
    t["distributedInfo"] = {"rank": 5, "world_size": 6}
    write(d / "store" / "r5.data", t)
    (d / "rank5.json").symlink_to(Path("store") / "r5.data")
    r = analyze(d, "--format", "json", "--no-cache")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["meta"]["ranks"] == [0, 1, 5]


def test_the_directory_named_by_the_user_may_itself_be_a_symlink(tmp_path):
    d = _rank_dir(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(d)
    r = analyze(link, "--format", "json", "--no-cache")
    assert r.exit_code == 0, r.stderr


def test_dangling_symlink_is_skipped_and_named(tmp_path):
    d = _rank_dir(tmp_path)
    (d / "gone.json").symlink_to(d / "missing.json")
    r = analyze(d, "--format", "json", "--no-cache")
    assert r.exit_code == 1, r.stderr  # a partial result: a rank file is missing
    assert r.stderr.splitlines() == ["tracekit: warning: skipped gone.json: dangling symlink"]
    meta = json.loads(r.stdout)["meta"]
    assert meta["ranks"] == [0, 1] and meta["partial"]
    assert meta["skipped"] == [{"file": "gone.json", "problem": "dangling symlink"}]


def test_looping_symlink_is_one_line(tmp_path):
    d = _rank_dir(tmp_path)
    (d / "loop.json").symlink_to(d / "loop.json")  # resolve() raised RuntimeError here
    assert_one_line_error(analyze(d, "--no-cache"), d / "loop.json", "symlink loop")


def _evil_trace() -> dict:
    t = mini_trace()
    for i, e in enumerate(t["traceEvents"]):
        if e.get("cat") in ("kernel", "cpu_op"):
            e["name"] = EVIL_NAMES[i % len(EVIL_NAMES)]
        if e["ph"] == "M":
            e["args"]["name"] = "../../../thread"
    t["distributedInfo"] = {"rank": 0, "world_size": 1, "backend": "../../x"}
    t["deviceProperties"] = [{"name": "../../gpu"}]
    return t


@pytest.mark.parametrize(
    "fmt,out",
    [
        ("csv", "outdir"),
        ("parquet", "outdir"),
        ("csv", "t.csv"),
        ("json", "t.json"),
        ("md", "t.md"),
        ("table", "t.txt"),
        ("html", "t.html"),
    ],
)
def test_output_stays_inside_out(tmp_path, fmt, out):
    src = tmp_path / "in"
    src.mkdir()
    trace = write(src / "evil.json", _evil_trace())
    work = tmp_path / "work"
    work.mkdir()
    before_in, before_work = _files(src), _files(work)
    fp = fingerprint(trace)
    cwd = os.getcwd()
    os.chdir(work)  # relative names from the trace would land here
    try:
        r = analyze(trace, "--format", fmt, "--out", out, "--no-cache")
    finally:
        os.chdir(cwd)
    assert r.exit_code == 0, r.stderr
    assert _files(src) == before_in and fingerprint(trace) == fp  # input untouched
    new = _files(work) - before_work
    if out == "outdir":
        suffix = "." + fmt
        assert new == {Path(out) / f"{name}{suffix}" for name in TABLES}, new
    else:
        assert new == {Path(out)}, new
    # Nothing appeared anywhere else under the test's root.
    assert not list(tmp_path.parent.glob("escaped*")) and not Path("/tmp/abs_escape").exists()


def test_cache_is_written_only_in_the_cache_dir(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cache))
    src = tmp_path / "in"
    src.mkdir()
    trace = write(src / "evil.json", _evil_trace())
    r = analyze(trace, "--format", "json")
    assert r.exit_code == 0, r.stderr
    assert _files(src) == {Path("evil.json")}  # nothing beside the trace
    assert _files(cache) and all(
        p.suffix == ".parquet" or p.name == ".seal-key" for p in _files(cache)
    )  # entries and their seal key


def test_unwritable_out_is_one_line(tmp_path):
    trace = write(tmp_path / "t.json", mini_trace())
    assert_one_line_error(
        analyze(trace, "--format", "json", "--out", tmp_path / "no" / "x.json"),
        tmp_path / "no" / "x.json",
        "cannot write",
    )
    (tmp_path / "afile").write_text("x")
    assert_one_line_error(
        analyze(trace, "--format", "csv", "--out", tmp_path / "afile" / "d"),
        tmp_path / "afile" / "d",
        "cannot write",
    )


def test_capture_refuses_to_overwrite_a_previous_run_without_force(tmp_path):
    from tracekit.capture.cli import capture  # shipped with tracekit; imports no torch

    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text('{"status": "finished"}')
    (out / "rank0.1.pt.trace.json.gz").write_bytes(b"previous")
    before = _files(out)
    r = CliRunner().invoke(capture, ["train", "--out", str(out)])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--force" in lines[0] and "Traceback" not in r.output
    assert _files(out) == before and (out / "rank0.1.pt.trace.json.gz").read_bytes() == b"previous"


def test_capture_force_never_deletes_files_it_did_not_write(tmp_path):
    from tracekit.capture.cli import capture  # shipped with tracekit; imports no torch

    out = tmp_path / "run"
    out.mkdir()
    (out / "thesis.tex").write_text("years of work")
    r = CliRunner().invoke(capture, ["train", "--force", "--out", str(out)])
    assert r.exit_code == 2, r.output
    assert "did not write" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert (out / "thesis.tex").read_text() == "years of work"
