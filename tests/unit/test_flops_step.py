"""assign_flops: which op owns a kernel, how an op's FLOPs are split, the backward-node fallback,
and the time at peak; on hand-built events with the reader's shape columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from frames import ANNOTATION, CPU_OP, KERNEL, RUNTIME, ev, trace

from tracekit.perf.devices import Peaks
from tracekit.pipeline import analyse
from tracekit.pipeline.flops import climb
from tracekit.pipeline.taxonomy import kernel_rules, module_taxonomy
from tracekit.read.reader import RawTrace

BF16 = "c10::BFloat16"


def shaped(name: str, ts: int, dur: int, dims: list, types: list, concrete: list | None = None, **kw) -> dict:
    row = ev(CPU_OP, name, ts, dur, **kw)
    row["input_dims"] = json.dumps(dims)
    row["input_types"] = json.dumps(types)
    row["concrete_inputs"] = json.dumps(concrete if concrete is not None else [""] * len(dims))
    return row


def launch(ts: int, corr: int, tid: int = 1) -> dict:
    return ev(RUNTIME, "cudaLaunchKernel", ts, 2, corr=corr, tid=tid)


def kernel(name: str, ts: int, dur: int, corr: int) -> dict:
    return ev(KERNEL, name, ts, dur, pid=0, tid=7, corr=corr, stream=7)


def _analysed(*rows: dict, peaks: Peaks | None = None) -> pd.DataFrame:
    t = analyse(RawTrace("unit.json", trace(*rows).events), module_taxonomy(), kernel_rules(), peaks)
    return t.acts.set_index(t.acts["name"].astype(str))


def _rows() -> list[dict]:
    attn = [[1, 128, 2, 64]] * 3 + [[]] * 4
    attn_types = [BF16] * 3 + ["Scalar"] * 4
    return [
        ev(ANNOTATION, "ProfilerStep#1", 0, 2000),
        ev(CPU_OP, "aten::linear", 10, 100),
        shaped("aten::addmm", 20, 60, [[64], [32, 128], [128, 64], [], []], [BF16] * 3 + ["Scalar"] * 2),
        launch(30, 1),
        launch(40, 2),
        launch(90, 3),  # the bias add of a linear whose GEMM is its addmm's: nobody's
        shaped("aten::mul", 200, 20, [[1024], [1024]], ["float", "float"]),
        launch(205, 4),
        shaped("FlashAttnFunc", 300, 50, attn, attn_types, ["", "", "", "0.0", "0.125", "True", ""], seq=5),
        launch(310, 6),
        ev(CPU_OP, "FlashAttnFuncBackward", 600, 50, tid=2, seq=5, fwd_tid=1),  # no op inside: no shapes
        launch(610, 5, tid=2),
        kernel("gemm_kernel", 1000, 40, 1),
        kernel("splitk_reduce", 1050, 10, 2),
        kernel("bias_add", 1070, 5, 3),
        kernel("mul_kernel", 1100, 10, 4),
        kernel("flash_fwd_kernel", 1200, 30, 6),
        kernel("flash_bwd_kernel", 1300, 60, 5),
    ]


def test_flops_go_to_the_innermost_modelled_op_split_by_duration() -> None:
    a = _analysed(*_rows())
    addmm = 2 * 32 * 64 * 128 + 32 * 64
    assert a.loc["gemm_kernel", "flops"] == pytest.approx(addmm * 40 / 50)
    assert a.loc["splitk_reduce", "flops"] == pytest.approx(addmm * 10 / 50)
    assert (
        str(a.loc["gemm_kernel", "perf_op"]) == "aten::addmm" and str(a.loc["gemm_kernel", "dtype"]) == "bf16"
    )
    assert a.loc["gemm_kernel", ["gemm_b", "gemm_m", "gemm_n", "gemm_k"]].tolist() == [1, 32, 64, 128]
    assert str(a.loc["bias_add", "perf_family"]) == "" and a.loc["bias_add", "flops"] == 0  # unmodelled
    assert a.loc["mul_kernel", "flops"] == 0 and a.loc["mul_kernel", "op_bytes"] == 3 * 1024 * 4
    assert str(a.loc["mul_kernel", "perf_family"]) == "elementwise"


def test_a_backward_node_with_no_shapes_takes_its_forward_ops_flops() -> None:
    a = _analysed(*_rows())
    fwd = 2 * 2 * (128 * 128 / 2) * 128  # causal: half the 128 x 128 pairs, d_qk + d_v = 128
    assert a.loc["flash_fwd_kernel", "flops"] == fwd
    assert a.loc["flash_bwd_kernel", "flops"] == 2.5 * fwd
    assert str(a.loc["flash_bwd_kernel", "perf_op"]) == "FlashAttnFuncBackward"


def test_time_at_peak_by_dtype_and_unknown_peaks_are_nan() -> None:
    peaks = Peaks(device="x", row="x", tflops={"bf16": 100.0}, tbps=1.0)
    a = _analysed(*_rows(), peaks=peaks)
    assert a.loc["gemm_kernel", "compute_ns"] == pytest.approx(a.loc["gemm_kernel", "flops"] / 100e12 * 1e9)
    assert a.loc["mul_kernel", "memory_ns"] == pytest.approx(3 * 1024 * 4 / 1e12 * 1e9)
    assert a.loc["mul_kernel", "compute_ns"] == 0  # no FLOPs: no time at peak
    none = _analysed(*_rows())
    assert np.isnan(none.loc["gemm_kernel", "compute_ns"]) and np.isnan(none.loc["mul_kernel", "memory_ns"])


def test_a_trace_without_shape_columns_has_no_model() -> None:
    """A parse cache of an older format, or a reader that keeps no shapes: nothing is modelled."""
    events = trace(*_rows()).events.drop(
        columns=["input_dims", "input_types", "input_strides", "concrete_inputs"]
    )
    t = analyse(RawTrace("unit.json", events), module_taxonomy(), kernel_rules())
    assert (t.acts["flops"] == 0).all() and (t.acts["perf_family"].astype(str) == "").all()


def test_climb_matches_walking_up_the_tree_one_row_at_a_time() -> None:
    rng = np.random.default_rng(5)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)])
        mask = rng.random(n) < 0.3
        want = []
        for i in range(n):
            j = i
            while j >= 0 and not mask[j]:
                j = parent[j]
            want.append(j)
        starts = np.append(np.arange(n), -1)
        assert climb(mask, parent, starts).tolist() == want + [-1]


def test_a_trace_with_no_cpu_ops_has_no_model() -> None:
    """Kernels with no launch and no CPU op at all (a GPU-only trace): nothing owns them."""
    a = _analysed(ev(ANNOTATION, "ProfilerStep#1", 0, 2000), kernel("gemm_kernel", 1000, 40, 1))
    assert a["flops"].tolist() == [0.0] and a["perf_unit"].tolist() == [-1]


def test_climb_is_the_walk_up_the_stack_at_any_depth():
    """climb (pointer jumping) gives what walking each stack up a level at a time gives, on
    random forests, and a 100,000-deep chain (a hostile trace's nesting) in well under a second."""
    import time

    import numpy as np

    from tracekit.pipeline.flops import climb

    def walk(mask, parent, start):
        out = []
        for s in start:
            while s >= 0 and not mask[s]:
                s = parent[s]
            out.append(s)
        return np.array(out, np.int64)

    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(1, 80))
        parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)], np.int64)
        mask = rng.random(n) < rng.random()
        start = rng.integers(-1, n, size=int(rng.integers(0, 40)))
        assert np.array_equal(climb(mask, parent, start), walk(mask, parent, start))
    n = 100_000
    parent, mask = np.arange(-1, n - 1, dtype=np.int64), np.zeros(n, bool)
    mask[0] = True
    t = time.perf_counter()
    assert (climb(mask, parent, np.arange(n)) == 0).all()
    assert time.perf_counter() - t < 2.0
