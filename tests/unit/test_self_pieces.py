"""Self time of nested CPU ops (tracekit.pipeline.nesting.self_pieces): the vectorised split equals the
reference sweep, and the pieces tile every thread's busy time exactly once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline.nesting import _pieces_loop, self_pieces


@st.composite
def nested(draw, improper: bool = False):
    """Per thread, a random forest of intervals nested properly (or, with ``improper``, some
    children outliving their parent), zero durations and identical intervals included."""
    pid, tid, s, e = [], [], [], []
    for th in range(draw(st.integers(1, 3))):

        def grow(lo: int, hi: int, depth: int) -> None:
            t = lo
            while t < hi and draw(st.booleans()):
                a = draw(st.integers(t, hi))
                b = draw(st.integers(a, hi))
                if improper and draw(st.integers(0, 5)) == 0:
                    b = b + draw(st.integers(1, 20))
                pid.append(th % 2), tid.append(th), s.append(a), e.append(b)
                if depth < 4:
                    grow(a, min(b, hi), depth + 1)
                t = b

        grow(0, 200, 0)
    arr = [np.asarray(x, np.int64) for x in (pid, tid, s, e)]
    perm = draw(st.permutations(range(len(s))))
    return [x[list(perm)] for x in arr]


def _coverage(owner, ps, pe, pid, tid):
    """(thread, ns) -> owner, failing when two pieces overlap."""
    seen = {}
    for o, a, b in zip(owner, ps, pe):
        for x in range(a, b):
            key = (pid[o], tid[o], x)
            assert key not in seen, "two pieces cover one instant"
            seen[key] = o
    return seen


@settings(max_examples=200, deadline=None)
@given(nested())
def test_pieces_tile_each_thread_and_go_to_the_innermost_op(data):
    pid, tid, s, e = data
    owner, ps, pe, first = self_pieces(pid, tid, s, e)
    cover = _coverage(owner, ps, pe, pid, tid)
    for (p, t, x), o in cover.items():  # the innermost (latest-started, shortest) open interval
        open_ = np.flatnonzero((pid == p) & (tid == t) & (s <= x) & (x < e))
        inner = open_[np.lexsort((e[open_], -s[open_]))][0]
        assert (s[o], e[o]) == (s[inner], e[inner])
    busy = {(p, t, x) for p, t, a, b in zip(pid, tid, s, e) for x in range(a, b)}
    assert set(cover) == busy
    assert np.bincount(owner[first], minlength=len(s)).tolist() == [1] * len(s)
    assert ((ps >= s[owner]) & (pe <= e[owner])).all()


@settings(max_examples=200, deadline=None)
@given(nested(improper=True))
def test_overlapping_ops_still_count_every_instant_once(data):
    pid, tid, s, e = data
    owner, ps, pe, first = self_pieces(pid, tid, s, e)
    cover = _coverage(owner, ps, pe, pid, tid)
    assert set(cover) == {(p, t, x) for p, t, a, b in zip(pid, tid, s, e) for x in range(a, b)}
    assert np.bincount(owner[first], minlength=len(s)).tolist() == [1] * len(s)


@settings(max_examples=200, deadline=None)
@given(nested())
def test_vectorised_split_equals_the_reference_sweep(data):
    pid, tid, s, e = data
    keep = (pid == pid[0]) & (tid == tid[0]) if len(s) else np.zeros(0, bool)
    s, e = s[keep], e[keep]
    order = np.lexsort((-e, s))
    owner, ps, pe, _ = self_pieces(np.zeros(len(s), np.int64), np.zeros(len(s), np.int64), s, e)
    ref_o, ref_s, ref_e = _pieces_loop(s[order], e[order])
    ref = sorted((int(order[o]), int(a), int(b)) for o, a, b in zip(ref_o, ref_s, ref_e) if b > a)
    got = sorted((int(o), int(a), int(b)) for o, a, b in zip(owner, ps, pe) if b > a)
    assert got == ref
