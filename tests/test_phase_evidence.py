"""A phase needs evidence (issue 12.3) and follows the step's structure (12.11): planted steps
whose tail (after autograd) has no evidence, optimizer ops outside Optimizer.step, and a
DeepSpeed-shaped tail (gradient reduction, then the grad-norm all-reduce before the optimizer)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.testing import TraceBuilder, write_trace
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

EXACT = 1e-9


def _forward_backward(b: TraceBuilder, at: float = 10) -> None:
    """forward GEMM at-at+10; backward GEMM at+20 - at+40 (on the autograd thread)."""
    with b.module("LlamaMLP", "model.layers.0.mlp"):
        mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=at)
    with b.backward():
        b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, at_us=at + 20)


def _load(b: TraceBuilder, tmp_path: Path):
    a = tracekit.load(b.write(tmp_path / "t.pt.trace.json"), cache=False, jobs=1)
    ph = a.table("phases").set_index("phase")
    return a, ph


def test_tail_without_evidence_is_unattributed(tmp_path: Path) -> None:
    """No optimizer evidence: work after autograd is unattributed, never optimizer."""
    b = TraceBuilder()
    with b.step():
        _forward_backward(b)
        b.kernel(K_MUL, 5, op="aten::add_", at_us=60)  # e.g. a hand-written SGD update
        b.kernel(K_MUL, 5, op="aten::add_", at_us=70)
    a, ph = _load(b, tmp_path)
    assert list(ph.index) == ["forward", "backward", "unattributed", "optimizer"]
    assert ph.loc["forward", "wall_ms"] == pytest.approx(0.020, abs=EXACT)
    assert ph.loc["backward", "wall_ms"] == pytest.approx(0.030, abs=EXACT)  # 30 -> 60
    assert ph.loc["unattributed", "wall_ms"] == pytest.approx(0.015, abs=EXACT)  # 60 -> 75
    assert ph.loc["unattributed", "compute_ms"] == pytest.approx(0.010, abs=EXACT)
    assert ph.loc["optimizer", "wall_ms"] == 0 and ph.loc["optimizer", "compute_ms"] == 0
    assert ph["wall_ms"].sum() == pytest.approx(0.065, abs=EXACT)  # the step window
    mods = a.table("modules")
    un = mods[mods["phase"] == "unattributed"].set_index("module")
    assert un["time_ms"].sum() == pytest.approx(0.015, abs=EXACT)
    assert un.loc["Other", "time_ms"] == pytest.approx(0.010, abs=EXACT)
    assert un.loc["Idle", "time_ms"] == pytest.approx(0.005, abs=EXACT)
    assert a.meta["coverage"][0]["unattributed"] == pytest.approx(10 / 40, abs=1e-6)


def test_optimizer_ops_outside_the_range_are_optimizer(tmp_path: Path) -> None:
    """A fused Adam op with no Optimizer.step# range around it is optimizer evidence."""
    b = TraceBuilder()
    with b.step():
        _forward_backward(b)
        b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=60)
    a, ph = _load(b, tmp_path)
    assert "unattributed" not in ph.index
    assert ph.loc["backward", "wall_ms"] == pytest.approx(0.030, abs=EXACT)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(0.005, abs=EXACT)
    assert ph.loc["optimizer", "compute_ms"] == pytest.approx(0.005, abs=EXACT)
    ev = a.intervals.set_index("start")["phase_evidence"].astype(str)
    assert (ev == "optimizer_op").sum() == 1


def test_zero_grad_before_backward_is_forward(tmp_path: Path) -> None:
    """zero_grad that prepares the step (before backward) is forward, after backward optimizer."""
    b = TraceBuilder()
    with b.step():
        with b.zero_grad():
            b.memset(2, at_us=5)
        _forward_backward(b, at=30)
        with b.zero_grad():
            b.memset(2, at_us=80)
    _, ph = _load(b, tmp_path)
    assert ph.loc["forward", "wall_ms"] == pytest.approx(0.045, abs=EXACT)  # 5 -> 50
    assert ph.loc["backward", "wall_ms"] == pytest.approx(0.030, abs=EXACT)  # 50 -> 80
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(0.002, abs=EXACT)  # 80 -> 82
    assert "unattributed" not in ph.index


def test_deepspeed_tail_follows_the_step_structure(tmp_path: Path) -> None:
    """engine.backward's gradient all-reduce after autograd is backward; engine.step's grad-norm
    all-reduce before Optimizer.step# is optimizer; exposed communication never exceeds comm."""
    b = TraceBuilder()
    with b.step():
        _forward_backward(b)
        b.kernel(K_MUL, 2, op="aten::div_", at_us=52)  # bucket averaging
        b.comm("AllReduce", 10, at_us=55)  # gradient reduction: 55-65
        b.kernel(K_MUL, 3, op="aten::linalg_vector_norm", at_us=70)  # grad norm: 70-73
        b.comm("AllReduce", 2, at_us=75)  # grad-norm all-reduce: 75-77
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=80)
    a, ph = _load(b, tmp_path)
    assert "unattributed" not in ph.index
    assert ph.loc["backward", "wall_ms"] == pytest.approx(0.040, abs=EXACT)  # 30 -> 70
    assert ph.loc["backward", "comm_ms"] == pytest.approx(0.010, abs=EXACT)
    assert ph.loc["backward", "compute_ms"] == pytest.approx(0.022, abs=EXACT)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(0.015, abs=EXACT)  # 70 -> 85
    assert ph.loc["optimizer", "comm_ms"] == pytest.approx(0.002, abs=EXACT)
    assert ph.loc["optimizer", "compute_ms"] == pytest.approx(0.008, abs=EXACT)
    assert ph.loc["forward", "comm_ms"] == 0
    assert (ph["exposed_comm_ms"] <= ph["comm_ms"] + EXACT).all()
    ev = a.intervals["phase_evidence"].astype(str).value_counts()
    assert ev["gradient_reduction"] == 2 and ev["grad_norm"] == 2


def _strip(src: Path, dst: Path, prefixes: tuple[str, ...]) -> Path:
    import gzip
    import json

    dst.mkdir()
    for f in src.glob("rank*.pt.trace.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        doc["traceEvents"] = [
            e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith(prefixes)
        ]
        (dst / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    return dst


@pytest.mark.parametrize("also_frames", [False, True])
def test_real_deepspeed_phases_without_annotations(tmp_path: Path, also_frames: bool) -> None:
    """The ZeRO-2 sample (gloo, CPU) with tracekit's phase ranges removed: DeepSpeed's
    engine.backward / engine.step frames give every activity the phase the capture's ranges
    give; with those frames removed too, the step's structure alone still puts every collective
    there (gradient reduction in backward; grad-norm all-reduce and parameter all-gather in the
    optimizer), and exposed communication never exceeds communication."""
    src = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-zero2-2ranks"
    prefixes = ("tracekit.phase:",) + (("deepspeed/runtime/engine.py(",) if also_frames else ())
    annotated = tracekit.load(src, cache=False, jobs=1)
    bare = tracekit.load(_strip(src, tmp_path / "bare", prefixes), cache=False, jobs=1)
    for r in annotated.ranks:
        want = annotated.ranks[r].intervals["phase"].astype(str).to_numpy()
        got = bare.ranks[r].intervals["phase"].astype(str).to_numpy()
        comm = (annotated.ranks[r].intervals["group"] == "comm").to_numpy()
        assert (got[comm] == want[comm]).all()
        if not also_frames:
            assert (got == want).all()
    ph = bare.table("phases")
    assert (ph["exposed_comm_ms"] <= ph["comm_ms"] + EXACT).all()


def test_autograd_thread_without_evaluate_function(tmp_path: Path) -> None:
    """Torch 1.9 records backward nodes (ops with a forward thread id) but no
    ``autograd::engine::evaluate_function`` ranges. The engine's own work on its thread outside
    any node (``AccumulateGrad``'s gradient add, input-buffer adds of branching graphs) is
    backward: the thread runs backward nodes and no ProfilerStep. Real: the kineto resnet50
    sample's 161 AccumulateGrad kernels per step were forward (default)."""
    b = TraceBuilder(old_categories=True)
    with b.step():
        with b.module("LlamaMLP", "model.layers.0.mlp"):
            mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=10)
        with b.backward():
            b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, at_us=30)
            with b.op("torch::autograd::AccumulateGrad"):
                grad = b.kernel(K_MUL, 3, op="aten::add_", at_us=55)
            b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, at_us=60)
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=90)
    doc = b.trace()
    eval_prefix = "autograd::engine::evaluate_function"
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e.get("name", "").startswith(eval_prefix)]
    a = tracekit.load(write_trace(tmp_path / "t.pt.trace.json", doc), cache=False, jobs=1)
    iv = a.intervals
    row = iv[iv["start"] == grad.start].iloc[0]
    assert (row["phase"], row["phase_evidence"]) == ("backward", "autograd_thread")
    ph = a.table("phases").set_index("phase")
    assert ph.at["forward", "compute_ms"] == pytest.approx(0.010, abs=EXACT)
    assert ph.at["backward", "compute_ms"] == pytest.approx(0.043, abs=EXACT)
