"""Interval arithmetic on int64 nanosecond intervals ``[start, end)``, vectorised with numpy.

Every time measure tracekit reports is one of these: the measure of a union, of a difference of
unions, of a union clipped to a window, or a *share* (each instant of busy time divided equally
among the intervals active at that instant, so shares add up to the union exactly).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def unique(values: np.ndarray, return_inverse: bool = False):
    """``np.unique`` of an int64 array (with ``return_inverse``: and each value's position in
    it), by one stable sort: numpy 2's ``np.unique`` is many times slower on large int64 arrays
    of times (which are mostly sorted runs, where a stable sort is fastest)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    s = values[order]
    new = np.ones(s.size, bool)
    new[1:] = s[1:] != s[:-1]
    if not return_inverse:
        return s[new]
    inverse = np.empty(s.size, np.intp)
    inverse[order] = np.cumsum(new) - 1
    return s[new], inverse


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


def measure_by(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Measure (ns) of the union of the frame's ``[start, end)`` intervals per group of ``keys``.

    Sorted by start within a group, an interval adds what it reaches past the furthest end
    seen before it in the group; those additions sum to the union's measure (int64 throughout).
    """
    if frame.empty:
        return pd.Series(
            dtype=np.int64,
            index=pd.MultiIndex.from_arrays([[]] * len(keys), names=keys)
            if len(keys) > 1
            else pd.Index([], name=keys[0]),
        )
    # Sorted by the keys' codes (in the keys' order) and start; rows with a missing key are
    # left out, as a group-by leaves them.
    codes = [_order_codes(frame[k]) for k in keys]
    ok = np.flatnonzero(np.logical_and.reduce([c >= 0 for c in codes]))
    start = frame["start"].to_numpy(np.int64)[ok]
    order = ok[np.lexsort([start] + [c[ok] for c in reversed(codes)])]
    first = np.zeros(len(order), bool)
    first[:1] = True
    for c in codes:
        first[1:] |= c[order][1:] != c[order][:-1]
    start, end = frame["start"].to_numpy(np.int64)[order], frame["end"].to_numpy(np.int64)[order]
    added = np.clip(end - np.maximum(start, _reach(start, end, first)), 0, None)
    heads = np.flatnonzero(first)
    total = np.add.reduceat(added, heads) if len(heads) else added[:0]
    at = order[heads]
    index = [frame[k].iloc[at] for k in keys]
    idx = pd.MultiIndex.from_arrays(index, names=keys) if len(keys) > 1 else pd.Index(index[0], name=keys[0])
    return pd.Series(total.astype(np.int64), index=idx)


def measure_by_key(key: np.ndarray, start: np.ndarray, end: np.ndarray, n: int) -> np.ndarray:
    """:func:`measure_by` for small integer keys on arrays: per key ``0..n-1`` the measure (ns)
    of the union of its ``[start, end)`` intervals (0 for a key with none), with no frame."""
    out = np.zeros(n, np.int64)
    if not len(key):
        return out
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    order = np.lexsort((start, key))
    k, start, end = key[order], start[order], end[order]
    first = np.ones(len(k), bool)
    first[1:] = k[1:] != k[:-1]
    added = np.clip(end - np.maximum(start, _reach(start, end, first)), 0, None)
    heads = np.flatnonzero(first)
    out[k[heads]] = np.add.reduceat(added, heads)
    return out


def _order_codes(col: pd.Series) -> np.ndarray:
    """Integers that sort and group as ``pd.factorize(col, sort=True)[0]`` does, -1 missing:
    an int column's own values, a categorical's codes (pandas sorts a categorical's groups in
    the order of its categories), else the factorized codes."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return col.array.codes
    v = col.to_numpy()
    if v.dtype.kind == "i" and v.min(initial=0) >= 0:  # no value reads as missing (-1)
        return v.astype(np.int64, copy=False)
    return pd.factorize(col, sort=True)[0]


def ends_before(end: np.ndarray, first: np.ndarray, fill: int) -> np.ndarray:
    """Per row (rows sorted into groups; ``first``: a group's first row), the furthest ``end``
    of the rows before it in its group, ``fill`` at a group's first row: a group-by's
    ``cummax().shift(1, fill_value=fill)``, by :func:`_reach`'s one running maximum."""
    end = np.asarray(end, np.int64)
    out = _reach(end, end, first)
    out[first] = fill
    return out


def _reach(start: np.ndarray, end: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Per interval (sorted by group, then start; ``first``: a group's first row), the furthest
    end of the intervals before it in its group (at a group's first row: a value at most its
    start). One running maximum over the groups shifted apart, so that no group sees an
    earlier group's ends; a per-group running maximum by pandas when the shifted times could
    overflow int64."""
    prev = np.empty_like(end)
    if not len(prev):
        return prev
    prev[1:] = end[:-1]
    prev[first] = np.minimum(start, end)[first]
    heads = np.flatnonzero(first)
    lo, hi = np.minimum.reduceat(prev, heads), np.maximum.reduceat(prev, heads)
    widths = [int(h) - int(m) + 1 for h, m in zip(hi.tolist(), lo.tolist())]
    if sum(widths) >= 2**62:
        gid = np.cumsum(first) - 1
        return pd.Series(prev).groupby(gid, sort=False).cummax().to_numpy(np.int64)
    # Group g is shifted by base_g - lo_g to start just past where group g-1 ends; the shifted
    # times fit in int64 (the sum of the widths is below 2**62), so a shift that wraps around
    # int64 wraps back when added (numpy's integer arithmetic is modulo 2**64).
    base = np.concatenate([[0], np.cumsum(widths[:-1], dtype=np.int64)]).astype(np.int64)
    shift = np.repeat(base - lo, np.diff(np.append(heads, len(prev))))
    return np.maximum.accumulate(prev + shift) - shift


def minus_measure_by(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], on: list[str]) -> pd.Series:
    """Per group of ``keys`` of ``a``: measure (ns) of the union of the group's intervals minus
    the union of the intervals of ``b`` that share the group's ``on`` columns (``on`` is a
    subset of ``keys``). "Exposed communication" is this, with ``a`` the communication and
    ``b`` the compute of the same step."""
    total = measure_by(_with_matches(a, b, keys, on), keys)
    # The union of b is the same for every group sharing the ``on`` columns: measured once.
    by_on = measure_by(b[on + ["start", "end"]], on)
    levels = [total.index.get_level_values(k) for k in on]
    at = levels[0] if len(on) == 1 else pd.MultiIndex.from_arrays(levels)
    hidden = by_on.reindex(at).fillna(0).astype(np.int64).to_numpy()
    return total - hidden


def _with_matches(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], on: list[str]) -> pd.DataFrame:
    """``a``'s ``keys``, ``start`` and ``end``, followed by each interval of ``b`` once per group
    of ``a``'s keys with its ``on`` values (with that group's keys): the rows of ``concat(a,
    b.merge(groups of a, on=on))``, up to their order, built by index arithmetic."""
    from .state import distinct_rows

    both_on = (np.concatenate([a[k].to_numpy(), b[k].to_numpy()]) for k in on)
    on_key = distinct_rows(*(pd.factorize(v)[0] for v in both_on))[0]
    a_on, b_on = on_key[: len(a)], on_key[len(a) :]
    group_row = distinct_rows(*(pd.factorize(a[k])[0] for k in keys))[1]  # one row of each group
    b_sorted = np.argsort(b_on, kind="stable")
    lo = np.searchsorted(b_on[b_sorted], a_on[group_row], "left")
    hi = np.searchsorted(b_on[b_sorted], a_on[group_row], "right")
    counts = hi - lo
    # b rows lo_j .. hi_j - 1 (of the sorted order) for each group j, one after another
    step = np.ones(int(counts.sum()), np.int64)
    ends = np.cumsum(counts)
    starts = ends - counts
    nonempty = counts > 0
    step[starts[nonempty]] = lo[nonempty] - np.append(-1, hi[nonempty][:-1] - 1)
    b_rows = b_sorted[np.cumsum(step) - 1] if len(step) else np.zeros(0, np.int64)
    rows = np.concatenate([np.arange(len(a)), np.repeat(group_row, counts)])
    out = {k: a[k].array[rows] for k in keys}
    for c in ("start", "end"):
        out[c] = np.concatenate([a[c].to_numpy(np.int64), b[c].to_numpy(np.int64)[b_rows]])
    return pd.DataFrame(out)


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


#: Up to this many distinct ``pid`` among the ranges, :func:`containing` searches each one's
#: ranges for its points (a sort of the ranges alone); above, one sort of ranges and points.
FEW_PIDS = 8


def containing(
    pid: np.ndarray, t: np.ndarray, r_pid: np.ndarray, r_start: np.ndarray, r_end: np.ndarray
) -> np.ndarray:
    """Index of the range ``[r_start, r_end)`` of the same ``pid`` holding each time ``t``; -1
    when none. Ranges of one pid should not overlap; where they do, the latest-starting wins
    (equal starts: the last in index order)."""
    pid, t = np.asarray(pid, np.int64), np.asarray(t, np.int64)
    r_pid = np.asarray(r_pid, np.int64)
    r_start, r_end = np.asarray(r_start, np.int64), np.asarray(r_end, np.int64)
    if len(r_pid) == 0 or len(t) == 0:
        return np.full(len(t), -1, dtype=np.int64)
    # The candidate is the last range of the point's pid starting at or before it.
    pids = np.unique(r_pid)
    if len(pids) <= FEW_PIDS:
        cand = _last_started_by_pid(pids, pid, t, r_pid, r_start)
    else:
        cand = _last_started(pid, t, r_pid, r_start)
    c = np.maximum(cand, 0)
    return np.where((cand >= 0) & (r_pid[c] == pid) & (t < r_end[c]), cand, -1)


def _last_started_by_pid(pids, pid, t, r_pid, r_start) -> np.ndarray:
    """Per point, the last range (by start, then index) of its pid starting at or before it
    (-1 none): the ranges sorted alone, each pid's points searched among its own."""
    order = np.lexsort((r_start, r_pid))  # stable: equal starts keep index order
    p, s = r_pid[order], r_start[order]
    cand = np.full(len(t), -1, np.int64)
    for q, lo, hi in zip(pids.tolist(), np.searchsorted(p, pids, "left"), np.searchsorted(p, pids, "right")):
        m = np.flatnonzero(pid == q)
        at = np.searchsorted(s[lo:hi], t[m], "right") - 1
        cand[m] = np.where(at >= 0, order[lo + np.maximum(at, 0)], -1)
    return cand


def _last_started(pid, t, r_pid, r_start) -> np.ndarray:
    """:func:`_last_started_by_pid` by one sort of ranges and points together by (pid, time),
    ranges before points at an equal time and equal starts in index order: the last range
    before each point (of its pid or not: the caller checks). O(n log n) however many pids."""
    nr, nq = len(r_pid), len(t)
    all_pid = np.concatenate([r_pid, pid])
    all_t = np.concatenate([r_start, t])
    is_q = np.concatenate([np.zeros(nr, bool), np.ones(nq, bool)])
    idx = np.concatenate([np.arange(nr), np.arange(nq)])
    order = np.lexsort((idx, is_q, all_t, all_pid))
    q_sorted = is_q[order]
    last = np.maximum.accumulate(np.where(q_sorted, -1, np.arange(len(order))))[q_sorted]
    cand = np.empty(nq, np.int64)
    cand[idx[order][q_sorted]] = np.where(last >= 0, order[np.maximum(last, 0)], -1)
    return cand


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
        bounds = unique(np.concatenate([starts, ends])) - self.origin
        self.bounds = bounds.astype(np.float64)
        nseg = max(bounds.size - 1, 0)
        # Active count per level per elementary segment [bounds[j], bounds[j+1]).
        si = np.searchsorted(bounds, starts - self.origin)
        ei = np.searchsorted(bounds, ends - self.origin)
        self.si, self.ei = si, ei  # every start and end is a bound: its W is cum[level, si]
        width = nseg + 1
        counts = np.stack(
            [
                np.bincount(si[level == lv], minlength=width) - np.bincount(ei[level == lv], minlength=width)
                for lv in range(n_levels)
            ]
        ).astype(np.int64)
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

    def _at_rows(self, rows: np.ndarray, t: np.ndarray, pos: np.ndarray, own: np.ndarray) -> np.ndarray:
        """``_at`` of the intervals ``rows`` at times ``t``: read off ``cum`` where ``t`` is the
        interval's own start or end (``own``; ``pos`` its bound), interpolated elsewhere
        (np.interp returns ``cum`` itself at a bound, so both give the same value)."""
        lv = self.level[rows]
        out = self.cum[lv, pos[rows]]
        other = ~own
        if other.any():
            out[other] = self._at(lv[other], t[other])
        return out

    def shares(self, lo: int | None = None, hi: int | None = None) -> np.ndarray:
        """Each interval's share (ns, float) inside ``[lo, hi)`` (default: everywhere)."""
        s = self.starts if lo is None else np.maximum(self.starts, lo)
        e = self.ends if hi is None else np.minimum(self.ends, hi)
        e = np.maximum(e, s)
        out = np.zeros(len(s), dtype=np.float64)  # W(e) - W(s) is 0.0 where e == s
        rows = np.flatnonzero(e > s)
        s, e = s[rows], e[rows]
        w_e = self._at_rows(rows, e, self.ei, e == self.ends[rows])
        out[rows] = w_e - self._at_rows(rows, s, self.si, s == self.starts[rows])
        return out
