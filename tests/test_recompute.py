"""Activation recomputation (issue 12.6): forward modules run again inside backward are
reported as recompute, a part of backward, charged to the module they rerun."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

EXACT = 1e-9
sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import SHARED


@pytest.mark.parametrize("modules", ["nn_module", "capture"])
def test_reentrant_checkpoint_is_recompute(tmp_path: Path, modules: str) -> None:
    """forward: MLP GEMM 10-20, norm mul 22-24; backward: CheckpointFunctionBackward reruns the
    MLP (GEMM 30-40), then the MLP GEMM's gradient 42-62 and the mul's 64-66; Adam 70-75."""
    b = TraceBuilder(modules=modules)
    with b.step():
        with b.module("LlamaMLP", "model.layers.0.mlp"):
            mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=10)
        with b.module("LlamaRMSNorm", "model.norm"):
            mul = b.kernel(K_MUL, 2, op="aten::mul", at_us=22)
        with b.backward():
            with (
                b.backward_node(mm, node="CheckpointFunctionBackward"),
                b.module("LlamaMLP", "model.layers.0.mlp"),
            ):
                b.kernel(GEMM_A, 10, op="aten::mm", at_us=30)
            b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, at_us=42)
            b.kernel(K_MUL, 2, op="aten::mul", creator=mul, at_us=64)
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=70)
    a = tracekit.load(b.write(tmp_path / "t.pt.trace.json"), cache=False, jobs=1)
    ph = a.table("phases").set_index("phase")
    assert ph.loc["backward", "wall_ms"] == pytest.approx(0.040, abs=EXACT)  # 30 -> 70
    assert ph.loc["backward", "compute_ms"] == pytest.approx(0.032, abs=EXACT)
    assert ph.loc["backward", "recompute_ms"] == pytest.approx(0.010, abs=EXACT)
    assert ph.loc["forward", "recompute_ms"] == 0 and ph.loc["optimizer", "recompute_ms"] == 0
    mods = a.table("modules")
    bwd = mods[mods["phase"] == "backward"].set_index("module")
    assert bwd.loc["MLP", "time_ms"] == pytest.approx(0.030, abs=EXACT)
    assert bwd.loc["MLP", "recompute_ms"] == pytest.approx(0.010, abs=EXACT)
    assert bwd.loc["RMSNorm", "time_ms"] == pytest.approx(0.002, abs=EXACT)
    assert bwd["recompute_ms"].sum() == pytest.approx(0.010, abs=EXACT)
    assert mods[mods["phase"] != "backward"]["recompute_ms"].sum() == 0


@pytest.mark.shared
def test_real_activation_checkpointing() -> None:
    """MI300 ResNet with torch.utils.checkpoint: the rerun blocks are recompute, inside
    backward, and never more than backward's compute."""
    src = SHARED / "tracelens" / "mi300__resnet_act_checkpoint.json.gz"
    if not src.is_file():
        pytest.skip(f"shared traces not found at {SHARED}")
    a = tracekit.load(src, cache=False, jobs=1)
    ph = a.table("phases", per_step=True)
    bwd = ph[ph["phase"] == "backward"]
    assert (bwd["recompute_ms"] > 0.2 * bwd["compute_ms"]).all()
    assert (bwd["recompute_ms"] <= bwd["compute_ms"] + EXACT).all()
    assert ph[ph["phase"] != "backward"]["recompute_ms"].sum() == 0


def test_captured_llama_with_recompute() -> None:
    """sample_traces/tiny-train-recompute (tracekit capture train --recompute): every decoder
    layer is rerun in backward; the sample without --recompute has none."""
    root = Path(__file__).resolve().parents[1] / "sample_traces"
    rec = tracekit.load(root / "tiny-train-recompute", cache=False, jobs=1)
    ph = rec.table("phases").set_index("phase")
    assert 0 < ph.loc["backward", "recompute_ms"] <= ph.loc["backward", "compute_ms"]
    mods = rec.table("modules")
    bwd = mods[mods["phase"] == "backward"].set_index("module")
    for cat in ("QKV", "MLP", "RMSNorm", "Output"):
        assert bwd.loc[cat, "recompute_ms"] > 0
    assert bwd.loc["Linear", "recompute_ms"] == 0  # the LM head is outside the checkpointed layers
    plain = tracekit.load(root / "tiny-train-1rank", cache=False, jobs=1)
    assert plain.table("phases")["recompute_ms"].sum() == 0
