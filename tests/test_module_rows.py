"""Module rows of issue 37 (items 6 and 7): projections an attention module runs itself, and
output heads outside the HF causal-LM classes.

Planted truth (``tracekit.testing``) first: each shape of trace, with the times every row must
get exactly. Then the CPU captures of tests/module_captures.py kept in tests/data/captures/
(a plain ``nn.MultiheadAttention`` transformer with non-reentrant checkpointing, BERT
masked-LM, ViT classifier, T5, OPT), each row checked against a sum computed from the raw
JSON by tests/module_oracle.py, which shares no code with tracekit.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADD, K_MUL

sys.path.insert(0, str(Path(__file__).parent))
from module_oracle import rows as oracle_rows

NS = 1e-6  # one nanosecond, in ms
CAPTURES = Path(__file__).parent / "data" / "captures"
SDPA = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4>, true>(Flash_fwd_params)"


def _us(k) -> float:
    return (k.end - k.start) / 1000


def _rows(a, phase: str) -> dict[str, float]:
    t = a.table("modules")
    t = t[(t["phase"] == phase) & (t["time_ms"] > 0) & (t["module"] != "Idle")]
    return dict(zip(t["module"], t["time_ms"]))


def _mha(b: TraceBuilder, core: str) -> dict[str, list]:
    """nn.MultiheadAttention's training path inside a block: F.linear on in_proj_weight, the
    core (one fused op, or bmm / softmax / bmm), F.linear on out_proj.weight; no Linear module."""
    made: dict[str, list] = defaultdict(list)
    with b.module("MultiheadAttention", "blocks.0.attn"):
        made["QKV"].append(b.kernel(GEMM_A, 30, op="aten::linear"))
        made["Attention other"].append(b.kernel(K_ADD, 3, op="aten::view"))
        if core != "bmm":
            made["Attention"].append(b.kernel(SDPA, 20, op="aten::scaled_dot_product_attention"))
        else:
            made["Bmm0"].append(b.kernel(GEMM_NN, 11, op="aten::baddbmm"))
            made["Softmax"].append(b.kernel(K_MUL, 5, op="aten::softmax"))
            made["Bmm1"].append(b.kernel(GEMM_NN, 12, op="aten::bmm"))
        if core == "out_proj module":  # out_proj called as a module: a lone Linear child
            with b.module("NonDynamicallyQuantizableLinear", "blocks.0.attn.out_proj"):
                made["Output"].append(b.kernel(GEMM_A, 13, op="aten::linear"))
        else:
            made["Output"].append(b.kernel(GEMM_A, 13, op="aten::linear"))
    return made


@pytest.mark.parametrize("core", ["fused", "bmm", "out_proj module"])
def test_multihead_attention_projections_are_qkv_and_output(tmp_path, core):
    """Issue 37.6: the GEMMs an attention module runs itself are QKV before its core and
    Output after it, forward and backward (the backward of each follows its forward op)."""
    b = TraceBuilder()
    with b.step():
        with b.forward(), b.module("Net", "model"), b.module("Block", "blocks.0"):
            made = _mha(b, core)
        with b.backward():
            for row, kernels in reversed(made.items()):
                for k in kernels:
                    b.kernel(GEMM_NN, 2 * _us(k), op="aten::mm", creator=k)
    a = tracekit.load(b.write(tmp_path / "mha.json"), cache=False, jobs=1)
    want = {row: sum(_us(k) for k in ks) / 1000 for row, ks in made.items()}
    assert _rows(a, "forward") == pytest.approx(want, abs=NS)
    assert _rows(a, "backward") == pytest.approx({r: 2 * v for r, v in want.items()}, abs=NS)


def test_explain_says_why_a_projection_and_a_head_got_their_rows(tmp_path):
    """``tracekit explain`` gives each of the two rules' evidence in a ``why`` line."""
    from tracekit import explain

    b = TraceBuilder()
    with b.step(), b.forward(), b.module("Net", "model"):
        with b.module("Block", "blocks.0"):
            _mha(b, "fused")
        _linear_head(b, lambda row, us: b.kernel(GEMM_NN, us, op="aten::addmm"))
    path = b.write(tmp_path / "why.json")
    why = {
        c["module_category"]["category"]: c["module_category"]["why"]
        for pattern in ("gemm", "nn_")
        for c in explain.run(path, pattern, limit=20)["chains"]
    }
    assert "before its core" in why["QKV"] and "before its core" in why["Output"]
    assert "output head" in why["Linear"]


def _model(b: TraceBuilder, root: str, body, head) -> None:
    with b.module(root, "model"):
        body()
        head()


def _plant_head(b: TraceBuilder, shape: str, want: dict) -> None:
    """One forward of a model whose head is planted as ``shape`` (want: row -> us)."""

    def k(row: str, us: float, op: str = "aten::addmm", name: str = GEMM_A) -> None:
        b.kernel(name, us, op=op)
        want[row] += us

    def body_plain() -> None:
        with b.module("Embedding", "embed"):
            k("Embedding", 2, "aten::embedding", K_ADD)
        for i in range(2):
            with b.module("Block", f"blocks.{i}"), b.module("Sequential", f"blocks.{i}.mlp"):
                for j in range(2):
                    with b.module("Linear", f"blocks.{i}.mlp.{j}"):
                        k("MLP", 10 + j)
        with b.module("LayerNorm", "norm"):
            k("RMSNorm", 3, "aten::layer_norm", K_ADD)

    if shape == "plain":  # a user's model: its output projection is its last Linear
        _model(b, "Net", body_plain, lambda: _linear_head(b, k))
    elif shape == "wrapped":  # the same under DDP: the wrapper's one child is the model
        with b.module("DistributedDataParallel", "ddp"):
            _model(b, "Net", body_plain, lambda: _linear_head(b, k))
    elif shape == "vit":
        _model(b, "ViTForImageClassification", body_plain, lambda: _linear_head(b, k))
    elif shape == "bert":  # BertOnlyMLMHead > BertLMPredictionHead > transform, decoder; its norm stays

        def mlm() -> None:
            with b.module("BertOnlyMLMHead", "cls"), b.module("BertLMPredictionHead", "cls.predictions"):
                with b.module("BertPredictionHeadTransform", "cls.predictions.transform"):
                    with b.module("Linear", "cls.predictions.transform.dense"):
                        k("Linear", 21)
                    with b.module("GELUActivation", "cls.predictions.transform.act"):
                        k("Linear", 4, "aten::gelu", K_ADD)
                    with b.module("LayerNorm", "cls.predictions.transform.LayerNorm"):
                        k("RMSNorm", 5, "aten::layer_norm", K_ADD)
                with b.module("Linear", "cls.predictions.decoder"):
                    k("Linear", 23)
            with b.module("CrossEntropyLoss", "loss"):
                k("Other", 6, "aten::cross_entropy_loss", K_ADD)

        _model(b, "BertForMaskedLM", body_plain, mlm)


def _linear_head(b: TraceBuilder, k) -> None:
    with b.module("Linear", "head"):
        k("Linear", 17)


@pytest.mark.parametrize("shape", ["plain", "wrapped", "vit", "bert"])
def test_heads_outside_causal_lm_classes_are_the_linear_row(tmp_path, shape):
    """Issue 37.7: the model's output head (the last Linear, or *Head module, the model itself
    calls after its body) is the Linear row, whatever the model class; its norm stays a norm."""
    want: dict[str, float] = defaultdict(float)
    b = TraceBuilder()
    with b.step(), b.forward():
        _plant_head(b, shape, want)
    a = tracekit.load(b.write(tmp_path / "head.json"), cache=False, jobs=1)
    assert _rows(a, "forward") == pytest.approx({r: v / 1000 for r, v in want.items()}, abs=NS)


def test_not_heads_an_input_projection_or_a_rerun_block(tmp_path):
    """The head place needs the model's body before it, and a model: a Linear the model calls
    first (an input projection) is not a head, nor the last Linear of a block checkpointed and
    rerun in backward (a root there, but called inside the model in forward)."""
    b = TraceBuilder()
    with b.step():
        with b.forward(), b.module("Net", "model"):
            with b.module("Linear", "proj_in"):
                b.kernel(GEMM_A, 8, op="aten::addmm")
            with b.module("Block", "blocks.0"):
                with b.module("LayerNorm", "blocks.0.norm"):
                    b.kernel(K_ADD, 3, op="aten::layer_norm")
                with b.module("Linear", "blocks.0.fc"):
                    fc = b.kernel(GEMM_A, 9, op="aten::addmm")
            with b.module("Linear", "head"):
                b.kernel(GEMM_A, 17, op="aten::addmm")
        with b.backward():
            with b.module("Block", "blocks.0"):  # recompute
                with b.module("LayerNorm", "blocks.0.norm"):
                    b.kernel(K_ADD, 3, op="aten::layer_norm")
                with b.module("Linear", "blocks.0.fc"):
                    b.kernel(GEMM_A, 9, op="aten::addmm")
            b.kernel(GEMM_NN, 5, op="aten::mm", creator=fc)
    a = tracekit.load(b.write(tmp_path / "not_head.json"), cache=False, jobs=1)
    assert _rows(a, "forward") == pytest.approx({"Other": 0.017, "RMSNorm": 0.003, "Linear": 0.017}, abs=NS)
    assert _rows(a, "backward") == pytest.approx({"Other": 0.014, "RMSNorm": 0.003}, abs=NS)


def test_a_head_tied_to_the_embedding_is_the_linear_row(tmp_path):
    """A head with no module around it (``F.linear(x, self.embed.weight)`` in the model's own
    forward): the last GEMM op the model runs itself after its last module is Linear, forward
    and backward; a GEMM it runs before its last module (a functional input projection) and
    its loss stay Other."""
    b = TraceBuilder()
    with b.step():
        with b.forward(), b.module("Net", "model"):
            with b.module("Embedding", "embed"):
                b.kernel(K_ADD, 2, op="aten::embedding")
            b.kernel(GEMM_A, 7, op="aten::matmul")  # input projection, functional
            with b.module("LayerNorm", "norm"):
                b.kernel(K_ADD, 3, op="aten::layer_norm")
            tied = b.kernel(GEMM_A, 19, op="aten::linear")
            b.kernel(K_MUL, 4, op="aten::cross_entropy_loss")
        with b.backward():
            b.kernel(GEMM_NN, 23, op="aten::mm", creator=tied)
    a = tracekit.load(b.write(tmp_path / "tied.json"), cache=False, jobs=1)
    assert _rows(a, "forward") == pytest.approx(
        {"Embedding": 0.002, "Other": 0.011, "RMSNorm": 0.003, "Linear": 0.019}, abs=NS
    )
    assert _rows(a, "backward") == pytest.approx({"Linear": 0.023}, abs=NS)
    from tracekit import explain

    chains = explain.run(tmp_path / "tied.json", "gemm")["chains"]
    assert any("last GEMM op" in (c["module_category"]["why"] or "") for c in chains)


#: The stored captures (tests/module_captures.py) and each one's head module instance.
HEADS = {
    "plain": "Linear_4",
    "bert": "BertOnlyMLMHead_0",
    "vit": "Linear_12",
    "t5": "Linear_32",
    "opt": "Linear_12",
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_captured_rows_match_the_raw_json(name):
    """QKV, Output (nn.MultiheadAttention's own projections) and the head's Linear row of each
    capture, forward and backward (recompute included), against tests/module_oracle.py."""
    path = CAPTURES / f"{name}.json.gz"
    assert path.stat().st_size < 1_000_000
    want = oracle_rows(path, HEADS[name])
    assert want[("forward", "Linear")] > 0 and want[("backward", "Linear")] > 0
    if name == "plain":
        assert min(want[(p, r)] for p in ("forward", "backward") for r in ("QKV", "Output")) > 0
    t = tracekit.load(path, cache=False, jobs=1).table("modules")
    got = {(r.phase, r.module): r.time_ms for r in t.itertuples()}
    rows = want if name == "plain" else {k: v for k, v in want.items() if k[1] == "Linear"}
    assert {k: got.get(k, 0.0) for k in rows} == pytest.approx(rows, rel=1e-6, abs=1e-6)


def test_opt_activation_is_mlp_forward_and_backward():
    """Issue 37 (OPT's activation): OPT's decoder layer has no MLP module; fc1, ``activation_fn``
    (an ``nn.ReLU``) and fc2 are its direct children, the whole FFN block, so all three are MLP
    (DESIGN.md: MLP is "the whole MLP block"). The activation's backward node (``ReluBackward0``,
    created by the ``aten::relu`` inside ``nn.Module: ReLU_N`` by sequence number and fwdbwd
    flow) follows it into MLP, as every backward op follows its forward op's row. The MLP row
    and its activation part, both phases, equal tests/module_oracle.py's sums from the raw JSON."""
    path = CAPTURES / "opt.json.gz"
    want = oracle_rows(path, HEADS["opt"])
    a = tracekit.load(path, cache=False, jobs=1)
    got = {(r.phase, r.module): r.time_ms for r in a.table("modules").itertuples()}
    iv = a.intervals
    steps = iv["step"].nunique()
    act = iv[iv["module_instance"].astype(str).str.startswith("ReLU_")]
    for phase in ("forward", "backward"):
        assert want[(phase, "MLP activation")] > 0
        mine = act[act["phase"].astype(str) == phase]
        assert set(mine["module"].astype(str)) == {"MLP"}, phase
        ms = float((mine["end"] - mine["start"]).sum()) / 1e6 / steps
        assert ms == pytest.approx(want[(phase, "MLP activation")], rel=1e-6, abs=1e-6)
        assert got[(phase, "MLP")] == pytest.approx(want[(phase, "MLP")], rel=1e-6, abs=1e-6)
    fw = iv[iv["phase"].astype(str) == "forward"]
    forward = fw.groupby("op_id")["module"].agg(lambda s: set(s.astype(str)))
    bw = iv[(iv["phase"].astype(str) == "backward") & iv["fwd_op_id"].isin(forward.index)]
    assert "aten::relu" in set(bw["fwd_op"].astype(str))
    moved = {
        (str(r.fwd_op), str(r.module)) for r in bw.itertuples() if str(r.module) not in forward[r.fwd_op_id]
    }
    assert not moved, moved
