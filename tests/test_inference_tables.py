"""Inference tables (Table X kernels, Table XI timeline) on real serving traces, and stages.

The real traces live in ../shared/traces (tests skip when absent): SGLang Qwen3-8B on MI300X
(prefill, and a decode-only capture) and vLLM GPT-OSS on B200. Qwen3-8B and GPT-OSS-120B both
have 36 decoder layers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from shared_traces import shared_trace

import tracekit
from tracekit.pipeline.stages import from_passes, stage_of_range
from tracekit.pipeline.taxonomy import kernel_rules

SGLANG_PD = "tracelens/inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode.json.gz"
SGLANG_DEC = "tracelens/inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz"
B200 = "tracelens/b200__eager_trace.json.gz"
TINY_INFER = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-infer"


@pytest.fixture(scope="module")
def sglang():
    return tracekit.load(shared_trace(SGLANG_PD), cache=False)


@pytest.fixture(scope="module")
def b200():
    return tracekit.load(shared_trace(B200), cache=False)


# --- stage names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, stage",
    [
        ("step[EXTEND bs=15 toks=15360]", "prefill"),
        ("step[DECODE bs=32]", "decode"),
        ("step[MIXED bs=4]", "mixed"),
        ("execute_context_1(888_788544)_generation_0(0)", "prefill"),
        ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk32785sqsq32sqsk32785)", "decode"),
        ("execute_context_3(1_2)_generation_5(5)", "mixed"),
        ("llm.prefill", "prefill"),
        ("ProfilerStep#3", ""),
        ("decoder_layer_norm", ""),  # 'decode' inside a longer word is no stage
    ],
)
def test_stage_of_range(name, stage):
    assert stage_of_range(name)[0] == stage


def test_hf_generate_passes_first_is_prefill_rest_decode():
    # Three passes of a model (outermost module holding a decoder layer), one step.
    mods = pd.DataFrame(
        {
            "parent": [-1, 0, -1, 2, -1, 4],
            "is_layer": [False, True] * 3,
            "start": [100, 110, 300, 310, 500, 510],
        }
    )
    ts = np.array([50, 120, 250, 320, 520, 900])
    out = from_passes(mods, ts, np.zeros(6, np.int64), np.array(["forward"] * 6, dtype=object))
    assert out.tolist() == ["prefill", "prefill", "prefill", "decode", "decode", "decode"]
    # Backward work: a training trace, no stages.
    ph = np.array(["forward"] * 5 + ["backward"], dtype=object)
    assert (from_passes(mods, ts, np.zeros(6, np.int64), ph) == "").all()


# --- kernel rules of serving stacks ----------------------------------------------------------


@pytest.mark.parametrize(
    "kernel, category",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "GEMM"),
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "GEMM"),
        ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT320x224x64_MI16x16x1", "GEMM"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", "GEMM"),
        ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3", "GEMM"),
        ("triton_poi_fused_add_0", "Triton"),
        ("_fwd_kernel_stage1", "Triton"),
        ("create_flashinfer_kv_indices_triton", "Triton"),
        (
            "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_E",
            "Element-wise",
        ),
        ("_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernel", "Attention"),
        (
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4, false, false, cutlass::bfloat16_t>>",
            "Attention",
        ),
        ("fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext", "Attention"),
        ("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char>", "Attention"),
        (
            "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<cutlass::bfloat16_t>>",
            "MoE routing",
        ),
        ("_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi64ELi8E", "RMSNorm"),
        ("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "RoPE"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "Element-wise"),
    ],
)
def test_serving_kernel_rules(kernel, category):
    assert kernel_rules().compute_category(kernel, "") == category


@pytest.mark.parametrize(
    "kernel, collective",
    [
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
        ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>", "AllReduce"),
        ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>", "AllReduce"),
        ("ncclKernel_AllReduce_RING_LL_Sum_bfloat16", "AllReduce"),
    ],
)
def test_comm_kernels(kernel, collective):
    r = kernel_rules()
    assert r.comm_kernel.search(kernel)
    assert r.collective(kernel) == collective


# --- real traces -----------------------------------------------------------------------------


def _sums_to_100(df: pd.DataFrame, by: list[str]):
    for _, g in df.groupby(by) if by else [(None, df)]:
        assert g["percent"].sum() == pytest.approx(100.0, abs=1e-6)


@pytest.mark.shared
def test_sglang_prefill_stage_tables(sglang):
    k = sglang.table("kernels")
    assert set(k["stage"]) == {"prefill"}
    _sums_to_100(k, ["stage"])
    comp = k[k.group == "compute"].set_index("category")["time_ms"]
    assert comp.idxmax() == "GEMM"  # hipBLASLt Cijk_* kernels
    assert comp["GEMM"] > 400
    assert comp["Triton"] < 0.1  # the mangled sgl act_and_mul kernel is not Triton
    assert comp["Attention"] > 15  # CK fmha prefill + KV-cache stores
    t = sglang.table("timeline").set_index("block")
    assert t.loc["attention", "count"] == 36 and t.loc["ffn", "count"] == 36
    assert t.loc["attention", "passes"] == 1
    _sums_to_100(sglang.table("timeline"), ["stage"])
    assert t.loc["ffn", "time_ms"] > t.loc["attention", "time_ms"]  # MLP GEMMs dominate


@pytest.mark.shared
def test_sglang_decode_trace_is_decode():
    a = tracekit.load(shared_trace(SGLANG_DEC), cache=False)
    k = a.table("kernels")
    assert set(k["stage"]) == {"decode"}
    _sums_to_100(k, ["stage"])


@pytest.mark.shared
def test_b200_gpt_oss(b200):
    k = b200.table("kernels")
    _sums_to_100(k, ["stage"])
    assert set(k["stage"]) == {"prefill"}  # vLLM execute_context_1(...)_generation_0
    comm = k[k.group == "comm"].set_index("category")
    assert comm.loc["AllReduce", "count"] == 73  # symmetric-memory multimem all-reduce
    assert comm.loc["AllGather", "count"] == 1
    comp = k[k.group == "compute"].set_index("category")["time_ms"]
    assert comp.idxmax() in ("GEMM", "Element-wise")
    assert comp["GEMM"] > comp["Other"]  # trtllm-gen MoE bmm_* kernels are GEMMs
    t = b200.table("timeline").set_index("block")
    assert t.loc["attention", "count"] == 36 and t.loc["ffn", "count"] == 36
    _sums_to_100(b200.table("timeline"), ["stage"])


def test_capture_annotated_prefill_decode():
    assert TINY_INFER.exists(), "the committed sample sample_traces/tiny-infer is missing"
    a = tracekit.load(TINY_INFER, cache=False)  # no cache file written into the source tree
    t = a.table("timeline", per_step=True)
    assert set(t["stage"]) == {"prefill", "decode"}
    _sums_to_100(t, ["step", "stage"])
    mean = a.table("timeline")
    # Means are over the steps that hold the stage: the one prefill step is not diluted.
    pre = t[t.stage == "prefill"].set_index("block")["time_ms"]
    assert mean[mean.stage == "prefill"].set_index("block")["time_ms"].to_dict() == pytest.approx(
        pre.to_dict()
    )
    assert (mean.loc[mean.block == "attention", "count"] == 2).all()
