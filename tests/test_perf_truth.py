"""Planted truth for the perf model: shapes and kernel times chosen, FLOPs, TFLOP/s, % of peak and
MFU recovered exactly (forward and backward GEMMs, causal attention, a TF32 GEMM), through
``tracekit.testing`` and ``tracekit.load`` like any trace. The trace says it ran on an
``NVIDIA H100 80GB HBM3``: dense bf16 989.4 TFLOP/s, tf32 494.7, 3.35 TB/s."""

from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_FLASH_BWD, K_FLASH_FWD

BF16, F32 = "c10::BFloat16", "float"
BF16_PEAK, TF32_PEAK = 989.4e12, 494.7e12
M, N, K = 666, 11008, 4096  # the paper's Table XII, naive
GEMM = 2 * M * N * K  # 60,058,238,976
B, H, S, D = 2, 32, 1024, 128
ATTN = 2 * B * H * (S * S / 2) * (D + D)  # causal: half the pairs; 17,179,869,184
TF32_KERNEL = "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x16_stage4_warpsize2x2x1_tensor16x8x8"
SDPA = "aten::_scaled_dot_product_flash_attention"


def _sdpa_args(causal: str) -> dict:
    return {
        "input_dims": [[B, H, S, D]] * 3 + [[]] * 4,
        "input_types": [BF16] * 3 + ["Scalar"] * 4,
        "concrete_inputs": ["", "", "", "0.0", causal, "False", ""],
    }


def _trace(tmp_path):
    b = TraceBuilder()
    with b.step():
        with b.module("LlamaMLP", "model.layers.0.mlp"):
            with b.op("aten::linear", input_dims=[[M, K], [N, K], []], input_types=[BF16, BF16, ""]):
                with b.op("aten::mm", input_dims=[[M, K], [K, N]], input_types=[BF16, BF16]) as mm:
                    b.memset(2, at_us=20)  # a split-K workspace: in the GEMM's time, not its FLOPs
                    b.kernel(GEMM_A, 287, at_us=23)
            b.kernel(
                TF32_KERNEL,
                20,
                op="aten::mm",
                input_dims=[[64, 64], [64, 64]],
                input_types=[F32, F32],
                at_us=320,
            )
        with b.module("LlamaAttention", "model.layers.0.self_attn"):
            attn = b.kernel(K_FLASH_FWD, 100, op=SDPA, **_sdpa_args("True"), at_us=350)
        with b.backward():
            with b.backward_node(mm):  # MmBackward0: dgrad and wgrad, each with its own shapes
                b.kernel(
                    GEMM_NN,
                    300,
                    op="aten::mm",
                    input_dims=[[M, N], [N, K]],
                    input_types=[BF16, BF16],
                    at_us=500,
                )
                b.kernel(
                    GEMM_NN,
                    310,
                    op="aten::mm",
                    input_dims=[[N, M], [M, K]],
                    input_types=[BF16, BF16],
                    at_us=800,
                )
            bwd = {
                "input_dims": [[B, H, S, D]] * 5 + [[B, H, S]] + [[]] * 9,
                "input_types": [BF16] * 5 + [F32] + ["Scalar"] * 9,
                "concrete_inputs": [""] * 8 + ["1024", "1024", "0.0", "True", "", "", ""],
            }
            b.kernel(K_FLASH_BWD, 250, op=f"{SDPA}_backward", creator=attn, **bwd, at_us=1200)
    return tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False, jobs=1)


def test_gemm_shapes_recover_flops_tflops_and_peak(tmp_path) -> None:
    t = _trace(tmp_path).table("gemm_shapes").set_index(["phase", "m", "n", "k"])
    fwd = t.loc[("forward", M, N, K)]
    assert (fwd["op"], fwd["batch"], fwd["dtype"], fwd["calls"]) == ("aten::mm", 1, "bf16", 1)
    assert fwd["gflop"] == pytest.approx(GEMM / 1e9, rel=1e-12)
    assert fwd["time_ms"] == pytest.approx(0.289) and fwd["us_per_call"] == pytest.approx(289.0)  # 2 + 287
    assert fwd["tflops"] == pytest.approx(GEMM / 289e-6 / 1e12, rel=1e-12)  # 207.8
    assert fwd["peak_pct"] == pytest.approx(GEMM / 289e-6 / BF16_PEAK * 100, rel=1e-12)
    dgrad, wgrad = t.loc[("backward", M, K, N)], t.loc[("backward", N, K, M)]
    assert dgrad["gflop"] == pytest.approx(GEMM / 1e9) and wgrad["gflop"] == pytest.approx(GEMM / 1e9)
    assert dgrad["tflops"] == pytest.approx(GEMM / 300e-6 / 1e12) and wgrad["time_ms"] == pytest.approx(0.31)
    tf32 = t.loc[("forward", 64, 64, 64)]
    assert tf32["dtype"] == "tf32"  # an fp32 GEMM measured against the tf32 peak says so (issue 38.6)
    assert tf32["peak_pct"] == pytest.approx(2 * 64**3 / 20e-6 / TF32_PEAK * 100)  # its kernel runs on TF32


def test_attention_and_mfu(tmp_path) -> None:
    a = _trace(tmp_path)
    shapes = a.table("op_shapes").set_index(["phase", "op"])
    assert shapes.loc[("forward", SDPA), "gflop"] == pytest.approx(ATTN / 1e9)
    assert shapes.loc[("backward", f"{SDPA}_backward"), "gflop"] == pytest.approx(2.5 * ATTN / 1e9)
    assert shapes.loc[("forward", SDPA), "tflops"] == pytest.approx(ATTN / 100e-6 / 1e12)
    phases = a.table("phases").set_index("phase")
    fwd_flops = GEMM + 2 * 64**3 + ATTN
    fwd_ideal = (GEMM + ATTN) / BF16_PEAK + 2 * 64**3 / TF32_PEAK
    bwd_ideal = (2 * GEMM + 2.5 * ATTN) / BF16_PEAK
    assert phases.loc["forward", "gflop"] == pytest.approx(fwd_flops / 1e9)
    assert phases.loc["forward", "wall_ms"] == pytest.approx(0.480)  # 20 us .. first backward at 500
    assert phases.loc["forward", "mfu_pct"] == pytest.approx(fwd_ideal / 480e-6 * 100)
    assert phases.loc["backward", "mfu_pct"] == pytest.approx(bwd_ideal / 950e-6 * 100)  # 500 .. 1450
    mfu = next(iter(a.ranks.values())).meta["mfu"]
    assert mfu["mean_pct"] == pytest.approx((fwd_ideal + bwd_ideal) / 1430e-6 * 100, rel=1e-6)
    meta = json.loads(json.dumps(a.meta, default=str))
    assert meta["device"]["0"]["matched"] == "NVIDIA H100 SXM5 80GB"


def test_efficiency_and_explicit_peaks(tmp_path) -> None:
    a = _trace(tmp_path)
    eff = a.table("efficiency").set_index(["phase", "module"])
    mlp = eff.loc[("forward", "MLP")]
    assert mlp["gflop"] == pytest.approx((GEMM + 2 * 64**3) / 1e9) and mlp["modelled_pct"] == 100
    # efficiency is over compute kernels: the memset is not in the MLP's 287 + 20 us
    assert mlp["bound"] == "compute" and mlp["tflops"] == pytest.approx((GEMM + 2 * 64**3) / 307e-6 / 1e12)
    given = tracekit.load(tmp_path / "rank0.pt.trace.json", cache=False, jobs=1, peak_tflops="bf16=1000")
    fwd = given.table("gemm_shapes").set_index(["phase", "m"]).loc[("forward", M)]
    assert fwd["peak_pct"] == pytest.approx(GEMM / 289e-6 / 1e15 * 100)
    assert given.table("gemm_shapes").set_index(["phase", "m"]).loc[("forward", 64), "peak_pct"] != 0


def test_an_unknown_device_leaves_the_percentages_empty(tmp_path) -> None:
    a = _trace(tmp_path)  # the builder writes an H100's deviceProperties: rename it
    doc = json.loads((tmp_path / "rank0.pt.trace.json").read_text())
    doc["deviceProperties"][0]["name"] = "NVIDIA H100"  # not a name any row holds
    (tmp_path / "unknown.json").write_text(json.dumps(doc))
    u = tracekit.load(tmp_path / "unknown.json", cache=False, jobs=1)
    shapes = u.table("gemm_shapes")
    assert shapes["peak_pct"].isna().all() and (shapes["tflops"] > 0).all()
    assert u.table("phases")["mfu_pct"].isna().any()
    assert any("unknown device 'NVIDIA H100'" in n for n in u.meta["notices"])
    assert a.table("gemm_shapes")["peak_pct"].notna().all()
