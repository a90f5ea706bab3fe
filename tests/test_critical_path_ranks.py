"""The critical path across ranks (issue 35.3 with issue 36): a collective's time on a rank's
path before the instance's last arrival is a ``wait`` on the late rank, and each step's length
was set by the late rank's path up to that arrival.

Planted truth: 2-4 ranks with different host clocks; per step, each rank runs one forward GEMM
in the MLP module (and one in attention on the late rank) whose length is planted, then an
all-reduce on the same stream, so that the all-reduce starts where the GEMM ends (its arrival).
Every rank's path is then, by hand: the GEMMs (``kernel``), the all-reduce from its arrival to
the last arrival (``wait`` on the last arriver), then to its end (``comm``: the transfer).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.testing import COMPUTE_STREAM, TraceBuilder
from tracekit.testing.events import EPOCH_NS
from tracekit.testing.merged import merged_trace

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import shared_trace

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
STEPS = 3
#: Per rank, its clock minus the true time (ns).
OFFSETS = {0: 0, 1: 7_000_000, 2: -3_500_000, 3: 12_345_000}
#: Per rank and step, the extra time (us) of its MLP GEMM: the late rank of each step.
DELAY = {0: [0, 30, 0], 1: [10, 0, 0], 2: [50, 0, 5], 3: [0, 0, 80]}
TRANSFER_US = [40, 25, 60]
ABS = 1e-9  # ms


def _base(s: int) -> float:
    return 1000.0 + 2000.0 * s


def _arrival(r: int, s: int) -> float:
    return _base(s) + 20 + 100 + DELAY[r][s]


def _builder(r: int, ranks: list[int]) -> TraceBuilder:
    b = TraceBuilder(rank=r, world_size=len(ranks), start_ns=EPOCH_NS + OFFSETS[r])
    for s in range(STEPS):
        last = max(_arrival(q, s) for q in ranks)
        with b.step():
            with b.forward():
                with b.module("LlamaAttention", "model.layers.0.self_attn"):
                    b.kernel(GEMM, 20, op="aten::mm", at_us=_base(s))
                with b.module("LlamaMLP", "model.layers.0.mlp"):
                    b.kernel(GEMM, 100 + DELAY[r][s], op="aten::mm", at_us=_base(s) + 20)
            dur = last - _arrival(r, s) + TRANSFER_US[s]
            b.comm("AllReduce", dur, at_us=_arrival(r, s), nelems=1000, dtype="Float", stream=COMPUTE_STREAM)
    return b


def _late(s: int, ranks: list[int]) -> int:
    return max(ranks, key=lambda q: (_arrival(q, s), -q))


def _check(a, ranks: list[int]) -> None:
    per = a.table("critical_path", per_step=True)
    assert {"kind", "phase", "module", "time_ms", "waited_on_rank"} <= set(per.columns)
    for s in range(STEPS):
        last, late = max(_arrival(q, s) for q in ranks), _late(s, ranks)
        for r in ranks:
            rows = per[(per["rank"] == r) & (per["step"] == s + 1)]
            window = (last + TRANSFER_US[s] - _base(s)) / 1e3
            assert rows["time_ms"].sum() == pytest.approx(window, abs=1e-6)
            wait = rows[rows["kind"] == "wait"]
            planted = (last - _arrival(r, s)) / 1e3
            if planted > 0:
                assert wait["time_ms"].tolist() == [pytest.approx(planted, abs=ABS)], (r, s)
                assert wait["waited_on_rank"].tolist() == [late]
            else:
                assert wait.empty
            comm = rows[rows["kind"] == "comm"]
            assert comm["time_ms"].sum() == pytest.approx(TRANSFER_US[s] / 1e3, abs=ABS)
            assert (rows.loc[rows["kind"] != "wait", "waited_on_rank"] == -1).all()
            kern = rows[rows["kind"] == "kernel"].set_index("module")["time_ms"]
            assert kern["MLP"] == pytest.approx((100 + DELAY[r][s]) / 1e3, abs=ABS)
    _check_timeline(a, ranks)
    offsets = a.meta["clock_offsets_ms"]
    for r in ranks:
        assert offsets[r] == pytest.approx((OFFSETS[r] - OFFSETS[ranks[0]]) / 1e6, abs=1e-12)
    _check_setters(a, ranks)


def _check_timeline(a, ranks: list[int]) -> None:
    """The path over time: each waiting rank's all-reduce is a wait bar from its arrival to the
    last arrival, then a comm bar to its end (ms since the step's window began, own clock)."""
    tl = a.table("critical_path_timeline", per_step=True)
    for s in range(STEPS):
        last, late = max(_arrival(q, s) for q in ranks), _late(s, ranks)
        for r in ranks:
            rows = tl[(tl["rank"] == r) & (tl["step"] == s + 1)]
            bars = rows[rows["kind"].isin(["wait", "comm"])]
            want = [("comm", _arrival(r, s), last + TRANSFER_US[s], -1)]
            if r != late and last > _arrival(r, s):
                want = [("wait", _arrival(r, s), last, late), ("comm", last, last + TRANSFER_US[s], -1)]
            got = list(zip(bars["kind"], bars["start_ms"], bars["end_ms"], bars["waited_on_rank"]))
            assert len(got) == len(want), (r, s, got)
            for (k, lo, hi, who), (wk, wlo, whi, wwho) in zip(got, want):
                assert (k, who) == (wk, wwho)
                assert lo == pytest.approx((wlo - _base(s)) / 1e3, abs=ABS)
                assert hi == pytest.approx((whi - _base(s)) / 1e3, abs=ABS)


def _check_setters(a, ranks: list[int]) -> None:
    """Per step: the path across ranks runs through the late rank from the window's start to
    its arrival (its GEMMs: MLP the longer), then the transfer on the rank the walk began on
    (the lowest rank, all windows ending together on the aligned clock)."""
    got = a.table("critical_path_ranks")
    assert list(got.columns) == [
        "step", "rank", "path_ms", "share_pct", "phase", "module", "module_ms", "sets_length",
    ]  # fmt: skip
    for s in range(STEPS):
        late = _late(s, ranks)
        rows = got[got["step"] == s + 1].set_index("rank")
        top = rows[rows["sets_length"] == 1]
        assert top.index.tolist() == [late]
        lead = (_arrival(late, s) - _base(s)) / 1e3
        assert top["path_ms"].iloc[0] == pytest.approx(
            lead + (0 if late != ranks[0] else TRANSFER_US[s] / 1e3), abs=ABS
        )
        assert top["phase"].iloc[0] == "forward" and top["module"].iloc[0] == "MLP"
        assert top["module_ms"].iloc[0] == pytest.approx((100 + DELAY[late][s]) / 1e3, abs=ABS)
        if late != ranks[0]:
            assert rows.loc[ranks[0], "path_ms"] == pytest.approx(TRANSFER_US[s] / 1e3, abs=ABS)
        assert rows["path_ms"].sum() == pytest.approx(lead + TRANSFER_US[s] / 1e3, abs=ABS)


@pytest.mark.parametrize("ranks", [[0, 1], [0, 1, 2], [0, 1, 2, 3]])
def test_waits_on_the_late_rank_in_a_directory(tmp_path: Path, ranks: list[int]) -> None:
    for r in ranks:
        _builder(r, ranks).write(tmp_path / f"rank{r}.json")
    _check(tracekit.load(tmp_path, cache=False, jobs=1), ranks)


def test_merged_file_and_the_mean_view(tmp_path: Path) -> None:
    ranks = [0, 1, 2, 3]
    path = tmp_path / "merged.json"
    path.write_text(json.dumps(merged_trace([_builder(r, ranks) for r in ranks])))
    a = tracekit.load(path, cache=False, jobs=1)
    _check(a, ranks)
    mean = a.table("critical_path")
    for r in ranks:
        waits = mean[(mean["rank"] == r) & (mean["kind"] == "wait")]
        for q in ranks:
            planted = sum(
                max(_arrival(p, s) for p in ranks) - _arrival(r, s)
                for s in range(STEPS)
                if _late(s, ranks) == q
            )
            got = waits.loc[waits["waited_on_rank"] == q, "time_ms"].sum()
            assert got == pytest.approx(planted / 1e3 / STEPS, abs=ABS)
        assert mean.loc[mean["rank"] == r, "percent"].sum() == pytest.approx(100.0, abs=1e-9)


def test_one_rank_is_as_before(tmp_path: Path) -> None:
    _builder(0, [0]).write(tmp_path / "rank0.json")
    a = tracekit.load(tmp_path / "rank0.json", cache=False, jobs=1)
    t = a.table("critical_path", per_step=True)
    assert list(t.columns) == ["step", "kind", "phase", "module", "time_ms", "percent"]
    assert "wait" not in set(t["kind"])
    assert "critical_path_ranks" not in a.names()


def test_a_real_two_rank_run(tmp_path: Path) -> None:
    """HTA's two sampled ranks of one job: its collectives are off the path (the hosts set it),
    so no wait rows; the path across ranks is one rank's whole path."""
    for r in (0, 1):
        src = shared_trace(f"hta/trace_filter__sampled_rank-{r}.json.gz")
        (tmp_path / src.name).write_bytes(src.read_bytes())
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    per = a.table("critical_path", per_step=True)
    sums = per.groupby(["rank", "step"])["time_ms"].sum()
    assert (sums > 500).all() and (sums < 700).all()
    got = a.table("critical_path_ranks")
    assert sorted(got["step"].unique()) == sorted(per["step"].unique())
    assert (got.groupby("step")["sets_length"].sum() == 1).all()
    assert ((got["share_pct"] > 0) & (got["share_pct"] <= 100)).all()
