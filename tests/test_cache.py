"""The Parquet cache of parsed columns: same result, keyed by file identity, off with --no-cache."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from synthetic import make_trace, write_trace
from tracekit import cache
from tracekit.read import DEFAULT_MAX_BYTES, read_trace

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"
SRC = SHARED / "hta" / "trace_filter__sampled_rank-0.json.gz"


@pytest.fixture
def trace(tmp_path, monkeypatch):
    """A real trace when ../shared is here, else a synthetic one: the cache is tested either way."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cachedir"))
    (tmp_path / "t").mkdir()
    if SRC.is_file():
        p = tmp_path / "t" / SRC.name
        shutil.copy(SRC, p)
        return p
    return write_trace(tmp_path / "t" / "rank0.pt.trace.json.gz", make_trace(n_steps=2)[0])


def _tables(a):
    return a.tables(per_step=True)


def test_cache_round_trip_is_exact(trace):
    raw = read_trace(trace)
    loc = cache.store(raw, trace, DEFAULT_MAX_BYTES)
    assert loc == trace.with_name(trace.name + cache.SUFFIX)
    back = cache.load(trace, DEFAULT_MAX_BYTES)
    pd.testing.assert_frame_equal(raw.events, back.events)
    assert back.meta == raw.meta and back.warnings == raw.warnings


def test_cached_analysis_equals_fresh(trace, monkeypatch):
    fresh = _tables(tracekit.load(trace, cache=False))
    assert not trace.with_name(trace.name + cache.SUFFIX).exists()  # --no-cache writes nothing
    first = _tables(tracekit.load(trace))
    assert trace.with_name(trace.name + cache.SUFFIX).exists()
    # The second load must come from the cache: reading the JSON now fails.
    monkeypatch.setattr("tracekit.analysis.read_trace", lambda *a, **k: pytest.fail("re-read"))
    second = _tables(tracekit.load(trace))
    for name in fresh:
        pd.testing.assert_frame_equal(fresh[name], first[name])
        pd.testing.assert_frame_equal(fresh[name], second[name])


def test_changed_file_invalidates(trace):
    tracekit.load(trace)
    loc = trace.with_name(trace.name + cache.SUFFIX)
    assert cache.load(trace, DEFAULT_MAX_BYTES) is not None
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.load(trace, DEFAULT_MAX_BYTES) is None  # same bytes, new identity: a miss
    assert cache.load(trace, DEFAULT_MAX_BYTES + 1) is None  # other read limit: a miss
    loc.write_bytes(b"garbage")  # a corrupt entry is a miss, not an error
    assert cache.load(trace, DEFAULT_MAX_BYTES) is None
    tracekit.load(trace)
    assert cache.load(trace, DEFAULT_MAX_BYTES) is not None


def test_read_only_folder_uses_cache_dir(trace, tmp_path):
    folder = trace.parent
    folder.chmod(0o555)
    try:
        tracekit.load(trace)
        assert not trace.with_name(trace.name + cache.SUFFIX).exists()
        assert list((tmp_path / "cachedir").glob("*" + cache.SUFFIX))
        assert cache.load(trace, DEFAULT_MAX_BYTES) is not None
    finally:
        folder.chmod(0o755)


def test_cli_no_cache(trace):
    from click.testing import CliRunner

    from tracekit.cli import main
    r = CliRunner().invoke(main, ["analyze", str(trace), "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert not trace.with_name(trace.name + cache.SUFFIX).exists()
    r = CliRunner().invoke(main, ["analyze", str(trace), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert trace.with_name(trace.name + cache.SUFFIX).exists()
