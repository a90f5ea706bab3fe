"""Self time of nested intervals (CPU ops on CPU-only traces): each interval minus the
intervals nested in it, as pieces that tile each thread, owned by the innermost interval open
there.

:func:`self_pieces` is vectorised over all threads on the nesting sweep's axis and parent
search (:mod:`tracekit.pipeline.nesting`); :func:`_pieces_loop` is the reference sweep, used
for a thread whose intervals overlap without nesting.
"""

from __future__ import annotations

import numpy as np

from .nesting import _one_axis, _thread_parents


def self_pieces(pid, tid, start, end):
    """Self time of nested intervals: each interval minus the intervals nested in it.

    Returns (owner, piece_start, piece_end, first): on each thread every instant covered by an
    interval belongs to exactly one piece, owned by the innermost interval open there (the
    latest-started one). ``first`` marks one piece per interval (its first non-empty piece, or
    one empty piece when children or a zero duration cover it all), so every interval is counted
    once. Vectorised over all threads at once where intervals nest properly (times replaced by
    their rank and each thread moved onto its own stretch of one axis);
    :func:`_pieces_loop`'s sweep (the reference) for a thread whose intervals overlap
    without nesting.
    """
    n = len(start)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, z, np.zeros(0, bool)
    order = np.lexsort((-end, start, tid, pid))
    s, e, vals, width = _one_axis(pid[order], tid[order], start[order], end[order])
    _, parent, proper = _thread_parents(s, e, e > s)
    if proper:
        own, ps, pe = _pieces_nested(s, e, parent)
        owner = order[own]
    else:
        owner, ps, pe = _pieces_by_thread(s, e, order, s // width)
    return _mark_first(owner, vals[ps % width], vals[pe % width], n)


def _pieces_by_thread(s, e, order, group):
    """Pieces thread by thread (sorted inputs), the sweep where a thread does not nest."""
    bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
    parts = []
    for a, b in zip(np.r_[0, bounds].tolist(), np.r_[bounds, len(s)].tolist()):
        _, parent, proper = _thread_parents(s[a:b], e[a:b], e[a:b] > s[a:b])
        own, ps, pe = _pieces_nested(s[a:b], e[a:b], parent) if proper else _pieces_loop(s[a:b], e[a:b])
        parts.append((order[a:b][own], ps, pe))
    owner, ps, pe = (np.concatenate(x) for x in zip(*parts))
    return owner, ps, pe


def _pieces_nested(s, e, parent):
    """Pieces of one thread whose intervals nest properly: before each child, the gap since its
    previous sibling's end (or its parent's start), owned by the parent; after each interval's
    last child, the rest of the interval."""
    m = len(s)
    k = np.flatnonzero(parent >= 0)
    if not len(k):
        return np.arange(m), s, e
    k = k[np.argsort(parent[k], kind="stable")]
    p = parent[k]
    new = np.r_[True, p[1:] != p[:-1]]
    prev_end = np.where(new, s[p], np.r_[0, e[k[:-1]]])
    tail_from = s.copy()
    last = np.r_[p[1:] != p[:-1], True]
    tail_from[p[last]] = e[k[last]]
    own = np.r_[p, np.arange(m)]
    return own, np.r_[prev_end, tail_from], np.r_[s[k], e]


def _pieces_loop(s, e):
    """Reference: sweep one thread's intervals (sorted by start, then longest first); between
    consecutive boundaries the top of the stack owns the time."""
    own, ps, pe = [], [], []
    stack: list[int] = []
    cur = s[0] if len(s) else 0

    def close(t):
        nonlocal cur
        while stack and e[stack[-1]] <= t:
            k = stack.pop()
            own.append(k), ps.append(cur), pe.append(max(cur, e[k]))
            cur = max(cur, e[k])

    for k in range(len(s)):
        close(s[k])
        if stack and s[k] > cur:
            own.append(stack[-1]), ps.append(cur), pe.append(s[k])
        cur = max(cur, s[k])
        stack.append(k)
    close(np.iinfo(np.int64).max)
    return np.asarray(own, np.int64), np.asarray(ps, np.int64), np.asarray(pe, np.int64)


def _mark_first(owner, ps, pe, n):
    """Keep the non-empty pieces, one empty piece for an interval that has none, and mark the
    first kept piece of each interval."""
    nonempty = pe > ps
    has = np.zeros(n, bool)
    has[owner[nonempty]] = True
    keep = nonempty | ~has[owner]
    owner, ps, pe = owner[keep], ps[keep], pe[keep]
    ord_ = np.lexsort((ps, owner))
    first = np.zeros(len(owner), bool)
    o = owner[ord_]
    if len(o):
        first[ord_[np.r_[True, o[1:] != o[:-1]]]] = True
    # an interval with only empty pieces keeps exactly one
    dup_empty = ~first & (pe == ps) & ~has[owner]
    keep = ~dup_empty
    return owner[keep], ps[keep], pe[keep], first[keep]
