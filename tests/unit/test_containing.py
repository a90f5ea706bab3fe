"""``containing`` (tracekit.pipeline.intervals) finds, per point, the same range whichever way
it searches: each pid's ranges alone (few pids: the ranges sorted, the points looked up) or one
sort of ranges and points together (many pids). Both against a brute force on random inputs:
overlapping, equal and empty ranges, points at every start and end, pids with no range."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline import intervals
from tracekit.pipeline.intervals import containing


def _brute(pid, t, r_pid, r_start, r_end) -> np.ndarray:
    out = np.full(len(t), -1, np.int64)
    for k in range(len(t)):
        best = -1
        for i in range(len(r_pid)):  # the latest-starting, then the last in index order
            if r_pid[i] == pid[k] and r_start[i] <= t[k] and (best < 0 or r_start[i] >= r_start[best]):
                best = i
        if best >= 0 and t[k] < r_end[best]:
            out[k] = best
    return out


@pytest.mark.parametrize("few", [intervals.FEW_PIDS, 0])
@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_r=st.integers(0, 40),
    n_q=st.integers(0, 40),
    pids=st.integers(1, 12),
    span=st.integers(1, 30),
)
def test_containing_is_the_brute_force(few, seed, n_r, n_q, pids, span):
    rng = np.random.default_rng(seed)
    r_pid = rng.integers(0, pids, n_r)
    r_start = rng.integers(0, span, n_r)
    r_end = r_start + rng.integers(0, span // 2 + 1, n_r)
    pid = rng.integers(0, pids + 2, n_q)
    t = rng.integers(-1, span + span // 2 + 1, n_q)
    hit = rng.random(n_q) < 0.4
    if n_r and hit.any():
        src = rng.integers(0, n_r, int(hit.sum()))
        pid[hit] = r_pid[src]
        t[hit] = np.where(rng.random(src.size) < 0.5, r_start[src], r_end[src])
    old = intervals.FEW_PIDS
    intervals.FEW_PIDS = few
    try:
        got = containing(pid, t, r_pid, r_start, r_end)
    finally:
        intervals.FEW_PIDS = old
    np.testing.assert_array_equal(got, _brute(pid, t, r_pid, r_start, r_end))
