"""Issue 38.3 and 38.5, planted through ``tracekit.testing`` and on the real traces that showed
them: a trace that recorded no shapes has an empty MFU (not 0.0 %) and one notice saying to
record shapes; a backward node inherits FLOPs only from the op it is the backward of."""

from __future__ import annotations

import math

import pytest
from shared_traces import shared_trace

import tracekit
from tracekit.ranks.meta import SHAPES_NOTICE
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN

BF16 = "c10::BFloat16"
BF16_PEAK = 989.4e12  # the builder's H100 SXM5, dense bf16
M, N, K = 512, 1024, 256
GEMM = 2 * M * N * K + M * N  # addmm: the product and the bias add
COPY = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 3, 128, 1>"


def _no_shapes(tmp_path):
    b = TraceBuilder()
    for _ in range(2):
        with b.step():
            with b.op("aten::mm") as mm:  # recorded without record_shapes: no Input Dims
                b.kernel(GEMM_A, 100)
            with b.backward(), b.backward_node(mm):
                b.kernel(GEMM_NN, 200, op="aten::mm")
            with b.optimizer():
                b.kernel(GEMM_NN, 10)
    return tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False, jobs=1)


def test_no_shapes_leaves_mfu_empty_with_one_notice(tmp_path) -> None:
    a = _no_shapes(tmp_path)
    phases = a.table("phases")
    assert phases["mfu_pct"].isna().all() and phases["ideal_ms"].isna().all()
    assert (phases["gflop"] == 0).all()
    per_step = a.tables(per_step=True)["phases"]
    assert per_step["mfu_pct"].isna().all()
    mfu = next(iter(a.ranks.values())).meta["mfu"]
    assert mfu["mean_pct"] is None and all(s["mfu_pct"] is None for s in mfu["per_step"])
    assert a.meta["notices"].count(SHAPES_NOTICE) == 1
    assert "record_shapes=True" in SHAPES_NOTICE


def test_a_trace_with_shapes_has_no_shapes_notice(tmp_path) -> None:
    a = _backward_trace(tmp_path, "AddmmBackward0")
    assert SHAPES_NOTICE not in a.meta["notices"]
    assert a.table("phases")["mfu_pct"].notna().all()


def test_nccl_parser_config_mfu_is_empty_not_zero() -> None:
    a = tracekit.load(shared_trace("hta/nccl_parser_config__nccl_data.json.gz"), cache=False, jobs=1)
    assert a.table("phases")["mfu_pct"].isna().all()
    assert all(m["mean_pct"] is None for m in a.meta["mfu"].values())
    assert a.meta["notices"].count(SHAPES_NOTICE) == 1


def _backward_trace(tmp_path, node: str):
    """A forward ``aten::addmm`` (one GEMM kernel, 100 us) and a backward node ``node``
    created by it, with no op inside, running one kernel of 50 us."""
    b = TraceBuilder()
    with b.step():
        with b.op(
            "aten::addmm", input_dims=[[N], [M, K], [K, N], [], []], input_types=[BF16] * 3 + ["Scalar"] * 2
        ) as addmm:
            b.kernel(GEMM_A, 100)
        with b.backward():
            with b.backward_node(addmm, node=node):
                b.kernel(COPY if node == "SplitBackward0" else GEMM_NN, 50)
    return tracekit.load(b.write(tmp_path / f"{node}.pt.trace.json"), cache=False, jobs=1)


def test_the_backward_of_the_op_inherits_its_flops(tmp_path) -> None:
    iv = _backward_trace(tmp_path, "AddmmBackward0").intervals
    bwd = iv[iv["node"] == "AddmmBackward0"]
    assert bwd["flops"].sum() == 2 * GEMM and (bwd["perf_family"] == "gemm").all()
    assert iv[iv["node"] == ""]["flops"].sum() == GEMM


def test_another_node_linked_to_the_op_inherits_nothing(tmp_path) -> None:
    a = _backward_trace(tmp_path, "SplitBackward0")
    iv = a.intervals
    split = iv[iv["node"] == "SplitBackward0"]
    assert len(split) == 1 and split["fwd_op"].iloc[0] == "aten::addmm"  # linked, yet
    assert split["flops"].sum() == 0 and split["perf_op"].iloc[0] == ""
    phases = a.table("phases").set_index("phase")
    assert phases.loc["forward", "gflop"] == pytest.approx(GEMM / 1e9)
    assert phases.loc["backward", "gflop"] == 0
    assert phases.loc["forward", "mfu_pct"] == pytest.approx(
        GEMM / BF16_PEAK / (phases.loc["forward", "wall_ms"] / 1e3) * 100
    )


def test_trace_filter_split_backward_is_a_copy_not_a_gemm() -> None:
    a = tracekit.load(shared_trace("hta/trace_filter__sampled_rank-0.json.gz"), cache=False, jobs=1)
    iv = a.intervals
    split = iv[iv["node"].astype(str).str.endswith("SplitBackward0")]
    assert len(split) and split["flops"].sum() == 0
    for m in a.meta["mfu"].values():
        assert m["mean_pct"] is None or (0 <= m["mean_pct"] <= 100 and not math.isnan(m["mean_pct"]))


def test_mfu_over_part_of_the_compute_says_so(tmp_path) -> None:
    """Issue 38.4: 100 us of the addmm's GEMM is modelled and the 50 us copy under
    SplitBackward0 is not: MFU counts 66.7% of compute-kernel time, and one notice says it is a
    lower bound. All compute modelled: no such notice."""
    a = _backward_trace(tmp_path, "SplitBackward0")
    said = [n for n in a.meta["notices"] if n.startswith("MFU counts")]
    assert len(said) == 1 and "66.7% of compute-kernel time" in said[0] and "lower bound" in said[0]
    b = _backward_trace(tmp_path, "AddmmBackward0")
    assert not [n for n in b.meta["notices"] if n.startswith("MFU counts")]
