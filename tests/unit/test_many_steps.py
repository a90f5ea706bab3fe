"""Regression: per-step work is vectorised over steps, so a trace of many tiny steps stays fast.

A 12 MB trace with 60k ProfilerSteps took over 120 s when shares (and idle) were computed step
by step. Timings on a shared machine are noisy, so besides a generous bound the test checks
that ten times the steps costs about ten times the time (quadratic work would cost 100x).
"""

from __future__ import annotations

import time

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_ADAM, K_MUL

N_STEPS = 20_000


def _write(path, n: int):
    b = TraceBuilder()
    for _ in range(n):
        with b.step():
            b.kernel(GEMM_A, 2, op="aten::mm")
            b.kernel(K_MUL, 1, op="aten::mul")
            b.comm("AllReduce", 1)
            b.memcpy(1)
            with b.optimizer():
                b.kernel(K_ADAM, 1, op="aten::_fused_adam_")
    return b.write(path)


def _analyse(path):
    t0 = time.perf_counter()
    a = tracekit.load(path, cache=False, jobs=1)
    tables = a.tables(per_step=True)
    return a, tables, time.perf_counter() - t0


def test_twenty_thousand_tiny_steps_analyse_in_seconds(tmp_path):
    small = _write(tmp_path / "small.json", N_STEPS // 10)
    big = _write(tmp_path / "many.json", N_STEPS)
    _, _, t_small = _analyse(small)
    a, tables, t_big = _analyse(big)
    assert len(a.meta["complete_steps"][0]) == N_STEPS
    phases = tables["phases"]
    assert len(phases) == 3 * N_STEPS
    fwd = phases[phases["phase"] == "forward"]
    assert abs(fwd["compute_ms"].mean() - 0.003) < 1e-9  # GEMM 2 us + mul 1 us, every step
    assert len(tables["comm"]) == N_STEPS and len(tables["memcpy"]) == N_STEPS
    assert t_big < 60, f"{N_STEPS} steps took {t_big:.1f} s"
    assert t_big < 30 * max(t_small, 0.1), f"10x the steps took {t_big / t_small:.0f}x the time"
