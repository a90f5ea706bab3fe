"""critical_path_timeline's search for the most longest rows a step keeps (the doubling, then
halving over fewer rows) against the plain binary search over every row, on random steps."""

from __future__ import annotations

import numpy as np
import pytest
from tracekit.analyses import critical_path_timeline as cpt


def _plain(of, rank, size, codes, touch, budget):
    lo_k = np.where(size <= budget, size, 1)
    hi_k = size + 1
    while (hi_k - lo_k > 1).any():
        mid = (lo_k + hi_k) // 2
        ok = cpt._rows(of, np.flatnonzero(rank < mid[of]), codes, touch, len(size)) <= budget
        lo_k, hi_k = np.where(ok, mid, lo_k), np.where(ok, hi_k, mid)
    return lo_k


@pytest.mark.parametrize("seed", range(40))
def test_the_search_finds_what_the_plain_search_finds(seed):
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(1, 8))
    size = rng.integers(1, 400, steps)
    n = int(size.sum())
    step = np.repeat(np.arange(steps), size)
    gap = rng.integers(0, 2, n) * rng.integers(1, 5, n)  # many rows touch the one before
    dur = rng.integers(1, int(rng.integers(2, 50)), n)
    lo = np.cumsum(gap + np.r_[0, dur[:-1]])
    hi = lo + dur
    codes = rng.integers(0, int(rng.integers(1, 5)), n)
    budget = int(rng.integers(1, 40))
    first = np.r_[0, np.cumsum(size)[:-1]]
    of = step
    order = cpt._longest_first(step, lo, hi, of)
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n) - np.repeat(first, size)
    touch = np.r_[False, lo[1:] == hi[:-1]]
    want = _plain(of, rank, size, codes, touch, budget)
    assert (cpt._most(of, rank, order, size, codes, touch, budget) == want).all()
