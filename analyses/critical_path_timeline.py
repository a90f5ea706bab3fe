"""The critical path of each step over time: the bars of the HTML report's path timeline.

Per complete step, the pieces of its path (:attr:`tracekit.pipeline.Attributed.critical`, the
pieces ``critical_path`` sums) in time order (docs/metrics.md, "Critical path"):

* ``kind``, ``phase``, ``module``: the piece's labels, as ``critical_path`` has them;
* ``start_ms``, ``end_ms``: since the start of the step's window (the ``idle`` table's), from
  integer nanoseconds; the pieces of a step are in order and do not overlap;
* ``pieces``: how many pieces of the path the row stands for (1 unless merged).

Sized for a chart, not for every piece: neighbours with the same kind, phase and module that
touch are first joined into one. A step then keeps at most ``max(MIN_PIECES, POINTS // steps)``
rows: if it has more, it keeps its ``k`` longest (the earlier of equal ones), and every other
piece joins the kept piece before it (the pieces before the first kept one join that one), so
the rows still cover the same time in order; neighbours that now share their labels are joined
again; ``k`` is the largest that leaves at most that many rows. A thinned step's time per
kind is then approximate (the pieces that joined another row are counted in its kind);
``points=None`` (the CLI's ``--full-series``) keeps every piece, and then each step's time per
kind is ``critical_path``'s to the nanosecond. Only per step; the
terminal and Markdown leave it out (the files keep it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._registry import COUNT, CRITICAL_PIECES, INDEX, MS, PER_STEP, register

#: Rows over the run (a chart is a few hundred pixels wide), and the fewest a step keeps.
POINTS = 400
MIN_PIECES = 10
LABELS = ["kind", "phase", "module"]
COLUMNS = ["step", *LABELS, "start_ms", "end_ms", "pieces"]


@register(
    "critical_path_timeline",
    title="Critical path over time",
    keys=("kind", "phase", "module"),
    values={"start_ms": MS, "end_ms": MS, "pieces": COUNT, "waited_on_rank": INDEX},
    reads=CRITICAL_PIECES,
    aggregate=PER_STEP,
    chart="critical_timeline",
    shown=False,
    series=True,
)
def table(pieces: pd.DataFrame, windows: Windows, points: int | None = POINTS) -> pd.DataFrame:
    done = windows.steps
    if pieces is None or pieces.empty or done.empty:
        return pd.DataFrame(columns=COLUMNS)
    p = pieces[np.isin(pieces["step"].to_numpy(), done["step"].to_numpy())]
    order = np.lexsort((p["start"].to_numpy(np.int64), p["step"].to_numpy()))
    p = p.iloc[order]
    step = p["step"].to_numpy(np.int64)
    codes = _label_codes(p)
    lo, hi = p["start"].to_numpy(np.int64), p["end"].to_numpy(np.int64)
    rows, lo, hi, count = joined(step, codes, lo, hi, np.ones(len(p), np.int64))
    if points is not None:
        budget = max(MIN_PIECES, points // max(len(done), 1))
        kept, lo, hi, count = thinned(step[rows], codes[rows], lo, hi, count, budget)
        rows = rows[kept]
        rows, lo, hi, count = _rejoin(step, codes, rows, lo, hi, count)
    base = dict(zip(done["step"].to_numpy(np.int64), done["start"].to_numpy(np.int64)))
    t0 = np.array([base[s] for s in step[rows]], np.int64) if len(rows) else np.zeros(0, np.int64)
    out = pd.DataFrame({"step": step[rows]})
    for c in LABELS:
        out[c] = np.asarray(p[c].array.take(rows), dtype=object)  # only the kept rows converted
    out["start_ms"] = (lo - t0) / 1e6
    out["end_ms"] = (hi - t0) / 1e6
    out["pieces"] = count
    return out[COLUMNS]


def _label_codes(p: pd.DataFrame) -> np.ndarray:
    """One integer per row for its (kind, phase, module): equal labels, equal codes (the
    comparisons below then test one column, not three)."""
    code = np.zeros(len(p), np.int64)
    for c in LABELS:
        cat = pd.Categorical(p[c])
        code = code * (len(cat.categories) + 1) + cat.codes.astype(np.int64)
    return code


def _flat(codes: np.ndarray) -> np.ndarray:
    """Label codes as one integer per row (rows of several code columns numbered by value)."""
    return codes if codes.ndim == 1 else np.unique(codes, axis=0, return_inverse=True)[1].reshape(-1)


def joined(step, codes, lo, hi, count):
    """Neighbours (in time order) of the same step and labels that touch, joined: per row the
    index of its first piece, its start, end and pieces."""
    codes = _flat(codes)
    n = len(step)
    if not n:
        return np.zeros(0, np.int64), lo, hi, count
    same = np.r_[False, step[1:] == step[:-1]] & np.r_[False, lo[1:] == hi[:-1]]
    same &= np.r_[False, codes[1:] == codes[:-1]]
    first = np.flatnonzero(~same)
    last = np.r_[first[1:] - 1, n - 1]
    return first, lo[first], hi[last], np.add.reduceat(count, first)


def thinned(step, codes, lo, hi, count, budget: int):
    """At most ``budget`` rows per step once neighbours are joined again (``step`` sorted, rows
    in time order, ``codes`` their labels): the most of its longest rows (the earlier of equal
    ones) that allows it, each other row joining the kept row before it (the rows before the
    first kept one, the first kept one). Returns the kept rows' indices, start, end, pieces."""
    n = len(step)
    if not n:
        return np.zeros(0, np.int64), lo, hi, count
    codes = _flat(codes)
    idx = np.arange(n)
    first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]])
    size = np.diff(np.r_[first, n])
    of = np.repeat(np.arange(len(first)), size)
    rank = np.empty(n, np.int64)
    order = _longest_first(step, lo, hi, of)
    rank[order] = idx - np.repeat(first, size)
    keep = rank < _most(of, rank, order, size, codes, np.r_[False, lo[1:] == hi[:-1]], budget)[of]
    before = np.maximum.accumulate(np.where(keep, idx, -1))
    after = np.minimum.accumulate(np.where(keep, idx, n)[::-1])[::-1]
    own = (before >= 0) & (of[np.maximum(before, 0)] == of)
    owner = np.where(own, before, after)  # non-decreasing: each kept row's group in one run
    starts = np.flatnonzero(np.r_[True, owner[1:] != owner[:-1]])
    return (
        np.flatnonzero(keep),
        np.minimum.reduceat(lo, starts),
        np.maximum.reduceat(hi, starts),
        np.add.reduceat(count, starts),
    )


def _longest_first(step, lo, hi, of) -> np.ndarray:
    """The rows by step, longest first, ties by start (then row): ``np.lexsort((lo, -(hi -
    lo), step))``. Rows by step and in time order start in order within their step, so a
    stable sort by step (``of``: the number of its run) and length is that order, by one sort
    of one integer key (a third less time on 135k pieces); other rows: the lexsort."""
    dur = hi - lo
    same = step[1:] == step[:-1]
    in_order = ((step[1:] > step[:-1]) | (same & (lo[1:] >= lo[:-1]))).all()
    longest = int(dur.max()) if len(dur) else 0
    if not in_order or dur.min(initial=0) < 0 or (int(of.max(initial=0)) + 1) * (longest + 1) >= 2**62:
        return np.lexsort((lo, -dur, step))
    return np.argsort(of * (longest + 1) + (longest - dur), kind="stable")


def _most(of, rank, order, size, codes, touch, budget: int) -> np.ndarray:
    """Per step, the most longest rows it can keep with at most ``budget`` rows after joining
    (binary search: keeping one more row never gives fewer rows); ``order``: the rows by step,
    longest first; ``touch``: a row starts where the row before it ends (then it joins the
    kept row before it if that has its labels).

    ``k`` rows never join into more than ``k``: the search starts at ``budget`` and doubles
    until too many, over only the rows it keeps, then halves over only the rows below that
    bound, fewer each round (186 steps of 2,800 pieces: 26 ms to 17; a random test holds it
    to the plain search)."""
    lo_k, hi_k = _bounds(order, of, size, codes, touch, budget)
    while (hi_k - lo_k > 1).any():
        left = np.flatnonzero(rank < hi_k[of])  # the rows a later round may keep
        of, rank, codes, touch = of[left], rank[left], codes[left], touch[left]
        mid = (lo_k + hi_k) // 2
        ok = _rows(of, np.flatnonzero(rank < mid[of]), codes, touch, len(size)) <= budget
        lo_k, hi_k = np.where(ok, mid, lo_k), np.where(ok, hi_k, mid)
    return lo_k


def _bounds(order, of, size, codes, touch, budget: int):
    """Per step, a count of longest rows that gives few enough rows and one that gives too
    many: from ``budget`` (never too many) doubling, each round over the kept rows only."""
    lo_k, hi_k = np.minimum(size, budget), size + 1
    grow = lo_k < size
    first = np.r_[0, np.cumsum(size)[:-1]]
    while grow.any():
        mid = np.where(grow, np.minimum(2 * lo_k, size), 0)
        ends = np.cumsum(mid)
        kept = np.zeros(len(of), bool)
        kept[order[np.repeat(first - (ends - mid), mid) + np.arange(ends[-1])]] = True
        ok = _rows(of, np.flatnonzero(kept), codes, touch, len(size)) <= budget
        lo_k, hi_k = np.where(grow & ok, mid, lo_k), np.where(grow & ~ok, mid, hi_k)
        grow &= ok & (lo_k < size)
    return lo_k, hi_k


def _rows(of, k, codes, touch, steps: int) -> np.ndarray:
    """Per step, its rows once the rows not in ``k`` (kept rows, in order) join the kept ones
    and kept neighbours with the same labels are joined."""
    ck = codes[k]
    same = (of[k][1:] == of[k][:-1]) & (ck[1:] == ck[:-1]) & touch[k][1:]
    return np.bincount(of[k], weights=~np.r_[False, same], minlength=steps)


def _rejoin(step, codes, rows, lo, hi, count):
    """:func:`joined` on the thinned rows (``rows``: their first pieces)."""
    first, lo2, hi2, c2 = joined(step[rows], codes[rows], lo, hi, count)
    return rows[first], lo2, hi2, c2
