"""Collectives (issue 36): sizes and bandwidth per rank; each instance matched across ranks and
its time split into wait and transfer; stragglers. Planted truth: ranks with known delays and
clock offsets, a missing rank file, a merged file, gloo on CPU; and the shared real traces."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.events import EPOCH_NS
from tracekit.testing.merged import merged_trace

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import params

WORLD = 4
STEPS = 3
#: Per rank, its clock minus the true time (ns): a different host clock each.
OFFSETS = {0: 0, 1: 7_000_000, 2: -3_500_000, 3: 12_345_000}
#: Per rank and step, how much longer (us) its forward kernel runs: the late rank arrives late.
DELAY = {0: [0, 30, 0], 1: [10, 0, 0], 2: [50, 0, 5], 3: [0, 0, 80]}
TRANSFER_US = [40, 25, 60]
NELEMS = [1000, 250_000, 4_000_000]  # Float: 4 bytes each


def _base(s: int) -> float:
    return 1000.0 + 2000.0 * s


def _arrival(r: int, s: int) -> float:
    return _base(s) + 100 + DELAY[r][s]


def _builder(r: int, ranks: list[int]) -> TraceBuilder:
    b = TraceBuilder(rank=r, world_size=WORLD, start_ns=EPOCH_NS + OFFSETS[r])
    for s in range(STEPS):
        last = max(_arrival(q, s) for q in ranks)
        with b.step():
            with b.forward():
                b.kernel("sm80_xmma_gemm_bf16", 100 + DELAY[r][s], op="aten::mm", at_us=_base(s))
            with b.backward():
                dur = last - _arrival(r, s) + TRANSFER_US[s]
                b.comm("AllReduce", dur, at_us=_arrival(r, s), nelems=NELEMS[s], dtype="Float")
    return b


def _truth(ranks: list[int]) -> dict:
    """Per (rank, step): wait and transfer (ms); per step: the straggler and the wait it caused."""
    out, late = {}, {}
    for s in range(STEPS):
        last = max(_arrival(q, s) for q in ranks)
        for r in ranks:
            out[(r, s + 1)] = ((last - _arrival(r, s)) / 1e3, TRANSFER_US[s] / 1e3)
        who = max(ranks, key=lambda q: (_arrival(q, s), -q))
        late[s + 1] = (who, sum(last - _arrival(q, s) for q in ranks) / 1e3)
    return {"split": out, "late": late}


def _check(a, ranks: list[int]) -> None:
    truth = _truth(ranks)
    c = a.table("collectives")
    assert list(c.columns) == [
        "rank", "step", "phase", "collective", "process_group", "calls", "bytes", "time_ms",
        "algbw_gbps", "busbw_gbps", "wait_ms", "transfer_ms",
    ]  # fmt: skip
    assert sorted(c["rank"].unique()) == ranks
    for row in c.itertuples():
        wait, transfer = truth["split"][(row.rank, row.step)]
        assert row.calls == 1 and row.collective == "AllReduce" and row.process_group == "0"
        assert row.wait_ms == pytest.approx(wait, abs=1e-9)
        assert row.transfer_ms == pytest.approx(transfer, abs=1e-9)
        assert row.time_ms == pytest.approx(wait + transfer, abs=1e-9)
        nbytes = NELEMS[row.step - 1] * 4
        assert row.bytes == nbytes
        algbw = nbytes / (row.time_ms * 1e6)
        assert row.algbw_gbps == pytest.approx(algbw, rel=1e-12)
        assert row.busbw_gbps == pytest.approx(algbw * 2 * (WORLD - 1) / WORLD, rel=1e-12)
    offsets = a.meta["clock_offsets_ms"]
    for r in ranks:
        assert offsets[r] == pytest.approx((OFFSETS[r] - OFFSETS[ranks[0]]) / 1e6, abs=1e-12)
    st = a.table("stragglers")
    for s, (who, caused) in truth["late"].items():
        got = st[st["step"] == s]
        assert got["rank"].tolist() == [who]
        assert got["caused_wait_ms"].iloc[0] == pytest.approx(caused, abs=1e-9)
        assert got["phase"].iloc[0] == "forward"
        assert got["op"].iloc[0] == "aten::mm"
        others = [DELAY[q][s - 1] for q in ranks if q != who]
        excess = DELAY[who][s - 1] - float(np.median(others))
        assert got["op_excess_ms"].iloc[0] == pytest.approx(excess / 1e3, abs=1e-9)


def test_directory_of_ranks_with_delays_and_clock_offsets(tmp_path: Path) -> None:
    ranks = list(range(WORLD))
    for r in ranks:
        _builder(r, ranks).write(tmp_path / f"rank{r}.json")
    _check(tracekit.load(tmp_path, cache=False, jobs=1), ranks)


def test_missing_rank_file(tmp_path: Path) -> None:
    ranks = [0, 1, 3]  # rank 2's file is missing: matched over the ranks present
    for r in ranks:
        _builder(r, ranks).write(tmp_path / f"rank{r}.json")
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    _check(a, ranks)


def test_merged_file(tmp_path: Path) -> None:
    import json

    ranks = list(range(WORLD))
    path = tmp_path / "merged.json"
    path.write_text(json.dumps(merged_trace([_builder(r, ranks) for r in ranks])))
    _check(tracekit.load(path, cache=False, jobs=1), ranks)


def test_matched_by_seq_where_recorded(tmp_path: Path) -> None:
    """Rank 1's trace starts one collective earlier (its Seq 0 in a step rank 0 did not record):
    by order its instances would pair with the wrong ones; by Seq they pair right."""
    ranks = [0, 1]
    for r in ranks:
        b = TraceBuilder(rank=r, world_size=2, start_ns=EPOCH_NS + OFFSETS[r], first_step=0 if r else 1)
        if r:  # the extra, earlier instance
            with b.step():
                b.comm("AllReduce", 10, at_us=50, nelems=8, dtype="Float", seq=0)
        for s in range(STEPS):
            last = max(_arrival(q, s) for q in ranks)
            with b.step():
                with b.forward():
                    b.kernel("sm80_xmma_gemm_bf16", 100 + DELAY[r][s], op="aten::mm", at_us=_base(s))
                dur = last - _arrival(r, s) + TRANSFER_US[s]
                b.comm("AllReduce", dur, at_us=_arrival(r, s), nelems=NELEMS[s], dtype="Float", seq=s + 1)
        b.write(tmp_path / f"rank{r}.json")
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    truth = _truth(ranks)["split"]
    c = a.table("collectives")
    c = c[c["step"] >= 1]
    assert len(c) == 2 * STEPS
    for row in c.itertuples():
        assert (row.wait_ms, row.transfer_ms) == pytest.approx(truth[(row.rank, row.step)], abs=1e-9)
    assert a.meta["clock_offsets_ms"][1] == pytest.approx(OFFSETS[1] / 1e6, abs=1e-12)


def test_one_rank_has_sizes_and_no_waits(tmp_path: Path) -> None:
    path = _builder(0, [0]).write(tmp_path / "rank0.json")
    a = tracekit.load(path, cache=False, jobs=1)
    c = a.table("collectives")
    assert c["rank"].tolist() == [0, 0, 0]
    assert c["bytes"].tolist() == [n * 4 for n in NELEMS]
    assert c["wait_ms"].isna().all() and c["transfer_ms"].isna().all()
    assert sum("needs the other ranks" in n for n in a.meta["notices"]) == 1
    assert "clock_offsets_ms" not in a.meta


def test_unknown_bytes_are_never_guessed(tmp_path: Path) -> None:
    b = TraceBuilder(world_size=2)
    with b.step():
        with b.forward():
            b.kernel("sm80_xmma_gemm_bf16", 100)
        b.comm("AllGather", 30)  # no In/Out msg nelems recorded
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False, jobs=1)
    c = a.table("collectives")
    assert np.isnan(c["bytes"].iloc[0]) and np.isnan(c["busbw_gbps"].iloc[0])
    assert any("unknown bytes" in n for n in a.meta["notices"])


def test_gloo_sizes_from_the_c10d_op(tmp_path: Path) -> None:
    """No record_param_comms (gloo on CPU): bytes from the c10d op's Input Dims / Input type;
    arrival is the gloo range."""
    b = TraceBuilder(autograd_thread=False, world_size=4)  # pg_config: one group of 4
    for _ in range(2):
        with b.step():
            with b.forward():
                with b.op("aten::mm"):
                    b.cpu(50)
            with b.op("c10d::allreduce_", input_dims=[[1024, 8], []], input_types=["float", "Scalar"]):
                b.cpu(5)
            b.worker_collective("gloo:all_reduce", 200, delay=10)
            b.cpu(230)
    a = tracekit.load(b.write(tmp_path / "gloo.json"), cache=False, jobs=1)
    c = a.table("collectives")
    assert c["calls"].tolist() == [1, 1]
    assert c["bytes"].tolist() == [1024 * 8 * 4] * 2
    assert c["time_ms"].tolist() == pytest.approx([0.2, 0.2], abs=1e-12)
    algbw = 1024 * 8 * 4 / 0.2e6
    assert c["algbw_gbps"].tolist() == pytest.approx([algbw] * 2, rel=1e-12)
    # no Group size recorded with the collective: every process group of the job has 4
    assert c["busbw_gbps"].tolist() == pytest.approx([algbw * 2 * 3 / 4] * 2, rel=1e-12)


@pytest.mark.parametrize("path", params())
def test_shared_traces_sane(path: Path) -> None:
    a = tracekit.load(path, cache=False, jobs=1)
    if "collectives" not in a.names():
        return
    c = a.table("collectives")
    if c.empty:
        return
    assert (c["calls"] >= 1).all()
    assert (c["time_ms"] >= 0).all()
    known = c["bytes"].dropna()
    assert (known >= 0).all()
    bw = c["busbw_gbps"].dropna()
    assert (bw >= 0).all() and (bw < 10_000).all()  # below 10 TB/s on any link


def test_pool_and_cached_reanalysis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers ship each rank's instances (a pool of two); a re-analysis reads them from the
    result cache: the same matching either way."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    ranks = list(range(WORLD))
    d = tmp_path / "run"
    d.mkdir()
    for r in ranks:
        _builder(r, ranks).write(d / f"rank{r}.json")
    first = tracekit.load(d, cache=True, jobs=2)
    _check(first, ranks)
    again = tracekit.load(d, cache=True, jobs=2)
    _check(again, ranks)
    assert again.table("collectives").equals(first.table("collectives"))


def test_over_a_dask_cluster(tmp_path: Path) -> None:
    """The same planted waits, clock offsets and stragglers when the ranks run on a Dask
    cluster's workers (``--scheduler``), and with a pool that sends back no interval
    (``keep_intervals=False``, what ``tracekit analyze`` asks without --per-step)."""
    import distributed  # the test extra installs it

    ranks = list(range(WORLD))
    for r in ranks:
        _builder(r, ranks).write(tmp_path / f"rank{r}.json")
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        _check(tracekit.load(tmp_path, cache=False, scheduler=cluster.scheduler_address), ranks)
    _check(tracekit.load(tmp_path, cache=False, jobs=2, keep_intervals=False), ranks)


def test_ranks_without_collectives_have_empty_cross_rank_tables(tmp_path: Path) -> None:
    """Two ranks and no collective: the run still names stragglers and collective_matches, and
    asking for them gives their columns with no rows (it raised KeyError from the API)."""
    from tracekit.analyses.cross_rank import MATCH_COLUMNS, STRAGGLER_COLUMNS

    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2)
        for _ in range(2):
            with b.step(), b.forward():
                b.kernel("sm80_xmma_gemm_bf16", 100, op="aten::mm")
        b.write(tmp_path / f"rank{r}.json")
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    assert {"stragglers", "collective_matches"} <= set(a.names())
    for name, columns in (("stragglers", STRAGGLER_COLUMNS), ("collective_matches", MATCH_COLUMNS)):
        got = a.table(name)
        assert got.empty and list(got.columns) == columns
