"""Planted truth for the trace shapes of issue 28 ("Truth, round 3").

Each test plants one shape of trace with ``tracekit.testing`` and checks the numbers tracekit
gives against the planted times (exact to the nanosecond where the rule is exact).
"""

from __future__ import annotations

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL, MATMUL_CUSTOM

NS = 1e-6  # one nanosecond, in ms


def _ms(us: float) -> float:
    return us / 1000


def test_hand_written_gemm_kernel_counts_as_gemm(tmp_path):
    """Issue 28.6: a custom extension's ``matmul_k`` (no library name) is GEMM time."""
    b = TraceBuilder()
    with b.step():
        with b.op("my_ext::forward"):
            b.kernel(MATMUL_CUSTOM, 30, at_us=10)
        b.kernel(K_MUL, 5, op="aten::mul")
        b.kernel("void my_tile_kernel<float>(float const*, float*, int)", 7, op="aten::mm")
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False)
    gemm = a.table("gemm").set_index("phase")
    assert gemm.loc["forward", "gemm_ms"] == pytest.approx(_ms(30 + 7), abs=NS)
    assert gemm.loc["forward", "compute_ms"] == pytest.approx(_ms(30 + 5 + 7), abs=NS)
    kernels = a.table("kernels").set_index("category")
    assert kernels.loc["GEMM", "kernel_ms"] == pytest.approx(_ms(37), abs=NS)


@pytest.mark.parametrize("autograd_thread", [True, False])
def test_legacy_backward_is_backward_by_its_node_names(tmp_path, autograd_thread):
    """Issue 28.2: before torch 1.9, backward nodes are ``AddmmBackward`` ops with no sequence
    number, no forward-thread id and no evaluate_function: their work is backward, and the
    evidence says it was the node's name."""
    b = TraceBuilder(legacy=True, autograd_thread=autograd_thread, old_categories=True, ts_format="int")
    with b.step():
        mm = b.kernel(GEMM_A, 40, op="aten::addmm", at_us=10)
        b.kernel(K_MUL, 10, op="aten::mul", at_us=60)
        with b.backward():
            b.kernel(GEMM_NN, 30, op="aten::mm", creator=mm, at_us=100)
            with b.gradient_hook():
                b.kernel(K_MUL, 5, op="aten::add_", at_us=140)
        with b.optimizer("Optimizer.step#SGD.step"):
            b.kernel(K_ADAM, 20, op="aten::add_", at_us=160)
    path = b.write(tmp_path / "legacy.json")
    a = tracekit.load(path, cache=False)
    ph = a.table("phases").set_index("phase")
    assert ph.loc["forward", "wall_ms"] == pytest.approx(_ms(90), abs=NS)  # 10 -> 100
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(60), abs=NS)  # 100 -> 160
    assert ph.loc["backward", "compute_ms"] == pytest.approx(_ms(35), abs=NS)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(_ms(20), abs=NS)
    # On an engine thread the thread decides (it is known by the nodes it runs); on the main
    # thread, the node's name.
    evidence = "autograd_thread" if autograd_thread else "backward_name"
    iv = a.intervals
    assert set(iv.loc[iv["phase"] == "backward", "phase_evidence"].astype(str)) == {evidence}
    from tracekit import explain

    chain = explain.run(path, "ampere_bf16_s16816gemm_bf16_128x64")["chains"][0]
    assert chain["phase"]["evidence"] == evidence
    assert ("name alone" if evidence == "backward_name" else "thread") in chain["phase"]["why"]


def test_cpu_step_edges_are_the_profiler_step_range(tmp_path):
    """Issue 28.9: on a CPU-only trace the step window is its ProfilerStep range, so forward
    starts at the step's start (Python before the first op included) and the optimizer ends at
    the step's end (zero_grad's Python after the last op included); the walls add up to it."""
    import json

    b = TraceBuilder()
    with b.step():
        b.cpu(40)  # Python before the first op
        with b.op("aten::mm"):
            b.cpu(100)
        with b.backward():
            with b.op("MmBackward0"):
                b.cpu(80)
        with b.optimizer("Optimizer.step#AdamW.step"):
            with b.op("aten::_foreach_addcdiv_"):
                b.cpu(30)
        b.cpu(25)  # zero_grad(set_to_none): Python only
    path = b.write(tmp_path / "cpu.json")
    events = json.loads(path.read_text())["traceEvents"]
    (ps,) = [e for e in events if e["name"] == "ProfilerStep#1"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    a = tracekit.load(path, cache=False)
    idle = a.table("idle").iloc[0]
    assert idle["window_ms"] == pytest.approx(ps["dur"] / 1000, abs=NS)
    ph = a.table("phases").set_index("phase")
    assert ph["wall_ms"].sum() == pytest.approx(ps["dur"] / 1000, abs=NS)
    # forward starts at the ProfilerStep's start, 40 us (and the range's own lead) before aten::mm
    assert ph.loc["forward", "wall_ms"] > (ops[0]["ts"] - ps["ts"] + ops[0]["dur"]) / 1000 - NS
    assert ph["percent"].sum() == pytest.approx(100.0)
