"""The enclosing-range sweep of the link step, vectorised.

Each thread's ranges (CPU ops, annotations, module frames) and anchor points (launch calls)
are taken in (start, -end, ranges first) order. For every element we want the innermost
enclosing range of several kinds (op, module, backward node, collective) plus a few inherited
bits. The reference is a stack sweep (:func:`sweep_loop`): pop while the top range ends at or
before the element's start; the top is the parent; push ranges.

When ranges nest properly (a child never outlives its parent), the stack at an element holds
exactly the ranges still open at its start, so:

* depth(k) = number of earlier non-empty ranges of the thread that end after k starts;
* parent(k) = the last earlier non-empty range of the thread at depth(k) - 1;

both computed with sorts and binary searches, and the contexts then flow down one depth level
at a time. :func:`sweep` uses that and falls back to the loop for a thread whose ranges
overlap without nesting, so the result is always the loop's. Where the optional C extension
``tracekit.pipeline._nesting`` is built (and ``TRACEKIT_NATIVE`` is not ``0``), :func:`sweep` runs the
loop itself in C instead: the same stack sweep, a few dozen instructions per element.
"""

from __future__ import annotations

import os

import numpy as np

from .intervals import unique
from .state import run_starts

try:
    from . import _nesting  # type: ignore[attr-defined]
except ImportError:  # not compiled here: the vectorised numpy sweep
    _nesting = None

# Flags of a range (bit values shared with link.py).
F_OP, F_MODULE, F_OPT, F_EVAL, F_BWD, F_COMM, F_ROPE = (1 << i for i in range(7))
#: Context bit: the innermost module range is nested inside the innermost backward node.
MOD_IN_BWD = 1 << 20
_INHERITED = F_OPT | F_EVAL | F_ROPE


def sweep_order(pid, tid, start, end, is_range) -> np.ndarray:
    """``np.lexsort((~is_range, -end, start, tid, pid))``: by thread, start, longest first,
    ranges first (ties: by index). Sorted by (pid, tid, start) first, which is cheap on a
    trace's nearly time-ordered events; only runs of equal (pid, tid, start) are then sorted by
    the whole key (their indices in ascending order, so full ties keep index order)."""
    order = np.lexsort((start, tid, pid))
    p, q, s = pid[order], tid[order], start[order]
    same = (p[1:] == p[:-1]) & (q[1:] == q[:-1]) & (s[1:] == s[:-1])
    pos = np.flatnonzero(np.r_[same, False] | np.r_[False, same])
    if pos.size:
        sub = np.sort(order[pos])
        order[pos] = sub[np.lexsort((~is_range[sub], -end[sub], start[sub], tid[sub], pid[sub]))]
    return order


def sweep_loop(pid, tid, start, end, is_range, flags, order=None):
    """Reference stack sweep. Returns (op, top, mod, bwd, comm, bits) per element (input order).
    ``order``: :func:`sweep_order` of the elements when the caller has it (else computed)."""
    n = len(start)
    order = sweep_order(pid, tid, start, end, is_range) if order is None else order
    out = [np.full(n, -1, np.int64) for _ in range(5)] + [np.zeros(n, np.int64)]
    out_op, out_top, out_mod, out_bwd, out_comm, out_bits = out
    pid_l, tid_l = pid[order].tolist(), tid[order].tolist()
    st_l, en_l = start[order].tolist(), end[order].tolist()
    rng_l, fl_l = is_range[order].tolist(), flags[order].tolist()
    order_l = order.tolist()
    stack: list[tuple] = []
    cur_thread = None
    empty = (-1, -1, -1, -1, -1, 0)
    for k in range(n):
        th = (pid_l[k], tid_l[k])
        if th != cur_thread:
            stack.clear()
            cur_thread = th
        ts = st_l[k]
        while stack and stack[-1][0] <= ts:
            stack.pop()
        ctx = stack[-1][1] if stack else empty
        i = order_l[k]
        op, top, mod, bwd, comm, bits = ctx
        out_op[i], out_top[i], out_mod[i], out_bwd[i], out_comm[i], out_bits[i] = ctx
        if rng_l[k]:
            f = fl_l[k]
            if f & F_MODULE:
                mod, top, bits = i, -1, bits | MOD_IN_BWD
            if f & F_OP:
                op = i
                if top == -1:
                    top = i
            if f & F_BWD:
                bwd, bits = i, bits & ~MOD_IN_BWD
            if f & F_COMM:
                comm = i
            bits |= f & _INHERITED
            stack.append((en_l[k], (op, top, mod, bwd, comm, bits)))
    return out_op, out_top, out_mod, out_bwd, out_comm, out_bits


def _thread_parents(s: np.ndarray, e: np.ndarray, cand: np.ndarray):
    """Depth and parent (positions within the thread, -1 for none) of sorted elements, and
    whether the candidate ranges nest properly."""
    m = s.size
    before = np.cumsum(cand) - cand
    closed = _merged_search(np.sort(e[cand], kind="stable"), s, "right")
    depth = (before - closed).astype(np.int64)
    parent = np.full(m, -1, np.int64)
    has = depth > 0
    if has.any():
        cpos = np.flatnonzero(cand)
        d = depth[cpos]
        comp = (d * m + cpos)[_by_small_key(d)]  # sorted: by depth, then position
        by = _by_small_key(depth[has] - 1)  # q in sorted order: by depth, then position
        q = ((depth[has] - 1) * m + np.flatnonzero(has))[by]
        at = np.empty(q.size, np.int64)
        at[by] = _merged_search(comp, q, "left") - 1
        ok = at >= 0
        hit = np.where(ok, comp[np.maximum(at, 0)], -1)
        good = ok & (hit // m == depth[has] - 1)
        parent[has] = np.where(good, hit % m, -1)
        if not good.all():
            return depth, parent, False
    proper = True
    rc = cand & (parent >= 0)
    if rc.any():
        proper = bool((e[rc] <= e[parent[rc]]).all())
    return depth, parent, proper


def _merged_search(a: np.ndarray, v: np.ndarray, side: str) -> np.ndarray:
    """``np.searchsorted(a, v, side)`` for sorted ``a`` and sorted ``v``, by one stable merge
    of the two runs (linear) instead of a binary search per value (``v`` unsorted: the
    binary search)."""
    if v.size > 1 and (v[1:] < v[:-1]).any():
        return np.searchsorted(a, v, side=side)  # type: ignore[call-overload]
    if side == "right":  # a's values first among equals: they count
        flags = np.r_[np.ones(a.size, bool), np.zeros(v.size, bool)]
        merged = np.argsort(np.concatenate([a, v]), kind="stable")
    else:
        flags = np.r_[np.zeros(v.size, bool), np.ones(a.size, bool)]
        merged = np.argsort(np.concatenate([v, a]), kind="stable")
    is_a = flags[merged]
    before = np.cumsum(is_a)
    out = np.empty(v.size, np.int64)
    out[merged[~is_a] - (a.size if side == "right" else 0)] = before[~is_a]
    return out


def _by_small_key(key: np.ndarray) -> np.ndarray:
    """``np.argsort(key, kind="stable")``; as int16 when the values fit (a radix sort)."""
    if key.size and key.min() >= 0 and key.max() < np.iinfo(np.int16).max:
        key = key.astype(np.int16)
    return np.argsort(key, kind="stable")


def _shifted_axis(pid, tid, start, end):
    """Like :func:`_one_axis` for the sweep, without ranking the times: each thread's times
    (sorted by thread) are shifted onto their own stretch of one axis, after the previous
    thread's, so no element of one thread can contain another's and order and ties within a
    thread are kept. None when the shifted times would not fit in int64."""
    n = len(start)
    if n == 0:
        return start, end
    heads = np.flatnonzero(run_starts(pid, tid))
    lo = np.minimum.reduceat(np.minimum(start, end), heads)
    hi = np.maximum.reduceat(np.maximum(start, end), heads)
    if float((hi.astype(float) - lo.astype(float) + 1).sum()) > 2.0**62:
        return None
    span = hi - lo + 1
    base = np.concatenate([[0], np.cumsum(span)[:-1]])
    shift = np.repeat(base - lo, np.diff(np.r_[heads, n]))
    return start + shift, end + shift


def _one_axis(pid, tid, start, end):
    """Times of sorted-by-thread elements moved so that all threads can be swept as one: each
    time is replaced by its rank among all times (order and ties kept), and thread k's ranks
    are shifted onto their own stretch [k * width, (k + 1) * width) of one axis, so no element
    of one thread can contain another thread's. Returns (start, end) on that axis, and the
    sorted distinct times with the width: a position x on the axis is time ``times[x % width]``."""
    n = len(start)
    times, rank = unique(np.concatenate([start, end]), return_inverse=True)
    width = len(times) + 1
    shift = (np.cumsum(run_starts(pid, tid)) - 1) * width
    return shift + rank[:n], shift + rank[n:], times, width


def native() -> bool:
    """Whether the C sweep is there and not turned off (``TRACEKIT_NATIVE=0``)."""
    return _nesting is not None and os.environ.get("TRACEKIT_NATIVE", "1") != "0"


def sweep_native(pid, tid, start, end, is_range, flags, order=None):
    """:func:`sweep_loop`, run in C (``tracekit.pipeline._nesting``): the same stack sweep over the same
    order, with no Python object per element."""
    n = len(start)
    order = sweep_order(pid, tid, start, end, is_range) if order is None else order
    ins = [np.ascontiguousarray(x, np.int64) for x in (order, pid, tid, start, end)]
    out = [np.empty(n, np.int64) for _ in range(6)]
    rng = np.ascontiguousarray(is_range, bool)
    _nesting.sweep(*ins, rng, np.ascontiguousarray(flags, np.int64), *out)
    return tuple(out)


def sweep(pid, tid, start, end, is_range, flags, order=None):
    """Same result as :func:`sweep_loop`: in C where built (:func:`sweep_native`), else
    :func:`sweep_numpy`. ``order``: :func:`sweep_order` of the elements, when known."""
    if native():
        return sweep_native(pid, tid, start, end, is_range, flags, order)
    return sweep_numpy(pid, tid, start, end, is_range, flags, order)


def sweep_numpy(pid, tid, start, end, is_range, flags, order=None):
    """Same result as :func:`sweep_loop`, vectorised where each thread's ranges nest properly.

    Memory: the per-level context arrays hold sorted positions, as int32 when they fit, and
    every temporary is dropped as soon as it is used (the sweep of a 1 GB trace runs over
    about a million elements, so each int64 column is 8 MB)."""
    n = len(start)
    order = sweep_order(pid, tid, start, end, is_range) if order is None else order
    R = is_range[order]
    F = np.where(R, flags[order], 0)
    depth, parent, proper = _sorted_parents(pid[order], tid[order], start[order], end[order], R)
    del R
    if not proper:
        return sweep_loop(pid, tid, start, end, is_range, flags, order)
    inherited = _flow_down(depth, parent, F)
    del depth, parent, F
    out = []
    for x in inherited[:5]:  # sorted positions -> input indices
        o = np.empty(n, np.int64)
        o[order] = np.where(x >= 0, order[np.maximum(x, 0)], -1)
        out.append(o)
    bits = np.empty(n, np.int64)
    bits[order] = inherited[5]
    return (*out, bits)


def _sorted_parents(pid, tid, start, end, R):
    """Depth, parent and properness of the sorted elements (:func:`_thread_parents`), every
    thread on one axis."""
    axis = _shifted_axis(pid, tid, start, end)
    S, E = axis if axis is not None else _one_axis(pid, tid, start, end)[:2]
    del pid, tid, start, end, axis
    return _thread_parents(S, E, R & (E > S))


def _flow_down(depth, parent, F):
    """The context inherited by each sorted element: (op, top, mod, bwd, comm) as sorted
    positions (-1 none) and the inherited bits, flowing down one depth level at a time.

    Only the ranges something nests in go level by level (their own context is what their
    children inherit); every other element (launches, leaf ops: most of them) then takes its
    parent's own context in one gather."""
    n = len(depth)
    pos = np.int32 if n < np.iinfo(np.int32).max else np.int64
    inh = [np.full(n, -1, pos) for _ in range(5)] + [np.zeros(n, np.int32)]
    own = [np.full(n, -1, pos) for _ in range(5)] + [np.zeros(n, np.int32)]
    in_op, in_top, in_mod, in_bwd, in_comm, in_bits = inh
    self_op, self_top, self_mod, self_bwd, self_comm, self_bits = own
    is_parent = np.zeros(n, bool)
    is_parent[parent[parent >= 0]] = True
    ranges = np.flatnonzero(is_parent)
    by_level = ranges[_by_small_key(depth[ranges])]
    cuts = np.flatnonzero(np.diff(depth[by_level])) + 1
    for K in np.split(by_level, cuts) if by_level.size else []:
        K = K.astype(pos, copy=False)
        p = parent[K]
        has = p >= 0
        if has.any():
            pk = p[has]
            Kh = K[has]
            for i, s in zip(inh, own):
                i[Kh] = s[pk]
        f = F[K]
        is_mod = (f & F_MODULE) != 0
        is_op = (f & F_OP) != 0
        is_bwd = (f & F_BWD) != 0
        self_mod[K] = np.where(is_mod, K, in_mod[K])
        top = np.where(is_mod, -1, in_top[K])
        self_top[K] = np.where(is_op & (top == -1), K, top)
        self_op[K] = np.where(is_op, K, in_op[K])
        self_bwd[K] = np.where(is_bwd, K, in_bwd[K])
        self_comm[K] = np.where((f & F_COMM) != 0, K, in_comm[K])
        bits = in_bits[K] | np.where(is_mod, MOD_IN_BWD, 0)
        bits = np.where(is_bwd, bits & ~MOD_IN_BWD, bits)
        self_bits[K] = bits | (f & _INHERITED)
    leaf = np.flatnonzero(~is_parent & (parent >= 0))
    pk = parent[leaf]
    for i, s in zip(inh, own):
        i[leaf] = s[pk]
    return inh


def own_context(flags, op, top, mod, bwd, comm, bits):
    """The context a range gives what runs inside it: its enclosing context (the sweep's result
    for the range) with the range itself pushed, exactly as :func:`sweep_loop` pushes it.
    Index k is row k of the range table; returns (op, top, mod, bwd, comm, bits)."""
    k = np.arange(len(flags), dtype=np.int64)
    is_mod, is_op = (flags & F_MODULE) != 0, (flags & F_OP) != 0
    is_bwd = (flags & F_BWD) != 0
    top = np.where(is_mod, -1, top)
    top = np.where(is_op & (top == -1), k, top)
    bits = bits | np.where(is_mod, MOD_IN_BWD, 0)
    bits = np.where(is_bwd, bits & ~MOD_IN_BWD, bits) | (flags & _INHERITED)
    return (
        np.where(is_op, k, op),
        top,
        np.where(is_mod, k, mod),
        np.where(is_bwd, k, bwd),
        np.where((flags & F_COMM) != 0, k, comm),
        bits,
    )
