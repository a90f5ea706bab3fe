"""The assign-categories step (tracekit.pipeline.labels): one label of each kind per activity, each
with the rule that gave it."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit
from tracekit.pipeline import link
from tracekit.pipeline.labels import assign_categories
from tracekit.pipeline.taxonomy import kernel_rules, module_taxonomy
from tracekit.read.reader import read_trace
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_MUL


def _plant(tmp_path):
    b = TraceBuilder()
    with b.step():
        with b.module("LlamaDecoderLayer", "model.layers.0"), b.module("LlamaMLP", "model.layers.0.mlp"):
            b.kernel(GEMM_A, 10, op="aten::mm")
            b.kernel(K_MUL, 2, op="aten::mul")
        b.comm("AllReduce", 8)
        b.memcpy(3)
    return b.write(tmp_path / "rank0.pt.trace.json")


def test_every_activity_gets_one_label_of_each_kind_with_its_rule(tmp_path):
    linked = link(read_trace(_plant(tmp_path)), module_taxonomy())
    lab = assign_categories(linked, module_taxonomy(), kernel_rules())
    assert len(lab) == len(linked.activities)
    assert not lab.isna().any().any()
    rows = {str(n): r for n, r in zip(linked.activities["name"], lab.to_dict("records"))}
    gemm, mul = rows[GEMM_A], rows[K_MUL]
    assert (gemm["kernel_category"], gemm["module"]) == ("GEMM", "MLP")
    assert gemm["rule"].startswith("kernels.toml#GEMM:")
    assert mul["kernel_category"] == "Element-wise" and mul["rule"].startswith("kernels.toml#Element-wise:")
    assert gemm["module_rule"].startswith("modules.toml#MLP:")
    comm = next(r for r in rows.values() if r["group"] == "comm")
    assert (comm["kernel_category"], comm["collective"], comm["module"]) == ("AllReduce", "AllReduce", "")
    assert comm["rule"] == "comm:kernel"
    mem = next(r for r in rows.values() if r["group"] == "memcpy")
    assert (mem["kernel_category"], mem["rule"]) == ("Memcpy", "memcpy")


def test_labels_kept_between_files_are_the_rules_labels_and_bounded(tmp_path, monkeypatch):
    import dataclasses

    from tracekit.pipeline import taxonomy

    linked = link(read_trace(_plant(tmp_path)), module_taxonomy())
    rules = dataclasses.replace(kernel_rules(), memo={})  # a private memo: the cached rules' stays as it is
    first = assign_categories(linked, module_taxonomy(), rules)
    cases = len(rules.memo)
    assert cases >= 4  # GEMM, mul, the all-reduce and the memcpy at least
    again = assign_categories(linked, module_taxonomy(), rules)  # every label from the memo now
    assert again.equals(first) and len(rules.memo) == cases
    fresh = assign_categories(linked, module_taxonomy(), dataclasses.replace(rules, memo={}))
    assert fresh.equals(first)
    monkeypatch.setattr(taxonomy, "MEMO_CASES", cases)
    rules.memo.update({("other trace", i): ("Other", "", "") for i in range(cases)})  # over the bound
    assert assign_categories(linked, module_taxonomy(), rules).equals(first)
    assert len(rules.memo) == cases and ("other trace", 0) not in rules.memo  # emptied first
    assert assign_categories(linked, module_taxonomy(), rules).equals(first)
    assert len(rules.memo) == cases  # at the bound, not over it: kept


def test_rule_ids_name_the_rule_in_its_file(tmp_path):
    rules = kernel_rules()
    cat, rid = rules.classify("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", "aten::mm")
    n = int(rid.rsplit(":", 1)[1])
    assert cat == "GEMM" and rules.rules[n - 1].rule_id == rid
    user = tmp_path / "mine.toml"
    user.write_text('[[rule]]\ncategory = "Attention"\nkernel = "my_kernel"\n')
    assert kernel_rules(str(user)).classify("my_kernel_v2", "") == ("Attention", "user:mine.toml#Attention:1")
    assert kernel_rules().classify("weird", "")[0] == "Other"


def test_intervals_carry_the_rules(tmp_path):
    a = tracekit.load(_plant(tmp_path), cache=False)
    iv = a.ranks[0].intervals
    assert {"rule", "module_rule"} <= set(iv.columns)
    assert (iv["rule"].astype(str) != "").all()
    compute = iv["group"].astype(str).to_numpy() == "compute"
    assert np.all(iv["module_rule"].astype(str).to_numpy()[compute] != "")


DEEPEP = "void dpsk::ep::internode::dispatch<false, 8, 3>(int4*, float*, long*, float*)"
CACHED = "void dpsk::ep::internode::cached_notify<8>(int, int, int, int*)"
FLASH = "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 64, 4>>(Flash_fwd_params)"
CONV = "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16"
ODD = "my_unknown_kernel"


def test_planted_precedence_and_coverage(tmp_path):
    """DeepEP kernels are communication (dispatch AllToAll, cached_notify Other); a flash kernel
    launched by RopeLoraFlashAttnVarlenFunc is Attention, not RoPE; an implicit-GEMM conv is
    Convolution, not GEMM; the unknown kernel is the Other share of compute time."""
    b = TraceBuilder()
    with b.step():
        b.kernel(CONV, 30, op="aten::cudnn_convolution", at_us=10)
        b.kernel(FLASH, 50, op="RopeLoraFlashAttnVarlenFunc", at_us=50)
        b.kernel(ODD, 20, op="aten::foo", at_us=110)
        b.kernel(DEEPEP, 10, op="deep_ep::dispatch", at_us=140)
        b.kernel(CACHED, 5, op="deep_ep::notify", at_us=160)
    a = tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False)
    k = a.table("kernels")
    rows = {(r["group"], r["category"]): r for r in k.to_dict("records")}
    assert rows[("compute", "Convolution")]["kernel_ms"] == pytest.approx(0.030)
    assert rows[("compute", "Attention")]["kernel_ms"] == pytest.approx(0.050)
    assert rows[("compute", "RoPE")]["kernel_ms"] == 0
    assert rows[("compute", "GEMM")]["kernel_ms"] == 0
    assert rows[("compute", "Other")]["kernel_ms"] == pytest.approx(0.020)
    assert rows[("comm", "AllToAll")]["kernel_ms"] == pytest.approx(0.010)
    assert rows[("comm", "Other")]["kernel_ms"] == pytest.approx(0.005)
    assert a.meta["kernel_other_share"] == {0: pytest.approx(20 / 100)}


def _module_ms(a, phase="forward") -> dict:
    m = a.table("modules")
    return {r["module"]: r["time_ms"] for r in m.to_dict("records") if r["phase"] == phase}


def test_attention_glue_is_not_rope(tmp_path):
    """GPT-2-style attention (no rotary embedding): the q/k/v split copy and the KV-cache cat
    before the first matmul, and the output's contiguous copy, are Attention other; RoPE is 0.
    A rotary kernel inside a Llama attention is RoPE."""
    from tracekit.testing.kernels import BMM, K_CAT, K_COPY, K_SOFTMAX

    rotary = "void vllm::rotary_embedding_kernel<c10::BFloat16, true>(long const*, c10::BFloat16*)"
    b = TraceBuilder()
    with b.step():
        with b.module("GPT2Attention", "transformer.h.0.attn"):
            b.kernel(K_COPY, 4, op="aten::contiguous")
            b.kernel(K_CAT, 6, op="aten::cat")
            b.kernel(BMM, 10, op="aten::matmul")
            b.kernel(K_SOFTMAX, 5, op="aten::softmax")
            b.kernel(BMM, 9, op="aten::matmul")
            b.kernel(K_COPY, 3, op="aten::contiguous")
        with b.module("LlamaAttention", "model.layers.0.self_attn"):
            b.kernel(rotary, 7, op="_C::rotary_embedding")
            b.kernel(K_CAT, 2, op="aten::cat")
    got = _module_ms(tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False))
    assert got["RoPE"] == pytest.approx(0.007)
    assert got["Attention other"] == pytest.approx(0.004 + 0.006 + 0.003 + 0.002)
    assert (got["Bmm0"], got["Softmax"], got["Bmm1"]) == pytest.approx((0.010, 0.005, 0.009))


@pytest.mark.parametrize("modules", ["nn_module", "capture"])
def test_attention_child_modules_without_a_rule_are_split_by_place(tmp_path, modules):
    """GPT-J/CodeGen/BLOOM/NeoX attention runs its softmax and attention dropout in child
    modules (nn.Softmax, nn.Dropout) that have no category of their own: between the two
    matmuls they are Softmax (scale, mask, softmax, dropout), after the second the block's
    glue (the residual dropout), like the block's own ops in those places."""
    from tracekit.testing.kernels import BMM, K_COPY, K_SOFTMAX

    b = TraceBuilder(modules=modules)
    with b.step():
        with b.module("CodeGenAttention", "transformer.h.0.attn"):
            b.kernel(BMM, 10, op="aten::matmul")
            with b.module("Softmax", "transformer.h.0.attn.softmax"):
                b.kernel(K_SOFTMAX, 5, op="aten::softmax")
            with b.module("Dropout", "transformer.h.0.attn.attn_dropout"):
                b.kernel(K_COPY, 2, op="aten::dropout")
            b.kernel(BMM, 9, op="aten::matmul")
            with b.module("Dropout", "transformer.h.0.attn.resid_dropout"):
                b.kernel(K_COPY, 3, op="aten::dropout")
    got = _module_ms(tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False))
    assert (got["Bmm0"], got["Softmax"], got["Bmm1"]) == pytest.approx((0.010, 0.007, 0.009))
    assert got["Attention other"] == pytest.approx(0.003)


def test_compiled_region_is_compute_of_its_module_or_its_own_row(tmp_path):
    """torch.compile: kernels launched (cuLaunchKernel) inside a compiled region with no module
    around them are the 'Compiled region' row, forward and backward (CompiledFunctionBackward);
    a compiled region inside LlamaMLP stays MLP. Nothing of it is Other or idle."""
    tri = "triton_poi_fused_add_mul_0"
    b = TraceBuilder()
    with b.step():
        with b.op("Torch-Compiled Region: 0/0"), b.op("CompiledFunction") as fn:
            b.kernel(tri, 10, op="triton_poi_fused_add_mul_0", api="cuLaunchKernel")
            b.kernel(GEMM_A, 20, op="aten::mm")
        with b.module("LlamaMLP", "model.layers.0.mlp"), b.op("Torch-Compiled Region: 1/0"):
            b.kernel(tri, 5, op="triton_poi_fused_add_mul_0", api="cuLaunchKernel")
        with b.backward():
            b.kernel(GEMM_A, 30, op="aten::mm", creator=fn)
    a = tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False)
    fwd, bwd = _module_ms(a), _module_ms(a, "backward")
    assert fwd["Compiled region"] == pytest.approx(0.030)
    assert fwd["MLP"] == pytest.approx(0.005)
    assert fwd["Other"] == 0
    assert bwd["Compiled region"] == pytest.approx(0.030)


def test_every_packaged_rule_string_compiles():
    """Built-in patterns are compiled when first used (``taxonomy._OnFirstUse``): every string
    of the packaged rule files compiles, with and without IGNORECASE, so no built-in rule can
    fail later than when the rules are loaded."""
    import re

    from tracekit.pipeline import taxonomy

    strings = taxonomy._builtin_patterns()
    assert len(strings) > 50
    for p in strings:
        for flags in (0, re.IGNORECASE):
            re.compile(p, flags)


def test_a_communication_kernel_has_one_label_its_collective(tmp_path):
    """issue 26: ncclKernel_SendRecv was AllToAll (launched by an all_to_all), SendRecv in the
    comm table and Other in the kernels table. A communication kernel's category is now its
    collective: the kernels and comm tables give every activity the same one."""
    from tracekit.testing import TraceBuilder

    sendrecv = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
    b = TraceBuilder()
    with b.step():
        b.comm("AllToAll", 10, kernel=sendrecv)  # NCCL runs all-to-all as send/recv
        b.comm("SendRecv", 20, kernel=sendrecv)
        b.comm("Broadcast", 30)
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False, jobs=1)
    comm = a.intervals[a.intervals["group"] == "comm"]
    assert (comm["kernel_category"].astype(str) == comm["collective"].astype(str)).all()
    assert sorted(comm["collective"].astype(str)) == ["AllToAll", "Broadcast", "SendRecv"]
    kernels = a.table("kernels").set_index("category")["kernel_ms"]
    times = a.table("comm").set_index("collective")["time_ms"]
    for coll in ("AllToAll", "SendRecv", "Broadcast"):
        assert kernels[coll] == pytest.approx(times[coll])
