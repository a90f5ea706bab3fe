"""The perf model's formulas, family by family, against numbers worked out by hand.

Each case gives an op as the profiler records it (the JSON texts of ``Input Dims``, ``Input
type``, ``Concrete Inputs``) and the FLOPs and bytes written out as literals (docs/metrics.md,
"FLOPs and bytes", has the formulas).
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit.perf import model
from tracekit.perf.ops import READERS

BF16, F32, FP8 = "c10::BFloat16", "float", "c10::Float8_e4m3fn"


def m(name: str, dims: list, types: list, concrete: list | None = None):
    c = json.dumps(concrete) if concrete is not None else json.dumps([""] * len(dims))
    return model(name, json.dumps(dims), json.dumps(types), c)


# --- GEMM ------------------------------------------------------------------------------------


def test_mm_is_2mnk_and_reads_both_operands_writes_the_output() -> None:
    got = m("aten::mm", [[666, 4096], [4096, 11008]], [BF16, BF16])
    assert got.family == "gemm" and got.gemm == (1, 666, 11008, 4096) and got.dtype == "bf16"
    assert got.flops == 60_058_238_976  # 2 * 666 * 11008 * 4096 (Table XII, naive)
    assert got.bytes == (2_727_936 + 45_088_768 + 7_331_328) * 2


def test_addmm_counts_the_added_input() -> None:
    got = m("aten::addmm", [[640], [888, 2880], [2880, 640], [], []], [BF16, BF16, BF16, "Scalar", "Scalar"])
    assert got.gemm == (1, 888, 640, 2880)
    assert got.flops == 3_273_523_200 + 568_320  # 2*888*640*2880 + 888*640
    assert got.bytes == (640 + 888 * 2880 + 2880 * 640 + 888 * 640) * 2


def test_bmm_and_baddbmm() -> None:
    got = m("aten::bmm", [[4, 128, 64], [4, 64, 256]], [BF16, BF16])
    assert got.gemm == (4, 128, 256, 64) and got.flops == 16_777_216  # 2*4*128*256*64
    got = m("aten::baddbmm", [[4, 128, 256], [4, 128, 64], [4, 64, 256], [], []], [F32] * 3 + ["Scalar"] * 2)
    assert got.flops == 16_777_216 + 131_072 and got.dtype == "fp32"  # + 4*128*256
    assert m("aten::bmm", [[4, 128, 64], [2, 64, 256]], [BF16, BF16]) is None  # batches differ


def test_matmul_folds_leading_dims_or_broadcasts_batches() -> None:
    assert m("aten::matmul", [[2, 3, 5], [5, 7]], [F32, F32]).gemm == (1, 6, 7, 5)
    assert m("aten::matmul", [[2, 1, 3, 5], [4, 5, 7]], [F32, F32]).gemm == (8, 3, 7, 5)
    assert m("aten::matmul", [[3, 5], [5]], [F32, F32]).gemm == (1, 3, 1, 5)
    assert m("aten::matmul", [[3, 5], [6, 7]], [F32, F32]) is None  # K differs


def test_linear_with_and_without_bias() -> None:
    got = m("aten::linear", [[2, 10, 32], [64, 32], [64]], [BF16] * 3)
    assert got.gemm == (1, 20, 64, 32) and got.flops == 81_920 + 1_280  # 2*20*64*32 + 20*64
    got = m("aten::linear", [[1, 2880], [25136, 2880], []], [BF16, BF16, ""])
    assert got.gemm == (1, 1, 25136, 2880) and got.flops == 144_783_360


def test_scaled_mm_is_fp8_with_a_16_bit_output() -> None:
    got = m(
        "aten::_scaled_mm", [[128, 256], [256, 512], [], [], [], [], [], []], [FP8, FP8, F32, F32] + [""] * 4
    )
    assert got.dtype == "fp8" and got.flops == 33_554_432  # 2*128*512*256
    assert got.bytes == 128 * 256 + 256 * 512 + 128 * 512 * 2


def test_grouped_gemm() -> None:
    got = m("aten::_grouped_mm", [[1000, 64], [8, 64, 128], [8]], [BF16, BF16, "int"])
    assert got.flops == 16_384_000  # 2*1000*128*64: each token against its group's weight
    got = m("aten::_grouped_mm", [[8, 16, 64], [8, 64, 128], []], [BF16, BF16, ""])
    assert got.gemm == (8, 16, 128, 64) and got.flops == 2_097_152


# --- attention -------------------------------------------------------------------------------

SDPA_FLASH = "aten::_scaled_dot_product_flash_attention"


def _sdpa(q: list, k: list, causal: str):
    return m(
        SDPA_FLASH,
        [q, k, k, [], [], [], []],
        [BF16] * 3 + ["Scalar"] * 4,
        ["", "", "", "0.", causal, "False", ""],
    )


def test_sdpa_forward_dense_and_causal() -> None:
    dense = _sdpa([2, 8, 1024, 64], [2, 8, 1024, 64], "False")
    assert dense.family == "attention"
    assert dense.flops == 4_294_967_296  # 2 * 2*8 * 1024*1024 * (64 + 64)
    assert _sdpa([2, 8, 1024, 64], [2, 8, 1024, 64], "True").flops == 2_147_483_648  # half
    assert dense.bytes == 4 * 2 * 8 * 1024 * 64 * 2  # q, k, v read, out written


def test_sdpa_grouped_query_heads() -> None:
    got = _sdpa([1, 32, 16, 128], [1, 8, 16, 128], "False")
    assert got.flops == 4_194_304  # 2 * 32 * 16*16 * 256: every query head attends


def test_causal_with_fewer_queries_than_keys_follows_each_masks_alignment() -> None:
    # SDPA (top left): query i sees keys 0..i: 64*64/2 pairs; flash-attn (bottom right): 64*256 - 64*64/2
    sdpa = _sdpa([1, 1, 64, 64], [1, 1, 256, 64], "True")
    assert sdpa.flops == 2 * 2048 * 128
    fa = m(
        "flash_attn::_flash_attn_forward",
        [[1, 64, 1, 64], [1, 256, 1, 64], [1, 256, 1, 64]] + [[]] * 4,
        [BF16] * 3 + ["Scalar"] * 4,
        ["", "", "", "0.0", "0.125", "True", "-1"],
    )
    assert fa.flops == 2 * (64 * 256 - 2048) * 128


def test_attention_backward_is_five_products() -> None:
    dims = [[2, 8, 1024, 64]] * 5 + [[2, 8, 1024]] + [[]] * 9
    types = [BF16] * 5 + [F32] + ["Scalar"] * 9
    concrete = [""] * 6 + ["", "", "1024", "1024", "0.", "True", "", "", ""]
    got = m("aten::_scaled_dot_product_flash_attention_backward", dims, types, concrete)
    assert got.flops == 2.5 * 2_147_483_648  # 2.5x the causal forward (d_qk = d_v)


def test_flash_attn_varlen_splits_the_packed_tokens() -> None:
    # 300 tokens, 3 sequences (cu_seqlens has 4 entries), the longest 200: one of 200, two of 50
    dims = [[300, 4, 64], [300, 4, 64], [300, 4, 64], [4], [4], [], [], [], [], []]
    types = [BF16] * 3 + ["int", "int"] + ["Scalar"] * 5
    concrete = [""] * 5 + ["200", "200", "0.0", "0.125", "False"]
    got = m("flash_attn::_flash_attn_varlen_forward", dims, types, concrete)
    assert got.flops == 2 * 4 * (200 * 200 + 2 * 50 * 50) * 128


def test_attention_without_its_causal_flag_has_no_model() -> None:
    assert _sdpa([2, 8, 1024, 64], [2, 8, 1024, 64], "") is None


# --- convolution, norms, bytes-only ----------------------------------------------------------


def test_convolution_forward() -> None:
    dims = [[10, 3, 224, 224], [64, 3, 7, 7], [], [], [], [], [], [], []]
    types = [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    concrete = ["", "", "", "[2, 2]", "[3, 3]", "[1, 1]", "False", "[0, 0]", "1"]
    got = m("aten::convolution", dims, types, concrete)
    assert got.flops == 2 * 10 * 112 * 112 * 64 * 3 * 49  # output 112x112
    assert got.bytes == (10 * 3 * 224 * 224 + 64 * 3 * 49 + 10 * 64 * 112 * 112) * 2
    miopen = ["", "", "", "[3, 3]", "[2, 2]", "[1, 1]", "1", "False", "False"]  # padding before stride
    assert m("aten::miopen_convolution", dims, types, miopen).flops == got.flops


def test_convolution_backward_counts_each_gradient_asked_for() -> None:
    dims = [[10, 512, 7, 7], [10, 512, 7, 7], [512, 512, 3, 3]] + [[]] * 8
    types = [BF16] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar", "ScalarList"]
    concrete = [
        "",
        "",
        "",
        "[0]",
        "[1, 1]",
        "[1, 1]",
        "[1, 1]",
        "False",
        "[0, 0]",
        "1",
        "[True, True, False]",
    ]
    got = m("aten::convolution_backward", dims, types, concrete)
    assert got.flops == 2 * (2 * 10 * 49 * 512 * 512 * 9)
    concrete[-1] = "[False, True, False]"
    assert m("aten::convolution_backward", dims, types, concrete).flops == 2 * 10 * 49 * 512 * 512 * 9


def test_layer_norm_and_rms_norm() -> None:
    got = m(
        "aten::native_layer_norm",
        [[4, 1024], [], [1024], [1024], []],
        [BF16, "ScalarList", BF16, BF16, "Scalar"],
    )
    assert got.family == "norm" and got.flops == 8 * 4096
    assert got.bytes == 2 * 4096 * 2 + 2 * 1024 * 2
    got = m("aten::_fused_rms_norm", [[4, 1024], [], [1024], []], [BF16, "ScalarList", BF16, "Scalar"])
    assert got.flops == 4 * 4096 and got.bytes == 2 * 4096 * 2 + 1024 * 2


def test_elementwise_and_reductions_count_bytes_only() -> None:
    add = m("aten::add", [[4, 1024], [1024], []], [BF16, BF16, "Scalar"])
    assert add.flops == 0 and add.bytes == (4096 + 1024 + 4096) * 2
    assert m("aten::add_", [[4, 1024], [4, 1024], []], [F32, F32, "Scalar"]).bytes == 3 * 4096 * 4
    assert m("aten::copy_", [[8, 8], [8, 8], []], [BF16, F32, "Scalar"]).bytes == 64 * 2 + 64 * 4
    assert m("aten::fill_", [[8, 8], []], [BF16, "Scalar"]).bytes == 128
    s = m("aten::sum", [[4, 1024], [], [], []], [F32, "ScalarList", "Scalar", ""], ["", "[-1]", "False", ""])
    assert s.family == "reduction" and s.bytes == 4096 * 4 + 4 * 4
    sm = m("aten::_softmax", [[4, 1024], [], []], [BF16, "Scalar", "Scalar"], ["", "-1", "False"])
    assert sm.bytes == 2 * 4096 * 2


# --- strangers' texts ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dims",
    [
        "not json",
        "[[1, 2]",
        '{"a": 1}',
        "[[-1, 2], [2, 3]]",
        "[[1e30, 2], [2, 3]]",
        '[["a", 2], [2, 3]]',
        "[[[1, 2]], [2, 3]]",
        "[]",
        "null",
        "[[true, 2], [2, 3]]",
        "[[" + "[" * 3000 + "]" * 3002,
    ],
)
def test_malformed_shapes_give_no_model(dims: str) -> None:
    assert model("aten::mm", dims, json.dumps([BF16, BF16]), None) is None


def test_unknown_ops_and_missing_fields_give_no_model() -> None:
    assert model("aten::my_op", "[[2, 2]]", '["float"]', None) is None
    assert model("aten::mm", None, None, None) is None
    assert model("aten::mm", "[[2, 3], [3, 4]]", None, None) is None  # no dtypes: not tensors
    assert model("aten::mm", "[[2, 3], [3, 4]]", '["float", "float"]', "not json") is None


@given(
    st.sampled_from(sorted(READERS)),
    st.lists(
        st.one_of(st.lists(st.integers(-3, 2**50), max_size=5), st.just([]), st.integers()), max_size=12
    ),
    st.lists(st.sampled_from([BF16, F32, FP8, "Scalar", "ScalarList", "", "TensorList", "int"]), max_size=12),
    st.lists(
        st.sampled_from(["", "True", "False", "[1, 1]", "[True, False]", "3", "-1", "[]", "x"]), max_size=18
    ),
)
def test_any_recorded_arguments_never_raise(name: str, dims: list, types: list, concrete: list) -> None:
    got = model(name, json.dumps(dims), json.dumps(types), json.dumps(concrete))
    assert got is None or (got.flops >= 0 and got.bytes >= 0)
