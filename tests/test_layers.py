"""Per-layer table (issue 14): every interval under a decoder layer carries the layer's index,
assigned once by the pipeline: forward by position in its pass (or ``layers.N`` from a captured
name), backward through its creator forward op, recompute through the module it reruns."""

from __future__ import annotations

from pathlib import Path

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

EXACT = 1e-9
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _layered_step(b: TraceBuilder, layer_call: bool) -> None:
    """Two decoder layers. Forward: layer 0 GEMM 10-20 + mul 21-22, layer 1 GEMM 30-34; the LM
    head 36-38 is in no layer. Backward: the head's gradient 46-47, the recompute of layer 1
    (GEMM 60-63) and layer 0 (GEMM 70-76) under CheckpointFunctionBackward, then the gradients
    of layer 1 (80-88) and layer 0 (90-102, mul 103-104); Adam 110-115. ``layer_call``: the
    recompute records the decoder layer's own call (``nn.Module`` events do); else only its
    submodule's (as tracekit's capture annotations do)."""
    fwd = {}
    with b.step():
        for i, (dur, at) in enumerate([(10, 10), (4, 30)]):
            with b.module("LlamaDecoderLayer", f"model.layers.{i}"):
                with b.module("LlamaMLP", f"model.layers.{i}.mlp"):
                    fwd[i] = b.kernel(GEMM_A, dur, op="aten::mm", at_us=at)
                if i == 0:
                    with b.module("LlamaRMSNorm", "model.layers.0.post_attention_layernorm"):
                        fwd["mul"] = b.kernel(K_MUL, 1, op="aten::mul", at_us=21)
        with b.module("Linear", "lm_head"):
            head = b.kernel(GEMM_A, 2, op="aten::mm", at_us=36)
        with b.backward():
            b.kernel(GEMM_NN, 1, op="aten::mm", creator=head, at_us=46)
            for i, (dur, at) in [(1, (3, 60)), (0, (6, 70))]:
                with b.backward_node(fwd[i], node="CheckpointFunctionBackward"):
                    if layer_call:
                        with (
                            b.module("LlamaDecoderLayer", f"model.layers.{i}"),
                            b.module("LlamaMLP", f"model.layers.{i}.mlp"),
                        ):
                            b.kernel(GEMM_A, dur, op="aten::mm", at_us=at)
                    else:
                        with b.module("LlamaMLP", f"model.layers.{i}.mlp"):
                            b.kernel(GEMM_A, dur, op="aten::mm", at_us=at)
            b.kernel(GEMM_NN, 8, op="aten::mm", creator=fwd[1], at_us=80)
            b.kernel(GEMM_NN, 12, op="aten::mm", creator=fwd[0], at_us=90)
            b.kernel(K_MUL, 1, op="aten::mul", creator=fwd["mul"], at_us=103)
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=110)


@pytest.mark.parametrize(
    "modules, layer_call", [("nn_module", True), ("capture", True), ("capture", False), ("both", False)]
)
def test_forward_backward_and_recompute_rows(tmp_path: Path, modules: str, layer_call: bool) -> None:
    b = TraceBuilder(modules=modules)
    _layered_step(b, layer_call)
    a = tracekit.load(b.write(tmp_path / "t.pt.trace.json"), cache=False, jobs=1)
    t = a.table("layers").set_index(["phase", "layer"])
    expect = {
        ("forward", 0): (2, 0.011),
        ("forward", 1): (1, 0.004),
        ("recompute", 0): (1, 0.006),
        ("recompute", 1): (1, 0.003),
        ("backward", 0): (2, 0.013),
        ("backward", 1): (1, 0.008),
    }
    assert list(t.index) == list(expect)  # phase order forward, recompute, backward; by layer
    for key, (count, ms) in expect.items():
        assert t.loc[key, "count"] == count
        assert t.loc[key, "time_ms"] == pytest.approx(ms, abs=EXACT)
    iv = a.intervals
    head = iv["module_instance"].astype(str).str.contains("lm_head|Linear_", regex=True)
    assert (iv.loc[head, "layer"] == -1).all()  # the LM head, forward and backward, in no layer
    s = a.table("layer_spread").set_index("phase")
    assert s.loc["backward", "slowest_layer"] == 0 and s.loc["recompute", "slowest_layer"] == 0


def test_layer_index_follows_the_captured_name(tmp_path: Path) -> None:
    """A capture that records names: ``model.layers.5`` is layer 5 even when it is the pass's
    first decoder layer (a pipeline-parallel stage holding layers 5 and 6)."""
    b = TraceBuilder(modules="capture")
    with b.step():
        for i, at in [(5, 10), (6, 20)]:
            with (
                b.module("LlamaDecoderLayer", f"model.layers.{i}"),
                b.module("LlamaMLP", f"model.layers.{i}.mlp"),
            ):
                b.kernel(GEMM_A, 2 + i, op="aten::mm", at_us=at)
    a = tracekit.load(b.write(tmp_path / "t.pt.trace.json"), cache=False, jobs=1)
    t = a.table("layers").set_index("layer")["time_ms"]
    assert t.to_dict() == pytest.approx({5: 0.007, 6: 0.008}, abs=EXACT)


def test_unnamed_layers_are_numbered_by_position_in_every_pass(tmp_path: Path) -> None:
    """``nn.Module`` events only (``LlamaDecoderLayer_N``): three forward passes in one step
    (generate: prefill, then two decode passes) number their layers 0, 1 each; a stage's row
    sums its passes, and the timeline counts 2 layers per pass."""
    b = TraceBuilder(modules="nn_module")
    with b.step():
        for p in range(3):
            with b.module("LlamaModel", "model"):
                for i in range(2):
                    with b.module("LlamaDecoderLayer", f"model.layers.{i}"):
                        b.kernel(GEMM_A, 1 + i, op="aten::mm", at_us=10 + 20 * p + 5 * i)
    a = tracekit.load(b.write(tmp_path / "t.pt.trace.json"), cache=False, jobs=1)
    t = a.table("layers").set_index(["stage", "layer"])
    assert t["count"].to_dict() == {("prefill", 0): 1, ("prefill", 1): 1, ("decode", 0): 2, ("decode", 1): 2}
    assert t.loc[("decode", 1), "time_ms"] == pytest.approx(0.004, abs=EXACT)
    tl = a.table("timeline").set_index(["stage", "block"])
    assert tl.loc[("decode", "attention"), "count"] == 2 and tl.loc[("decode", "attention"), "passes"] == 2


@pytest.mark.parametrize(
    "sample, phases",
    [
        ("tiny-train-1rank", ["forward", "backward"]),
        ("tiny-train-recompute", ["forward", "recompute", "backward"]),
    ],
)
def test_captured_training_fills_every_phase(sample: str, phases: list[str]) -> None:
    """tracekit's own captures (two decoder layers): backward, and recompute where the run
    checkpoints, have a row per layer, as forward does."""
    t = tracekit.load(SAMPLES / sample, cache=False, jobs=1).table("layers")
    assert list(dict.fromkeys(t["phase"])) == phases
    for ph in phases:
        rows = t[t["phase"] == ph]
        assert sorted(rows["layer"]) == [0, 1] and (rows["time_ms"] > 0).all()
