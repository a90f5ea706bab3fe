"""Exposed communication two ways: per phase window (phases.exposed_comm_ms) and per collective
(comm.exposed_ms), both "union of communication minus union of compute" (DESIGN.md), over
different sets of kernels. Per step, the collectives' figures add up to at least the phases'
(a union is at most the sum of its parts), and exactly to it when no two collectives run at
once outside compute (docs/metrics.md, comm)."""

from __future__ import annotations

import pytest
from shared_traces import shared_trace

import tracekit
from tracekit.testing import COMM_STREAM, TraceBuilder, measure, subtract
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM

SECOND_COMM_STREAM = COMM_STREAM + 1


def plant(tmp_path, all_gather_at_us: float):
    """One step (times in us after its first activity): forward GEMM 0-10, backward GEMM 20-30,
    an AllReduce 25-40 (its first 5 us under the GEMM), an AllGather of 15 us on another stream
    from ``all_gather_at_us``, the optimizer at 70: all communication is in the backward window."""
    b = TraceBuilder()
    with b.step():
        mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=10)
        with b.backward():
            b.kernel(GEMM_NN, 10, op="aten::mm", creator=mm, at_us=30)
            with b.gradient_hook():
                b.comm("AllReduce", 15, at_us=35)
                b.comm("AllGather", 15, stream=SECOND_COMM_STREAM, at_us=10 + all_gather_at_us)
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=80)
    return tracekit.load(b.write(tmp_path / "t.json"), cache=False)


def _exposed_us(a) -> tuple[float, dict[str, float]]:
    """(the step's exposed communication summed over phase windows, per collective) in us."""
    phases = a.table("phases", per_step=True)
    comm = a.table("comm", per_step=True)
    per = comm.groupby("collective")["exposed_ms"].sum()
    return round(phases["exposed_comm_ms"].sum() * 1000, 6), {k: round(v * 1000, 6) for k, v in per.items()}


@pytest.mark.parametrize(
    "ag_at, phase_us, per_collective_us",
    [
        # AllGather 35-50 overlaps the AllReduce's exposed 30-40 for 5 us: counted once per
        # phase window (30-50: 20 us), once per collective (10 + 15 = 25 us)
        (35, 20.0, {"AllReduce": 10.0, "AllGather": 15.0}),
        # AllGather 45-60 runs alone: both ways give 30-40 and 45-60 (25 us)
        (45, 25.0, {"AllReduce": 10.0, "AllGather": 15.0}),
    ],
)
def test_collectives_add_up_to_at_least_the_phase_exposed(tmp_path, ag_at, phase_us, per_collective_us):
    a = plant(tmp_path, ag_at)
    phase, per = _exposed_us(a)
    assert phase == phase_us
    assert per == per_collective_us
    assert sum(per.values()) >= phase
    overlap = max(0.0, 40 - ag_at)  # the AllGather's time under the AllReduce, outside compute
    assert sum(per.values()) - phase == pytest.approx(overlap, abs=1e-6)


@pytest.mark.shared
def test_overlapping_collectives_on_a_real_trace():
    """HTA's pipeline-parallel sample runs SendRecv beside AllToAll: per step, the collectives'
    exposed time exceeds the phases' by exactly the time two (phase, collective) groups are
    exposed at once, measured here from the labelled intervals with plain interval arithmetic."""
    a = tracekit.load(shared_trace("hta/negative_queue_length_values_check__rank0.json.gz"), cache=False)
    phases = a.table("phases", per_step=True).groupby("step")["exposed_comm_ms"].sum()
    comm = a.table("comm", per_step=True).groupby("step")["exposed_ms"].sum()
    iv = a.intervals
    excess = []
    for step in phases.index:
        s = iv[iv["step"] == step]
        compute = list(zip(s.loc[s["group"] == "compute", "start"], s.loc[s["group"] == "compute", "end"]))
        c = s[s["group"] == "comm"]
        groups = [
            list(zip(g["start"], g["end"])) for _, g in c.groupby(["phase", "collective"], observed=True)
        ]
        each = sum(measure(subtract(g, compute)) for g in groups)
        overlap_ms = (each - measure(subtract(list(zip(c["start"], c["end"])), compute))) / 1e6
        assert comm[step] - phases[step] == pytest.approx(overlap_ms, abs=2e-6), step
        excess.append(overlap_ms)
    assert min(excess) > 0.1  # every step has collectives exposed at once (0.59 ms in step 550)
