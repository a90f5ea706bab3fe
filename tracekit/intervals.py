"""Interval arithmetic on int64 nanosecond intervals ``[start, end)``, vectorised with numpy.

Every time measure tracekit reports is one of these: the measure of a union, of a difference of
unions, of a union clipped to a window, or a *share* (each instant of busy time divided equally
among the intervals active at that instant, so shares add up to the union exactly).
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint ``(starts, ends)``. Empty intervals vanish."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if starts.size == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


def measure(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length of the union of the intervals, in the intervals' unit."""
    s, e = union(starts, ends)
    return int((e - s).sum())


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to the window ``[lo, hi)`` (empty ones dropped)."""
    s = np.maximum(np.asarray(starts, dtype=np.int64), lo)
    e = np.minimum(np.asarray(ends, dtype=np.int64), hi)
    keep = e > s
    return s[keep], e[keep]


def intersection_measure(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Measure of ``A ∩ B`` for two *disjoint sorted* interval sets (outputs of :func:`union`)."""
    a_s, a_e = a
    b_s, b_e = b
    if a_s.size == 0 or b_s.size == 0:
        return 0
    # Measure of A∩B = |A| + |B| - |A∪B|.
    both_s = np.concatenate([a_s, b_s])
    both_e = np.concatenate([a_e, b_e])
    return int((a_e - a_s).sum() + (b_e - b_s).sum()) - measure(both_s, both_e)


def minus_measure(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> int:
    """Measure of ``A \\ B`` for two disjoint sorted interval sets."""
    return int((a[1] - a[0]).sum()) - intersection_measure(a, b)


class ShareClock:
    """Exclusive shares of busy time, with priorities.

    Built over all device intervals of a window, each with a priority level (0 = highest:
    compute, then communication, then memory copies). At every instant, the time belongs to the
    highest-priority level that has an active interval and is divided equally among that level's
    active intervals. So the shares of the level-0 intervals add up to the measure of their
    union; the shares of level-1 intervals add up to (union of level 1) minus (union of level 0);
    and all shares together add up to the union of everything.

    ``share(i, lo, hi)`` gives interval i's share inside ``[lo, hi)``.
    """

    def __init__(self, starts: np.ndarray, ends: np.ndarray, level: np.ndarray, n_levels: int = 3):
        starts = np.asarray(starts, dtype=np.int64)
        ends = np.maximum(np.asarray(ends, dtype=np.int64), starts)
        level = np.asarray(level, dtype=np.int64)
        self.starts, self.ends, self.level = starts, ends, level
        self.origin = int(starts.min()) if starts.size else 0
        bounds = np.unique(np.concatenate([starts, ends])) - self.origin
        self.bounds = bounds.astype(np.float64)
        nseg = max(bounds.size - 1, 0)
        # Active count per level per elementary segment [bounds[j], bounds[j+1]).
        counts = np.zeros((n_levels, nseg + 1), dtype=np.int64)
        si = np.searchsorted(bounds, starts - self.origin)
        ei = np.searchsorted(bounds, ends - self.origin)
        for lv in range(n_levels):
            m = level == lv
            np.add.at(counts[lv], si[m], 1)
            np.add.at(counts[lv], ei[m], -1)
        counts = np.cumsum(counts, axis=1)[:, :nseg]
        seg_len = np.diff(bounds).astype(np.float64)
        # cumulative share per level: W_lv(bounds[j]) = integral of 1/k over owned segments
        self.cum = np.zeros((n_levels, nseg + 1), dtype=np.float64)
        higher = np.zeros(nseg, dtype=np.int64)
        for lv in range(n_levels):
            k = counts[lv]
            owned = (higher == 0) & (k > 0)
            rate = np.where(owned, 1.0 / np.maximum(k, 1), 0.0)
            self.cum[lv, 1:] = np.cumsum(rate * seg_len)
            higher = higher + k

    def _at(self, lv: np.ndarray, t: np.ndarray) -> np.ndarray:
        x = (np.asarray(t, dtype=np.int64) - np.int64(self.origin)).astype(np.float64)
        out = np.empty(x.shape, dtype=np.float64)
        for level in np.unique(lv):
            m = lv == level
            out[m] = np.interp(x[m], self.bounds, self.cum[level]) if self.bounds.size else 0.0
        return out

    def shares(self, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        """Each interval's share (ns, float) inside ``[lo, hi)`` (default: everywhere)."""
        s = self.starts if lo is None else np.maximum(self.starts, lo)
        e = self.ends if hi is None else np.minimum(self.ends, hi)
        e = np.maximum(e, s)
        return self._at(self.level, e) - self._at(self.level, s)
