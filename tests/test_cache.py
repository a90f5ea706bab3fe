"""The Parquet cache of parsed columns: in the user's cache directory only, keyed by the bytes
actually read, bounded, self-repairing, off with --no-cache."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from shared_traces import SHARED

import tracekit
import tracekit.ranks.analyse
from tracekit.cli import main
from tracekit.read import cache
from tracekit.read.reader import DEFAULT_MAX_BYTES, read_trace
from tracekit.testing import llama_training, write_trace

SRC = SHARED / "hta" / "trace_filter__sampled_rank-0.json.gz"


@pytest.fixture
def trace(tmp_path, monkeypatch):
    """A real trace when ../shared is here, else a synthetic one: the cache is tested either way
    (as a big file: a small file's parsed columns are not stored beside its result)."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cachedir"))
    monkeypatch.setattr("tracekit.ranks.analyse.SMALL_FILE", -1)
    (tmp_path / "t").mkdir()
    if SRC.is_file():
        p = tmp_path / "t" / SRC.name
        shutil.copy(SRC, p)
        return p
    return write_trace(tmp_path / "t" / "rank0.pt.trace.json.gz", llama_training(n_steps=2)[0])


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_a_small_file_is_cached_as_its_result_only(tmp_path, monkeypatch):
    """One entry per small file (the result), and a re-analysis with other rule files (a
    result miss) reads the file again: the parse cache would save little for a small file."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cachedir"))
    p = write_trace(tmp_path / "rank0.pt.trace.json.gz", llama_training(n_steps=2)[0])
    fresh = tracekit.load(p, cache=False).tables()
    first = tracekit.load(p).tables()
    assert [e.name.endswith(".result.parquet") for e in cache.entries()] == [True]
    rules = tmp_path / "rules.toml"
    rules.write_text("")
    again = tracekit.load(p, kernel_rules=str(rules)).tables()
    assert len(cache.entries()) == 2 and all(e.name.endswith(".result.parquet") for e in cache.entries())
    for name in fresh:
        pd.testing.assert_frame_equal(fresh[name], first[name])
        pd.testing.assert_frame_equal(fresh[name], again[name])


def _store(trace: Path) -> Path:
    key = cache.file_key(trace, DEFAULT_MAX_BYTES)
    return cache.store(read_trace(trace), trace, DEFAULT_MAX_BYTES, key)


def test_cache_round_trip_is_exact(trace, tmp_path):
    raw = read_trace(trace)
    loc = cache.store(raw, trace, DEFAULT_MAX_BYTES, cache.file_key(trace, DEFAULT_MAX_BYTES))
    assert loc.parent == tmp_path / "cachedir"
    assert _listing(trace.parent) == {trace.name}  # nothing beside the trace
    back = cache.load(trace, DEFAULT_MAX_BYTES)
    events, memory = back.split()  # one table in the entry: split again as the reader splits
    pd.testing.assert_frame_equal(raw.events, events)
    pd.testing.assert_frame_equal(raw.memory, memory)
    assert back.meta == raw.meta and back.warnings == raw.warnings


def test_default_location_is_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEKIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "tracekit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "tracekit"


def test_cached_analysis_equals_fresh(trace, monkeypatch, tmp_path):
    fresh = tracekit.load(trace, cache=False).tables(per_step=True)
    assert not (tmp_path / "cachedir").exists()  # --no-cache writes nothing
    first = tracekit.load(trace).tables(per_step=True)
    # one entry of parsed columns, one of the analysis (tracekit.ranks.results)
    assert len(cache.entries()) == 2 and _listing(trace.parent) == {trace.name}
    # The second load must come from the cache: reading the JSON now fails.
    monkeypatch.setattr("tracekit.ranks.analyse.read_trace", lambda *a, **k: pytest.fail("re-read"))
    second = tracekit.load(trace).tables(per_step=True)
    for name in fresh:
        pd.testing.assert_frame_equal(fresh[name], first[name])
        pd.testing.assert_frame_equal(fresh[name], second[name])


def test_changed_file_invalidates(trace):
    loc = _store(trace)
    assert cache.load(trace, DEFAULT_MAX_BYTES) is not None
    st = trace.stat()
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert cache.load(trace, DEFAULT_MAX_BYTES) is None  # same bytes, new identity: a miss
    assert cache.load(trace, DEFAULT_MAX_BYTES + 1) is None  # other read limit: a miss
    _store(trace)
    assert cache.load(trace, DEFAULT_MAX_BYTES) is not None
    loc = cache._entry(cache.file_key(trace, DEFAULT_MAX_BYTES))
    loc.write_bytes(b"garbage")  # a corrupt entry is a miss, not an error, and is rewritten
    assert cache.load(trace, DEFAULT_MAX_BYTES) is None
    tracekit.load(trace)
    assert cache.load(trace, DEFAULT_MAX_BYTES) is not None


def test_trace_replaced_while_read_is_not_cached(trace, monkeypatch):
    """The key is the identity of the bytes read: a file replaced during the read caches nothing
    (else every later run would print the old numbers under the new file's key)."""
    real_read = tracekit.ranks.analyse.read_trace
    other = write_trace(trace.parent / "other.json", llama_training(n_steps=3, seed=7)[0])

    def read_then_replace(path, max_bytes, jobs=1):
        raw = real_read(path, max_bytes, jobs)
        os.replace(other, path)  # a new inode, new size: the trace changed under us
        return raw

    monkeypatch.setattr("tracekit.ranks.analyse.read_trace", read_then_replace)
    tracekit.load(trace)
    assert cache.entries() == []
    monkeypatch.setattr("tracekit.ranks.analyse.read_trace", real_read)
    fresh = tracekit.load(trace, cache=False).table("phases", per_step=True)
    pd.testing.assert_frame_equal(tracekit.load(trace).table("phases", per_step=True), fresh)


def _forge(loc: Path, key: str, table: pa.Table, meta=None) -> None:
    info = json.dumps({"key": key, "meta": meta or {}, "warnings": []}).encode()
    pq.write_table(table.replace_schema_metadata({b"tracekit": info}), loc)


def test_forged_cache_with_right_key_and_wrong_columns_is_a_miss_and_repaired(trace):
    loc = _store(trace)
    key = cache.file_key(trace, DEFAULT_MAX_BYTES)
    _forge(loc, key, pa.table({"x": [1, 2, 3]}))
    assert cache.load(trace, DEFAULT_MAX_BYTES) is None
    a = tracekit.load(trace)  # analyses, and rewrites the entry
    assert "phases" in a.tables()
    assert cache.load(trace, DEFAULT_MAX_BYTES) is not None


def test_oversized_forged_cache_is_refused_from_its_footer(tmp_path, monkeypatch):
    """An entry whose columns would expand far beyond the trace's size is never decoded."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    trace = write_trace(tmp_path / "small.json.gz", llama_training(n_layers=1, n_steps=1)[0])
    monkeypatch.setattr(cache, "_SLACK", 0)  # the bound without its slack: a small test
    loc = _store(trace)
    good = pq.read_table(loc)
    key = cache.file_key(trace, DEFAULT_MAX_BYTES)
    n = cache._EXPANSION * trace.stat().st_size // 8 + 1  # int64 bytes past it
    big = pa.table(
        {
            c: pa.array(range(n), type=pa.int64())
            if good.schema.field(c).type == pa.int64()
            else pa.nulls(n, good.schema.field(c).type)
            for c in good.column_names
        }
    )
    _forge(loc, key, big, meta=read_trace(trace).meta)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("decoded"))
    assert cache.load(trace, DEFAULT_MAX_BYTES) is None


def test_size_bound_evicts_least_recently_used(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    traces = [write_trace(tmp_path / f"r{i}.json", llama_training(n_steps=2, seed=i)[0]) for i in range(3)]
    locs = [_store(t) for t in traces[:2]]
    os.utime(locs[0], ns=(1, 1))  # entry 0 is the least recently used
    a, b = (p.stat().st_size for p in locs)  # room for two entries of about this size, not three
    monkeypatch.setenv("TRACEKIT_CACHE_MAX_BYTES", str(b + a * 3 // 2))
    third = _store(traces[2])
    assert not locs[0].exists() and locs[1].exists() and third.exists()


def test_cli_no_cache_and_cache_commands(trace, tmp_path):
    run = CliRunner().invoke
    r = run(main, ["analyze", str(trace), "--format", "json", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert cache.entries() == []
    r = run(main, ["analyze", str(trace), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert len(cache.entries()) == 2 and _listing(trace.parent) == {trace.name}
    r = run(main, ["cache", "info"])
    assert r.exit_code == 0 and "2 entries (1 analysis result)" in r.output, r.output
    (tmp_path / "cachedir" / "unrelated.txt").write_text("mine")
    r = run(main, ["cache", "clear"])
    assert r.exit_code == 0 and "removed 2 files" in r.output
    assert cache.entries() == [] and (tmp_path / "cachedir" / "unrelated.txt").exists()


def test_many_stores_do_not_list_the_directory_each_time(tmp_path, monkeypatch):
    """The bound is kept without listing every entry after every write (quadratic in the entry
    count for a run of thousands of ranks); a full directory is still brought under it."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "c"))
    traces = [
        write_trace(tmp_path / f"r{i}.json", llama_training(n_steps=1, n_layers=1, seed=i)[0])
        for i in range(12)
    ]
    listed = []
    real = cache.entries
    monkeypatch.setattr(cache, "entries", lambda: listed.append(1) or real())
    locs = [_store(t) for t in traces[:8]]
    assert len(listed) == 1  # the first store lists; the room found covers the next ones
    size = max(p.stat().st_size for p in locs)
    monkeypatch.setenv("TRACEKIT_CACHE_MAX_BYTES", str(size * 5))  # a new bound: listed again
    for t in traces[8:]:
        _store(t)
    assert sum(p.stat().st_size for p in real()) <= size * 5
    assert len(listed) < 1 + 4 + 1
