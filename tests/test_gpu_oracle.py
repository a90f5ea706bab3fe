"""tracekit against the independent GPU checker (tests/gpu_oracle.py: plain json, no tracekit).

Per rank and complete step the checker reads busy, idle, window, and per phase wall, compute,
communication and GEMM. On the planted shapes of issue 28 (several ranks in one file, phases
running at the same time) every number must agree; on the real traces the agreement measured
when the checker was written must not fall (its misses are named in tests/gpu_oracle.py's
docstring: tracekit's tail rules, steps inferred without ProfilerStep, CK's conv weight-gradient
GEMMs that tracekit counts as Convolution).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gpu_oracle import compare
from shared_traces import SHARED, shared_traces
from test_truth_round3 import _rank_builder

from tracekit.testing import COMPUTE_STREAM, SIDE_STREAM, TraceBuilder, write_trace
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM
from tracekit.testing.merged import merged_trace

#: Numbers within 2% on the real traces (tests/gpu_oracle.py over ../shared/traces), 2026-11-28.
REAL_AGREEMENT = (852, 930)


def test_merged_ranks_agree_with_the_checker(tmp_path):
    builders = [_rank_builder(r, 40 + 10 * r, 60 + 5 * r, 3 + 4 * r) for r in range(3)]
    path = write_trace(tmp_path / "merged.json", merged_trace(builders))
    ok, n, misses = compare(path)
    assert n == 3 * 15 and ok == n, misses


def test_overlapping_phases_agree_with_the_checker(tmp_path):
    b = TraceBuilder()
    with b.step():
        k1 = b.kernel(GEMM_A, 100, op="aten::mm", at_us=10, stream=COMPUTE_STREAM)
        k2 = b.kernel(GEMM_A, 60, op="aten::mm", at_us=120, stream=COMPUTE_STREAM)
        with b.backward():
            b.kernel(GEMM_NN, 80, op="aten::mm", creator=k1, at_us=50, stream=SIDE_STREAM)
            b.kernel(GEMM_NN, 30, op="aten::mm", creator=k2, at_us=140, stream=SIDE_STREAM)
        with b.optimizer():
            b.kernel(K_ADAM, 20, op="aten::_fused_adam_", at_us=200)
    ok, n, misses = compare(b.write(tmp_path / "dualpipe.json"))
    assert n == 15 and ok == n, misses


def test_legacy_backward_agrees_with_the_checker(tmp_path):
    b = TraceBuilder(legacy=True, old_categories=True, ts_format="int")
    with b.step():
        mm = b.kernel(GEMM_A, 40, op="aten::addmm", at_us=10)
        with b.backward():
            b.kernel(GEMM_NN, 30, op="aten::mm", creator=mm, at_us=100)
        with b.optimizer("Optimizer.step#SGD.step"):
            b.kernel(K_ADAM, 20, op="aten::add_", at_us=160)
    ok, n, misses = compare(b.write(tmp_path / "legacy.json"))
    assert n == 15 and ok == n, misses


@pytest.mark.shared
def test_real_traces_agree_at_least_as_before():
    found = [p for p in shared_traces() if "tracelens" in p.parts or "hta" in p.parts or "kineto" in p.parts]
    if not found:
        pytest.skip(f"shared traces not found at {SHARED}")
    ok = n = 0
    for p in found:
        a, b, _ = compare(p)
        ok, n = ok + a, n + b
    assert n >= REAL_AGREEMENT[1] and ok / n >= REAL_AGREEMENT[0] / REAL_AGREEMENT[1], (ok, n)
