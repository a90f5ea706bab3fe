"""The result cache (tracekit/ranks/results.py): a re-analysis takes every table from the cache
without running the pipeline, equal to a cold analysis on every golden trace; the intervals are
read only when a view needs them; anything changed, forged or broken is a miss, not an error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from golden import golden_name, sources
from shared_traces import param

import tracekit
import tracekit.ranks.analyse
from tracekit import explain
from tracekit.compare import compare
from tracekit.filters import Filters
from tracekit.ranks import results
from tracekit.ranks.analyse import Options
from tracekit.read import cache
from tracekit.testing import llama_training, write_trace

SOURCES = sources()


@pytest.fixture
def cachedir(tmp_path, monkeypatch):
    d = tmp_path / "cachedir"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(d))
    return d


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "in" / src.name
    dst.parent.mkdir()
    (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    return dst


def _no_pipeline(monkeypatch) -> None:
    def refuse(*a, **k):
        raise AssertionError("the pipeline ran")

    monkeypatch.setattr("tracekit.pipeline.run", refuse)
    monkeypatch.setattr("tracekit.ranks.analyse.run", refuse)
    monkeypatch.setattr("tracekit.ranks.analyse.read_trace", refuse)


def _same_tables(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name, want in a.items():
        pd.testing.assert_frame_equal(want, b[name], obj=name)


def _views(a: tracekit.Analysis) -> dict:
    """Everything a cached analysis must give as a cold one does: the tables (means and per
    step), meta, warnings, the tables under --step and --module, compare against itself."""
    out = {"mean": a.tables(), "per_step": a.tables(per_step=True)}
    done = sorted({s for r in a.meta["complete_steps"].values() for s in r})
    if done:
        out["step"] = a.filtered(Filters(steps=[done[0]])).tables(per_step=True)
    modules = out["mean"]["modules"]
    if len(modules):
        out["module"] = a.filtered(Filters(module=str(modules["module"].iloc[0]))).tables()
    out["compare"] = {k: v for k, v in compare(a, a).items() if isinstance(v, pd.DataFrame)}
    return out


def _meta(a: tracekit.Analysis) -> dict:
    return json.loads(json.dumps(a.meta, default=str))


@pytest.mark.parametrize("src", [param(s, golden_name(s)[:60]) for s in SOURCES])
def test_cached_result_equals_cold_without_running_the_pipeline(src, tmp_path, cachedir, monkeypatch):
    path = _copy(src, tmp_path)
    cold = tracekit.load(path, cache=False, jobs=1)
    first = tracekit.load(path, jobs=1)  # analyses and stores
    assert any(p.name.endswith(results.SUFFIX) for p in cache.entries())
    _no_pipeline(monkeypatch)
    second = tracekit.load(path, jobs=1)
    assert all(att.lazy for att in second.ranks.values()) or path.is_dir()
    want = _views(cold)
    for got in (first, second):
        assert _meta(got) == _meta(cold)
        views = _views(got)
        assert list(views) == list(want)
        for kind in want:
            _same_tables(want[kind], views[kind])
    pd.testing.assert_frame_equal(second.intervals, cold.intervals)


@pytest.mark.shared
def test_explain_from_the_cache_equals_cold(tmp_path, cachedir):
    src = next((s for s in SOURCES if s.name.startswith("trace_filter__sampled_rank-0")), None)
    if src is None:
        pytest.skip("the shared trace trace_filter__sampled_rank-0 is absent (no ../shared)")
    path = _copy(src, tmp_path)
    cold = explain.run(path, "nccl|gemm", options=Options(cache=False))
    tracekit.load(path)
    assert explain.run(path, "nccl|gemm") == cold
    assert explain.run(path, "nccl|gemm") == cold


@pytest.fixture
def trace(tmp_path, cachedir):
    trace, _ = llama_training(n_steps=3, n_layers=2, seed=5)
    (tmp_path / "t").mkdir()
    return write_trace(tmp_path / "t" / "rank0.pt.trace.json", trace)


def _result_entry() -> Path:
    (loc,) = [p for p in cache.entries() if p.name.endswith(results.SUFFIX)]
    return loc


def test_tables_come_without_loading_the_intervals(trace, monkeypatch):
    cold = tracekit.load(trace, cache=False).tables()
    tracekit.load(trace)
    _no_pipeline(monkeypatch)
    a = tracekit.load(trace)
    read = []
    real = results.Stored.load
    monkeypatch.setattr(
        results.Stored, "load", lambda self, columns=None: read.append(columns) or real(self, columns)
    )
    _same_tables(cold, a.tables())
    assert read == []  # the means came from the entry's footer
    a.table("phases", per_step=True)
    a.filtered(Filters(module="Attention"))
    assert read == [None, ["module"]]  # on demand, a filter reads one column


@pytest.mark.parametrize("change", ["taxonomy", "kernel_rules"])
def test_changed_rules_file_misses(trace, tmp_path, monkeypatch, change):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\ncategory = "Other"\nkernel = "no_such_kernel_zzz"\n')
    kw = {change: str(rules)}
    tracekit.load(trace, **kw).tables()
    rules.write_text('[[rule]]\ncategory = "Other"\nkernel = "no_such_kernel_yyy"\n')
    ran = []
    real = tracekit.ranks.analyse.run
    monkeypatch.setattr("tracekit.ranks.analyse.run", lambda *a: ran.append(1) or real(*a))
    tracekit.load(trace, **kw).tables()
    assert ran == [1]  # the rules' content changed: the result is computed again
    tracekit.load(trace, **kw).tables()
    tracekit.load(trace).tables()  # the built-in rules are another entry
    assert ran == [1, 1]


def _break(loc: Path, how: str) -> None:
    if how == "garbage":
        loc.write_bytes(b"PAR1 not really")
    elif how == "truncated":
        loc.write_bytes(loc.read_bytes()[: loc.stat().st_size // 2])
    elif how == "foreign":  # a well-formed Parquet file that tracekit did not write
        pq.write_table(pa.table({"x": [1, 2]}), loc)
    elif how == "wrong_key":
        t = pq.read_table(loc)
        md = dict(t.schema.metadata)
        info = json.loads(md[b"tracekit-result"])
        md[b"tracekit-result"] = json.dumps({**info, "key": "another"}).encode()
        pq.write_table(t.replace_schema_metadata(md), loc)
    elif how in ("forged_table", "forged_codes", "truncated_frames"):
        _forge_frames(loc, how)


def _forge_frames(loc: Path, how: str) -> None:
    """The right key, and small frames (the footer's IPC stream, tracekit/ranks/packed_ipc.py) that
    are not what tracekit writes: a column of another type (timestamps), a label code past
    its words, or the stream cut short."""
    t = pq.read_table(loc)
    md = dict(t.schema.metadata)
    blob = md[b"tracekit-frames"]
    if how == "truncated_frames":
        md[b"tracekit-frames"] = blob[: len(blob) // 2]
    else:
        batch = pa.ipc.open_stream(blob).read_all()
        info = json.loads(md[b"tracekit-result"])
        if how == "forged_table":  # steps' first column (step numbers) as timestamps
            name, values = "0.0", pa.array([1], pa.timestamp("s"))
        else:  # the first label column of any frame: a code no word stands for
            i, j = next(
                (i, j)
                for i, d in enumerate(info["frames"])
                for j, tag in enumerate(d["tags"])
                if tag[0] in ("str", "obj") and f"{i}.{j}.w" in batch.column_names
            )
            name = f"{i}.{j}"
            codes = batch.column(name).combine_chunks().flatten().to_numpy().copy()
            codes[0] = 10**6  # the same length as its frame's other columns
            values = pa.array(codes, pa.int32())
        col = pa.ListArray.from_arrays(pa.array([0, len(values)], pa.int32()), values)
        batch = batch.set_column(batch.column_names.index(name), name, col)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema) as w:
            w.write_table(batch)
        md[b"tracekit-frames"] = sink.getvalue().to_pybytes()
    pq.write_table(t.replace_schema_metadata(md), loc)


@pytest.mark.parametrize(
    "how",
    ["garbage", "truncated", "foreign", "wrong_key", "forged_table", "forged_codes", "truncated_frames"],
)
def test_broken_entry_is_a_miss_and_rewritten(trace, monkeypatch, how):
    cold = tracekit.load(trace, cache=False).tables(per_step=True)
    tracekit.load(trace)
    loc = _result_entry()
    _break(loc, how)
    assert results.load(trace, Options()) is None
    _same_tables(cold, tracekit.load(trace).tables(per_step=True))  # analysed again
    _no_pipeline(monkeypatch)
    _same_tables(cold, tracekit.load(trace).tables(per_step=True))  # and stored again


@pytest.mark.parametrize("how", ["gone", "garbage"])
def test_intervals_lost_after_the_summary_are_computed_again(trace, how):
    """An entry evicted or spoilt between reading its tables and needing its intervals: the
    intervals come from analysing the file again, equal, not an error."""
    cold = tracekit.load(trace, cache=False).tables(per_step=True)
    tracekit.load(trace)
    a = tracekit.load(trace)
    assert a.ranks[0].lazy
    loc = _result_entry()
    loc.unlink() if how == "gone" else _break(loc, how)
    _same_tables(cold, a.tables(per_step=True))
    assert results.load(trace, Options()) is not None


def test_trace_changed_before_the_intervals_are_read_is_an_error(trace):
    tracekit.load(trace)
    a = tracekit.load(trace)
    _result_entry().unlink()
    write_trace(trace, llama_training(n_steps=2, seed=9)[0])
    with pytest.raises(tracekit.TraceError, match="changed since it was analysed"):
        a.tables(per_step=True)


def test_oversized_entry_is_refused_from_its_size(trace, monkeypatch):
    tracekit.load(trace)
    monkeypatch.setattr(cache, "_SLACK", 0)
    monkeypatch.setattr(cache, "_EXPANSION", 0)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("decoded"))
    assert results.load(trace, Options()) is None


@pytest.mark.parametrize("small_rows", [1 << 16, 0])
def test_small_and_big_entries_read_back_exactly(trace, monkeypatch, small_rows):
    """An entry of at most results.SMALL_ENTRY_ROWS intervals is written with lz4 (no column
    statistics), a bigger one with zstd: either reads back as the cold analysis."""
    monkeypatch.setattr(results, "SMALL_ENTRY_ROWS", small_rows)
    cold = tracekit.load(trace, cache=False)
    tracekit.load(trace)
    column = pq.ParquetFile(_result_entry()).metadata.row_group(0).column(0)
    assert column.compression == ("LZ4" if small_rows else "ZSTD")
    assert column.is_stats_set == (not small_rows)
    _no_pipeline(monkeypatch)
    again = tracekit.load(trace)
    _same_tables(cold.tables(per_step=True), again.tables(per_step=True))
    pd.testing.assert_frame_equal(again.intervals, cold.intervals, check_exact=True)


@pytest.mark.parametrize("own_arrays", [True, False])
def test_intervals_become_the_arrow_table_from_pandas_gives(trace, monkeypatch, own_arrays):
    """An entry's columns are built from the frame's arrays (results._arrow), with or without
    pandas' own column iteration: the table pa.Table.from_pandas gives, metadata aside, for
    every kind of column (NaN, missing labels, unused and ordered categories); frames that
    would not read back the same are refused."""
    if not own_arrays:
        monkeypatch.delattr(pd.DataFrame, "_iter_column_arrays", raising=False)
    mixed = pd.DataFrame(
        {
            "step": pd.array([1, 2, 3], "int64"),
            "ms": [0.1, float("nan"), -0.0],
            "ok": [True, False, True],
            "kind": pd.array([1, 2, 3], "int8"),
            "phase": pd.Categorical(
                ["backward", None, "forward"], categories=["forward", "backward", "unused"]
            ),
            "rank": pd.Categorical(["b", "a", "b"], categories=["b", "a"], ordered=True),
            "window": pd.array(["a", None, "a"], dtype="str"),
            "label": pd.Series(["x", None, "x"], dtype=object),
        }
    )
    intervals = tracekit.load(trace, cache=False).intervals
    for df in (mixed, pd.DataFrame(columns=["step", "name"]), intervals):
        want = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
        got = results._arrow(df)
        assert got.schema.equals(want.schema, check_metadata=True) and got.equals(want)
    for bad in (mixed.set_axis(["a"] * 8, axis=1), mixed.set_axis(range(8), axis=1), mixed.iloc[1:]):
        with pytest.raises(ValueError):
            results._arrow(bad)


def test_one_lru_bound_over_both_kinds(tmp_path, cachedir, monkeypatch):
    monkeypatch.setattr("tracekit.ranks.analyse.SMALL_FILE", -1)  # both kinds of entries, each file
    traces = [write_trace(tmp_path / f"r{i}.json", llama_training(n_steps=2, seed=i)[0]) for i in range(3)]
    # the bound is exactly what the last two files' entries (a parse and a result entry each)
    # take, measured in a scratch cache: entry sizes differ by a few bytes between files
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "scratch"))
    for t in traces[1:]:
        tracekit.load(t)
    two = sum(p.stat().st_size for p in cache.entries())
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(cachedir))
    monkeypatch.setenv("TRACEKIT_CACHE_MAX_BYTES", str(two))
    for t in traces:
        tracekit.load(t)
    assert sum(p.stat().st_size for p in cache.entries()) == two
    assert results.load(traces[2], Options()) is not None and results.load(traces[0], Options()) is None
    n = len(cache.entries())
    assert cache.clear() == n == 4 and list(cachedir.iterdir()) == []  # the seal's key too


def test_no_cache_writes_nothing_and_keeps_nothing(trace, cachedir):
    a = tracekit.load(trace, cache=False)
    assert not cachedir.exists() and not a.ranks[0].lazy


def test_unwritable_cache_dir_ships_the_intervals(trace, tmp_path, monkeypatch):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file, not a directory")
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(blocked / "c"))
    cold = tracekit.load(trace, cache=False).tables(per_step=True)
    a = tracekit.load(trace)
    assert not a.ranks[0].lazy
    _same_tables(cold, a.tables(per_step=True))


def _ranks_dir(tmp_path: Path) -> Path:
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(3):
        trace, _ = llama_training(n_steps=2, n_layers=1, seed=40 + r)
        trace["distributedInfo"] = {"rank": r, "world_size": 3}
        write_trace(d / f"rank{r}.pt.trace.json", trace)
    return d


@pytest.mark.parametrize("jobs", [1, 2])
def test_ranks_come_back_as_handles_and_load_one_at_a_time(tmp_path, cachedir, monkeypatch, jobs):
    """Workers store each file's result and send a handle: the parent holds no rank's
    intervals after load, and at most one while it computes per-step tables."""
    d = _ranks_dir(tmp_path)
    cold = tracekit.load(d, cache=False, jobs=1)
    for run in ("cold", "cached"):
        a = tracekit.load(d, jobs=jobs)
        assert all(att.lazy for att in a.ranks.values()), run
        _same_tables(cold.tables(), a.tables())
        assert a._held == {}  # the means and cross-rank tables needed no intervals
        _same_tables(cold.tables(per_step=True), a.tables(per_step=True))
        assert len(a._held) == 1
        if run == "cold":
            _no_pipeline(monkeypatch)


def test_a_worker_sends_its_steps_and_windows_packed(trace):
    """What a worker sends back (tabulate_file, cache on) holds its steps and windows packed,
    analysed and stored or read from the entry: the parent gathers them as they are (unpacked,
    they cost the worker a decode and the parent a pack per rank)."""
    from tracekit.ranks.gathered import Packed
    from tracekit.ranks.perfile import tabulate_file

    for run in ("stored", "cached"):
        att, _ = tabulate_file(trace, Options())
        assert att.lazy, run
        assert all(isinstance(att.__dict__[k], Packed) for k in ("_steps", "_windows")), run


def test_windows_of_one_rank_merge_lazily(tmp_path, cachedir, monkeypatch):
    """Two window files of one rank (the result is cached per file, never the merged one): the
    merged rank's intervals are read from both entries when needed, steps renumbered."""
    from test_ranks import three_steps

    first = three_steps()
    later = three_steps(start_ns=first.origin + 10_000_000_000)
    d = tmp_path / "w"
    d.mkdir()
    write_trace(d / "a.pt.trace.json", first.trace())
    write_trace(d / "b.pt.trace.json", later.trace())
    cold = tracekit.load(d, cache=False, jobs=1)
    tracekit.load(d, jobs=1)
    assert sum(p.name.endswith(results.SUFFIX) for p in cache.entries()) == 2
    _no_pipeline(monkeypatch)
    a = tracekit.load(d, jobs=1)
    assert a.ranks[0].lazy and a.meta["steps"] == {0: [1, 2, 3, 4, 5, 6]}
    for per_step in (False, True):
        _same_tables(cold.tables(per_step=per_step), a.tables(per_step=per_step))
    pd.testing.assert_frame_equal(cold.intervals, a.intervals)


class _Store:
    """A store of intervals as a lazy Attributed holds one (what results.Stored does)."""

    def __init__(self, df: pd.DataFrame):
        self.df, self.reads = df, 0

    def load(self, columns=None):
        self.reads += 1
        return self.df if columns is None else self.df[columns]


def _window_file(path: str, steps: list[int], durations: list[int], start: int):
    from tracekit.pipeline import Attributed

    ends = list(pd.Series(durations).cumsum() + start)
    starts = [start, *ends[:-1]]
    st = pd.DataFrame({"step": steps, "start": starts, "end": ends, "complete": True})
    iv = pd.DataFrame({"step": steps, "start": starts, "end": ends, "x": range(len(steps))})
    win = pd.DataFrame({"step": steps, "complete": True})
    return Attributed(path, "gpu", iv, st, win, meta={"steps": steps, "complete_steps": steps})


def test_lazy_merge_equals_eager_merge_with_a_cut_edge_step():
    """A short first step alone in its window file is cut against the rank's median step
    (ranks._cut_rank_edges): the lazy merge leaves out the same rows, reading nothing early."""
    from tracekit.ranks.grouping import merge_windows

    def parts(lazy: bool):
        a = _window_file("a", [1], [1], 0)
        b = _window_file("b", [1, 2, 3], [100, 100, 100], 1000)  # step numbers repeat: renumbered
        if lazy:
            a.intervals, b.intervals = _Store(a.intervals), _Store(b.intervals)
        return [b, a]

    eager = merge_windows(parts(False))
    lazy_parts = parts(True)
    lazy = merge_windows(lazy_parts)
    assert lazy.lazy and all(p.__dict__["_intervals"].reads == 0 for p in lazy_parts)
    assert (
        [w.code for w in lazy.warnings]
        == [w.code for w in eager.warnings]
        == ["steps_renumbered", "step_cut"]
    )
    pd.testing.assert_frame_equal(lazy.intervals, eager.intervals)
    assert eager.intervals["step"].tolist() == [2, 3, 4]
    pd.testing.assert_frame_equal(lazy.load_intervals(["x"]), eager.intervals[["x"]])


def test_dask_workers_send_handles_and_a_worker_elsewhere_sends_intervals(tmp_path, cachedir):
    """A LocalCluster's workers (this host, this cache directory: the environment is
    inherited) send handles; a worker on another host than the parent sends the intervals,
    since the parent could not read its cache directory."""
    import distributed  # the test extra installs it

    from tracekit.ranks.perfile import tabulate_file

    d = _ranks_dir(tmp_path)
    cold = tracekit.load(d, cache=False, jobs=1)
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as c:
        a = tracekit.load(d, scheduler=c.scheduler_address)
    assert all(att.lazy for att in a.ranks.values())
    _same_tables(cold.tables(per_step=True), a.tables(per_step=True))
    f = sorted(d.iterdir())[0]
    for host in ("another-host.example", None):  # the cached result, then as computed fresh
        att, tables = tabulate_file(f, Options(host=host))
        assert att.lazy is (host is None) and tables
    cache.clear()
    att, _ = tabulate_file(f, Options(host="another-host.example"))
    assert not att.lazy and results.load(f, Options()) is not None  # stored for its own use


def test_packed_frames_read_back_exactly_or_are_refused():
    """The entry's small frames (tracekit/ranks/packed_ipc.py): every kind of column a table has
    reads back equal, dtypes and column index included; a frame whose dtype JSON would not
    carry exactly is refused when stored, never stored inexact."""
    from tracekit.ranks import packed_ipc
    from tracekit.ranks.gathered import pack

    frames = {
        "mixed": pd.DataFrame(
            {
                "step": pd.array([1, 2, 3], "int64"),
                "ms": [0.1, float("nan"), -0.0],
                "ok": [True, False, True],
                "n": pd.array([1, 2, 3], "int8"),
                "phase": pd.Categorical(["backward", None, "forward"], categories=["forward", "backward"]),
                "name": pd.array(["a", None, "a"], dtype="str"),
                "label": pd.Series(["x", "y", "x"], dtype=object),
            }
        ),
        "empty": pd.DataFrame(columns=["step", "name"]),
        "none": pd.DataFrame(),
    }
    descs, blob = packed_ipc.encode({k: pack(v) for k, v in frames.items()})
    got = packed_ipc.decode(json.loads(json.dumps(descs)), blob, 1 << 20)
    assert got is not None and list(got) == list(frames)
    for name, df in frames.items():
        pd.testing.assert_frame_equal(got[name].load(), df, check_exact=True, obj=name)
        assert got[name].tags == pack(df).tags
    assert packed_ipc.decode(descs, blob, 16) is None  # over the bound
    odd = pack(pd.DataFrame({"c": pd.Categorical([1, 2])}))  # categories that are not text
    with pytest.raises(ValueError):
        packed_ipc.encode({"odd": odd})
    # a tag's JSON is checked once (packed_ipc._CHECKED), still against each column's dtype
    again = packed_ipc.encode({k: pack(v) for k, v in frames.items()})
    assert again == (descs, blob)
    for i, other in ((0, "float64"), (4, pd.CategoricalDtype(["forward", "other"]))):
        forged = pack(frames["mixed"])
        forged.dtypes = [*forged.dtypes[:i], other, *forged.dtypes[i + 1 :]]
        with pytest.raises(ValueError):
            packed_ipc.encode({"forged": forged})
