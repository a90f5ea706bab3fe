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
overlap without nesting, so the result is always the loop's.
"""

from __future__ import annotations

import numpy as np

# Flags of a range (bit values shared with link.py).
F_OP, F_MODULE, F_OPT, F_EVAL, F_BWD, F_COMM, F_ROPE = (1 << i for i in range(7))
#: Context bit: the innermost module range is nested inside the innermost backward node.
MOD_IN_BWD = 1 << 20
_INHERITED = F_OPT | F_EVAL | F_ROPE


def sweep_order(pid, tid, start, end, is_range) -> np.ndarray:
    return np.lexsort((~is_range, -end, start, tid, pid))


def sweep_loop(pid, tid, start, end, is_range, flags):
    """Reference stack sweep. Returns (op, top, mod, bwd, comm, bits) per element (input order)."""
    n = len(start)
    order = sweep_order(pid, tid, start, end, is_range)
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
    closed = np.searchsorted(np.sort(e[cand]), s, side="right")
    depth = (before - closed).astype(np.int64)
    parent = np.full(m, -1, np.int64)
    has = depth > 0
    if has.any():
        cpos = np.flatnonzero(cand)
        comp = np.sort(depth[cpos] * m + cpos)
        q = (depth[has] - 1) * m + np.flatnonzero(has)
        at = np.searchsorted(comp, q) - 1
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


def sweep(pid, tid, start, end, is_range, flags):
    """Same result as :func:`sweep_loop`, vectorised where each thread's ranges nest properly."""
    n = len(start)
    order = sweep_order(pid, tid, start, end, is_range)
    P, T = pid[order], tid[order]
    S, E = start[order], end[order]
    R, F = is_range[order], np.where(is_range[order], flags[order], 0)
    cand = R & (E > S)
    depth = np.zeros(n, np.int64)
    parent = np.full(n, -1, np.int64)
    bounds = np.flatnonzero((P[1:] != P[:-1]) | (T[1:] != T[:-1])) + 1
    starts = np.concatenate([[0], bounds]) if n else np.zeros(0, np.int64)
    ends = np.concatenate([bounds, [n]]) if n else np.zeros(0, np.int64)
    for a, b in zip(starts.tolist(), ends.tolist()):
        d, p, proper = _thread_parents(S[a:b], E[a:b], cand[a:b])
        if not proper:
            return sweep_loop(pid, tid, start, end, is_range, flags)
        depth[a:b] = d
        parent[a:b] = np.where(p >= 0, p + a, -1)

    # Contexts flow down one depth level at a time (sorted positions).
    in_op, in_top, in_mod, in_bwd, in_comm = (np.full(n, -1, np.int64) for _ in range(5))
    in_bits = np.zeros(n, np.int64)
    self_op, self_top, self_mod, self_bwd, self_comm = (np.full(n, -1, np.int64) for _ in range(5))
    self_bits = np.zeros(n, np.int64)
    by_level = np.argsort(depth, kind="stable")
    cuts = np.flatnonzero(np.diff(depth[by_level])) + 1
    for K in np.split(by_level, cuts) if n else []:
        p = parent[K]
        has = p >= 0
        if has.any():
            pk = p[has]
            Kh = K[has]
            in_op[Kh], in_top[Kh], in_mod[Kh] = self_op[pk], self_top[pk], self_mod[pk]
            in_bwd[Kh], in_comm[Kh], in_bits[Kh] = self_bwd[pk], self_comm[pk], self_bits[pk]
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

    def back(x):  # sorted positions -> input indices
        return np.where(x >= 0, order[np.maximum(x, 0)], -1)

    out = [np.empty(n, np.int64) for _ in range(6)]
    for o, x in zip(out[:5], (in_op, in_top, in_mod, in_bwd, in_comm)):
        o[order] = back(x)
    out[5][order] = in_bits
    return tuple(out)
