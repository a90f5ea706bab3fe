"""ShareClock.shares reads W off its table at the intervals' own bounds and interpolates only at
clipped ends: bit for bit the same as interpolating everywhere (the former form)."""

from __future__ import annotations

import numpy as np

from tracekit.pipeline.intervals import ShareClock


def _interpolated(clock: ShareClock, lo, hi) -> np.ndarray:
    s = np.maximum(clock.starts, lo)
    e = np.maximum(np.minimum(clock.ends, hi), s)
    return clock._at(clock.level, e) - clock._at(clock.level, s)


def test_shares_equal_interpolation_everywhere():
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 300))
        start = rng.integers(0, 10_000, n) + 1_700_000_000_000_000_000
        end = start + rng.integers(0, 500, n)  # zero-length ones included
        level = rng.integers(0, 3, n)
        clock = ShareClock(start, end, level)
        lo = start.min() + rng.integers(-50, 5_000, n)  # per interval, as per step windows
        hi = lo + rng.integers(0, 6_000, n)
        for a, b in ((lo, hi), (None, None), (int(lo[0]), None)):
            got = clock.shares(a, b)
            want = _interpolated(clock, clock.starts if a is None else a, clock.ends if b is None else b)
            assert got.dtype == np.float64 and np.array_equal(got, want)
            assert not np.signbit(got[got == 0]).any()


def test_shares_add_up_to_the_union():
    clock = ShareClock(np.array([0, 5, 20]), np.array([10, 15, 30]), np.array([0, 0, 1]))
    assert clock.shares().tolist() == [7.5, 7.5, 10.0]
    assert clock.shares(8, 22).tolist() == [1.0, 6.0, 2.0]
