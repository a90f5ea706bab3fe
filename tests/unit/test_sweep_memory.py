"""The nesting sweep's memory per element: it runs over every CPU range and launch of a trace
(about a million elements in a 1 GB trace), so its temporaries set the analysis's peak."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from tracekit.pipeline.nesting import F_MODULE, F_OP, sweep, sweep_loop, sweep_numpy


def _nested(k: int):
    """k module frames, each holding an op that holds an op, and one launch inside each, on
    two threads."""
    base = np.arange(k, dtype=np.int64) * 100
    start = np.concatenate([base, base + 10, base + 20, base + 30])
    end = np.concatenate([base + 90, base + 80, base + 70, base + 30])
    is_range = np.r_[np.ones(3 * k, bool), np.zeros(k, bool)]
    flags = np.concatenate([np.full(k, F_MODULE), np.full(k, F_OP), np.full(k, F_OP), np.zeros(k)])
    n = 4 * k
    tid = (np.arange(n) % 2).astype(np.int64)
    return np.zeros(n, np.int64), tid, start, end, is_range, flags.astype(np.int64)


@pytest.mark.parametrize("form", [sweep, sweep_numpy], ids=["sweep", "numpy"])
def test_sweep_peak_memory_per_element(form):
    args = _nested(50_000)
    n = len(args[0])
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = form(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The result alone is 6 int64 columns (48 bytes per element). The level arrays are int32
    # and temporaries are dropped as soon as used: ~150 bytes per element (263 when every
    # level array was int64 and held to the end).
    assert peak / n < 190, peak / n
    small = tuple(a[: 4 * 500] for a in _nested(500))
    assert all((x == y).all() for x, y in zip(form(*small), sweep_loop(*small)))
    assert out[0].dtype == np.int64 and out[5].dtype == np.int64
