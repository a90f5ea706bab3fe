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
