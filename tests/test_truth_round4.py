"""Planted truth for the phase shapes of issue 37 ("Truth, round 4"), items 1, 2 and 5.

1. autograd's start: work inside the ``backward()`` call before its first node (the gradient
   seed ``ones_like``, the engine's graph walk) is backward, not forward;
2. autograd's end: work inside the call after the last node (DDP's reducer finishing its
   buckets, FSDP's post-backward callback) is backward, not unattributed;
5. gradient accumulation (forward/backward pairs in a row, no two phases at once) is not the
   overlapping-phases mode: each wall is the sum of the phase's runs, and the walls tile the step.

Each test plants one shape with ``tracekit.testing`` and checks the walls exactly (ns).
"""

from __future__ import annotations

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_COPY, K_FILL, K_MUL

NS = 1e-6  # one nanosecond, in ms
TENSOR_BACKWARD = "torch/_tensor.py(626): backward"
ENGINE_CALL = "<built-in method run_backward of torch._C._EngineBase object at 0x7f3a2c0e1b70>"


def _ms(us: float) -> float:
    return us / 1000


def _phases(b: TraceBuilder, tmp_path, name: str):
    a = tracekit.load(b.write(tmp_path / f"{name}.json"), cache=False, jobs=1)
    return a, a.table("phases").set_index("phase")


def test_autograd_start_is_backward(tmp_path):
    """Item 1: the gradient seed launched inside ``loss.backward()`` before the engine's first
    node starts backward; the engine's start (device idle until the first node's kernel) is
    backward time, not forward."""
    b = TraceBuilder()
    with b.step():
        mm = b.kernel(GEMM_A, 40, op="aten::mm", at_us=10)  # forward 10-50
        with b.python(TENSOR_BACKWARD), b.python(ENGINE_CALL):
            with b.op("aten::ones_like"):
                b.kernel(K_FILL, 2, op="aten::fill_", at_us=60)  # the seed: 60-62
            b.cpu(30)  # the engine walks the graph: no op
            with b.backward():
                b.kernel(GEMM_NN, 50, op="aten::mm", creator=mm, at_us=100)  # first node: 100-150
        with b.optimizer():
            b.kernel(K_ADAM, 10, op="aten::_fused_adam_", at_us=160)  # 160-170
    a, ph = _phases(b, tmp_path, "start")
    assert ph.loc["forward", "wall_ms"] == pytest.approx(_ms(50), abs=NS)  # 10 -> 60
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(100), abs=NS)  # 60 -> 160
    assert ph.loc["backward", "idle_ms"] == pytest.approx(_ms(48), abs=NS)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(_ms(10), abs=NS)
    ev = a.intervals.set_index("name")["phase_evidence"].astype(str)
    assert ev[K_FILL] == "autograd_call"


def test_autograd_end_is_backward(tmp_path):
    """Item 2: DDP's reducer finishing its buckets after the last node, inside
    ``loss.backward()`` on the engine's (main) thread, is backward: nothing is unattributed."""
    b = TraceBuilder(autograd_thread=False)  # the engine runs on the calling thread (CPU, DDP)
    with b.step():
        mm = b.kernel(GEMM_A, 40, op="aten::mm", at_us=10)  # forward 10-50
        with b.python(TENSOR_BACKWARD):
            with b.backward():
                b.kernel(GEMM_NN, 50, op="aten::mm", creator=mm, at_us=60)  # 60-110
            with b.op("torch.distributed.ddp.reducer::copy_bucket_to_grad"):
                b.kernel(K_COPY, 8, op="aten::copy_", at_us=120)  # 120-128: the last bucket
            b.kernel(K_MUL, 4, op="aten::div_", at_us=130)  # 130-134: averaging
        with b.optimizer():
            b.kernel(K_ADAM, 10, op="aten::_fused_adam_", at_us=140)  # 140-150
    a, ph = _phases(b, tmp_path, "end")
    assert "unattributed" not in ph.index
    assert ph.loc["forward", "wall_ms"] == pytest.approx(_ms(50), abs=NS)  # 10 -> 60
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(80), abs=NS)  # 60 -> 140
    assert ph.loc["backward", "compute_ms"] == pytest.approx(_ms(62), abs=NS)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(_ms(10), abs=NS)
    tail = a.intervals[a.intervals["name"].isin([K_COPY, K_MUL])]
    assert set(tail["phase_evidence"].astype(str)) == {"autograd_call"}


def test_work_after_the_call_still_needs_evidence(tmp_path):
    """The frame is the evidence: the same work after ``backward()`` has returned stays
    unattributed (no collective, no optimizer op: no rule claims it)."""
    b = TraceBuilder(autograd_thread=False)
    with b.step():
        mm = b.kernel(GEMM_A, 40, op="aten::mm", at_us=10)
        with b.python(TENSOR_BACKWARD):
            with b.backward():
                b.kernel(GEMM_NN, 50, op="aten::mm", creator=mm, at_us=60)
        b.kernel(K_MUL, 4, op="aten::div_", at_us=130)  # 130-134
        with b.optimizer():
            b.kernel(K_ADAM, 10, op="aten::_fused_adam_", at_us=140)
    _, ph = _phases(b, tmp_path, "after")
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(70), abs=NS)  # 60 -> 130
    assert ph.loc["unattributed", "wall_ms"] == pytest.approx(_ms(10), abs=NS)  # 130 -> 140


def _accumulation(b: TraceBuilder, micro: int = 4) -> None:
    """``micro`` forward/backward pairs in a row on one stream, then the optimizer: forward
    20 us, 5 us gap, backward 30 us, 5 us gap per micro-batch (from 10 us on)."""
    with b.step():
        at = 10.0
        for _ in range(micro):
            mm = b.kernel(GEMM_A, 20, op="aten::mm", at_us=at)
            with b.backward():
                b.kernel(GEMM_NN, 30, op="aten::mm", creator=mm, at_us=at + 25)
            at += 60
        with b.optimizer():
            b.kernel(K_ADAM, 10, op="aten::_fused_adam_", at_us=at)


def test_gradient_accumulation_is_not_overlap(tmp_path):
    """Item 5: four forward/backward pairs in a row do not overlap: the walls are the sums of
    the phase runs (forward 4 x 25 us, backward 4 x 35 us less the gap before the optimizer,
    which is backward's last run), they tile the step, and no notice says phases overlapped."""
    b = TraceBuilder()
    _accumulation(b)
    a, ph = _phases(b, tmp_path, "accum")
    # runs: F 10-35, B 35-70, F 70-95, B 95-130, ... F 190-215, B 215-250, O 250-260
    assert ph.loc["forward", "wall_ms"] == pytest.approx(_ms(4 * 25), abs=NS)
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(4 * 35), abs=NS)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(_ms(10), abs=NS)
    assert ph["wall_ms"].sum() == pytest.approx(_ms(250), abs=NS)  # the step window 10-260
    assert ph.loc["forward", "compute_ms"] == pytest.approx(_ms(80), abs=NS)
    assert ph.loc["forward", "idle_ms"] == pytest.approx(_ms(20), abs=NS)
    assert ph.loc["backward", "idle_ms"] == pytest.approx(_ms(20), abs=NS)
    assert not [n for n in a.meta["notices"] if "overlapped" in n]
    (att,) = a.ranks.values()
    assert not att.steps["phases_overlap"].any() and att.steps["phases_interleave"].all()
    assert not [w for w in a.warnings if w.code in ("compute_exceeds_wall", "modules_do_not_sum")]
    mods = a.table("modules")
    for p, us in (("forward", 100), ("backward", 140)):
        assert mods.loc[mods["phase"] == p, "time_ms"].sum() == pytest.approx(_ms(us), abs=NS), p


def test_one_pass_keeps_the_tiling_windows(tmp_path):
    """One forward/backward pair: neither overlap nor interleave, the windows tile as before."""
    b = TraceBuilder()
    _accumulation(b, micro=1)
    a, ph = _phases(b, tmp_path, "one")
    assert ph.loc["forward", "wall_ms"] == pytest.approx(_ms(25), abs=NS)
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(35), abs=NS)
    (att,) = a.ranks.values()
    assert not att.steps["phases_interleave"].any()
