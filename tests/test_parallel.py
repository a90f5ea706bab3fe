"""Multi-rank directories: a local process pool (--jobs) and a Dask cluster (--scheduler)
give the same tables as one rank after another, plus the cross-rank tables."""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
from shared_traces import SHARED

import tracekit
from tracekit.testing import llama_training, write_trace

SRCS = [SHARED / "hta" / f"trace_filter__sampled_rank-{i}.json.gz" for i in (0, 1)]


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory):
    """Four rank files: two real traces twice (as ranks 0-3) when ../shared is here, else
    synthetic ranks. Files of one rank would be windows of one rank, so each gets its own."""
    d = tmp_path_factory.mktemp("ranks")
    if all(p.is_file() for p in SRCS):
        for i, p in enumerate(SRCS * 2):
            with gzip.open(p, "rt") as f:
                trace = json.load(f)
            trace["distributedInfo"] = {**trace.get("distributedInfo", {}), "rank": i}
            with gzip.open(d / f"{i}_{p.name}", "wt") as f:
                json.dump(trace, f)
    else:
        for i in range(4):
            trace, _ = llama_training(n_steps=2, seed=30 + i)
            trace["distributedInfo"] = {"rank": i, "world_size": 4}
            write_trace(d / f"{i}_rank{i % 2}.pt.trace.json.gz", trace)
    return d


@pytest.fixture(scope="module")
def serial(ranks_dir):
    return tracekit.load(ranks_dir, jobs=1, cache=False).tables(per_step=True)


def _same(a, b):
    assert set(a) == set(b)
    for k in a:
        pd.testing.assert_frame_equal(a[k], b[k])


def test_process_pool_equals_serial(ranks_dir, serial):
    _same(serial, tracekit.load(ranks_dir, jobs=2, cache=False).tables(per_step=True))


def test_cross_rank_tables(ranks_dir):
    mean = tracekit.load(ranks_dir, jobs=1, cache=False).tables()  # per step, they have a step column
    r, s = mean["ranks"], mean["rank_summary"]
    # no rank has time without phase evidence: no unattributed column or row (it read 0 everywhere)
    assert "unattributed_ms" not in r.columns
    assert len(r) == 4 and list(s["phase"]) == [
        "forward",
        "backward",
        "optimizer",
        "step",
        "compute",
        "exposed_comm",
        "idle",
    ]
    step = s.set_index("phase").loc["step"]
    assert step["max_ms"] == pytest.approx(r["step_ms"].max())
    assert step["min_ms"] == pytest.approx(r["step_ms"].min())
    assert step["mean_ms"] == pytest.approx(r["step_ms"].mean())
    assert r.set_index("rank").loc[step["slowest_rank"], "step_ms"] == pytest.approx(step["max_ms"])
    assert step["slowest_over_mean_ms"] == pytest.approx(step["max_ms"] - step["mean_ms"])
    # per-rank phase times add up to the step
    assert (r[["forward_ms", "backward_ms", "optimizer_ms"]].sum(axis=1) - r["step_ms"]).abs().max() < 1e-9
    # a single file has no cross-rank tables
    one = sorted(ranks_dir.iterdir())[0]
    assert "ranks" not in tracekit.load(one, cache=False).tables()


def test_dask_local_cluster_equals_serial(ranks_dir, serial):
    import distributed  # the test extra installs it

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        got = tracekit.load(ranks_dir, cache=False, scheduler=cluster.scheduler_address)
        _same(serial, got.tables(per_step=True))


def test_cli_jobs(ranks_dir):
    from click.testing import CliRunner

    from tracekit.cli import main

    r = CliRunner().invoke(main, ["analyze", str(ranks_dir), "--jobs", "2", "--no-cache", "--format", "md"])
    assert r.exit_code == 0, r.output
    assert "slowest" in r.output


def test_workers_send_back_each_rank_tables(ranks_dir):
    """In a pool run the parent computes no rank's tables: they come back from the workers."""
    from tracekit.analyses import REGISTRY

    a = tracekit.load(ranks_dir, jobs=2, cache=False)
    for rank in a.ranks:
        for name, spec in REGISTRY.items():
            if spec.of_intervals:
                assert ("mean", name, rank) in a._computed
        assert ("checks", "", rank) in a._computed and ("phase_means", "phases", rank) in a._computed


def test_small_files_go_in_batches(tmp_path):
    from tracekit.ranks.pool import SMALL_FILE, batch_size

    small = []
    for i in range(2000):
        p = tmp_path / f"{i}.json"
        p.write_bytes(b"{}")
        small.append(p)
    assert batch_size(small, 2) == 64  # at most 64 files per task
    assert batch_size(small[:80], 2) == 10  # about four tasks per worker
    assert batch_size(small[:3], 2) == 1
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(SMALL_FILE + 1)
    assert batch_size([big] * 100, 2) == 1


def _kept_by_parent(d, n: int, monkeypatch) -> tuple[int, int]:
    """Bytes (tracemalloc) and pandas frames the parent still holds after a cached pool run
    over ``n`` copies of one rank file in ``d`` and every table and the meta computed."""
    import gc
    import tracemalloc

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(d.parent / f"cache{n}"))
    gc.collect()
    tracemalloc.start()
    try:
        a = tracekit.load(d, jobs=2)
        a.tables()
        assert len(a.ranks) == n and a.meta["ranks"] == list(range(n))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    frames = sum(isinstance(o, pd.DataFrame) for o in gc.get_objects())
    del a
    return held, frames


def test_the_parent_keeps_no_frames_per_rank(tmp_path, monkeypatch):
    """The per-rank state the parent keeps does not grow with the rank count as pandas frames
    (which cost 7-40 KB each whatever their rows): a rank's tables, steps and windows are kept
    as rows of columns over all ranks (tracekit.ranks.gathered); what is left per rank (meta, a
    handle to its cache entry, its rows) is a few KB. Before: ~16 frames, ~130 KB per rank."""
    trace, _ = llama_training(n_steps=2, seed=3)
    kept = {}
    for n in (4, 16):
        d = tmp_path / f"r{n}"
        d.mkdir()
        for i in range(n):
            trace["distributedInfo"] = {"rank": i, "world_size": n}
            write_trace(d / f"rank{i}.pt.trace.json.gz", trace)
        if n == 4:  # warm: what the first run loads once (modules, rule tables) is not per rank
            _kept_by_parent(d, n, monkeypatch)
        kept[n] = _kept_by_parent(d, n, monkeypatch)
    per_rank = (kept[16][0] - kept[4][0]) / 12
    assert kept[16][1] <= kept[4][1], kept  # no frame per rank
    # a few KB: meta (since issue 29 with the device's peaks and per-step MFU), a handle, rows.
    # Issues 35-36 added ~4 KB of rows per rank here (launches 2.3 KB: a row per phase and
    # module; the collective instances the parent matches 0.7 KB; collectives 0.6 KB;
    # idle_causes 0.3 KB): 25.6 KB measured. Issue 35.3 added the critical path: its pieces,
    # kept as rows like the memory events (what --per-step recomputes its tables from; 0.47 MB
    # for a 47 MB df_index_resolver rank whose intervals are 6.9 MB), and the timeline's rows:
    # 39-40 KB measured. A pandas frame kept per rank costs 7-40 KB each.
    assert per_rank < 48 * 1024, (per_rank, kept)
