"""Nothing is ever written beside an analysed input: every real trace (../shared) and sample is
analysed, cache on, from a read-only copy, through the API and the CLI, and the copy's listing
(and ../shared's own) must not change. Root ignores file modes, so the listing is what is checked;
the read-only modes make a write fail loudly for everyone else."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_traces import SHARED, shared_traces

import tracekit
from tracekit.cli import main

pytestmark = pytest.mark.shared

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _listing(root: Path) -> dict[Path, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            st = p.lstat()
            out[p.relative_to(root)] = (st.st_size, st.st_mtime_ns)
    return out


def _read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath, n)
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    root.chmod(root.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


@pytest.fixture
def read_only_copy(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "traces"
    root.mkdir()
    for src in shared_traces():
        (root / src.parent.name).mkdir(exist_ok=True)
        shutil.copy2(src, root / src.parent.name / src.name)
    if SAMPLES.is_dir():
        for d in sorted(p for p in SAMPLES.iterdir() if p.is_dir()):
            shutil.copytree(d, root / "samples" / d.name)
    assert any(root.iterdir()), "neither ../shared traces nor sample_traces found"
    _read_only(root)
    yield root
    for dirpath, dirnames, _ in os.walk(root):  # let pytest clean up
        Path(dirpath).chmod(0o755)


def test_analyses_write_nothing_beside_read_only_traces(read_only_copy, tmp_path):
    root = read_only_copy
    shared_before = _listing(SHARED) if SHARED.is_dir() else {}
    before = _listing(root)
    inputs = sorted(
        p for p in root.glob("*/*") if p.name.endswith((".json", ".json.gz")) or p.parent.name == "samples"
    )
    for p in inputs:  # the API (filling the cache)
        assert tracekit.load(p).tables()
    for i, p in enumerate(inputs[::4] + [p for p in inputs if p.is_dir()]):  # the CLI (warm)
        for fmt in ("json", "table"):
            r = CliRunner().invoke(main, ["analyze", str(p), "--format", fmt])
            assert r.exit_code in (0, 1), (p, r.stderr)
        out = tmp_path / "out" / f"report{i}"
        r = CliRunner().invoke(main, ["analyze", str(p), "--format", "html", "--out", str(out)])
        assert r.exit_code in (0, 1) and (out / "report.html").is_file(), r.stderr
    assert _listing(root) == before
    assert list((tmp_path / "cache").glob("*.parquet"))  # the cache was used, elsewhere
    if SHARED.is_dir():
        assert _listing(SHARED) == shared_before
