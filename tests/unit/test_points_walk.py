"""A point set's context from the ranges' own (tracekit.pipeline.points.walked_points) is
exactly what the stack sweep of the ranges and the points together gives.

``walked_points`` finds each point's last range on its thread (a binary search in the ranges'
order) and walks the sweep's stack from there (``_nesting.walk``, parent links found once per
trace by ``_nesting.parents``) instead of sweeping every CPU range again per point set. The
reference is the full sweep (:func:`tracekit.pipeline.nesting.sweep_loop` over ranges and
points): on random inputs with many threads, ties, nested, equal, zero-length and overlapping
ranges, points before, at and after every range's ends, threads with no range, every flag.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline import nesting, points
from tracekit.pipeline.nest import CONTEXT
from tracekit.pipeline.state import Trace

pytestmark = pytest.mark.skipif(not nesting.native(), reason="the C sweep is not built here")


def _trace(pid, tid, start, end, flags, with_context: bool) -> Trace:
    t = Trace(path="x", events=pd.DataFrame())
    cols = {"pid": pid, "tid": tid, "start": start, "end": end, "flags": flags}
    if with_context:  # as the link step leaves them: each range's own enclosing context
        ctx = nesting.sweep_loop(pid, tid, start, end, np.ones(len(pid), bool), flags)
        cols.update(zip(CONTEXT + ("bits",), ctx))
    t.ranges = pd.DataFrame(cols)
    return t


def _reference(t: Trace, pid, tid, ts) -> dict[str, np.ndarray]:
    r = t.ranges
    n_r = len(r)
    ctx = nesting.sweep_loop(
        np.concatenate([r["pid"].to_numpy(), pid]),
        np.concatenate([r["tid"].to_numpy(), tid]),
        np.concatenate([r["start"].to_numpy(), ts]),
        np.concatenate([r["end"].to_numpy(), ts]),
        np.concatenate([np.ones(n_r, bool), np.zeros(len(ts), bool)]),
        np.concatenate([r["flags"].to_numpy(), np.zeros(len(ts), np.int64)]),
    )
    return {col: x[n_r:] for col, x in zip(CONTEXT + ("ctx_bits",), ctx)}


def _random(rng: np.random.Generator, n_r: int, n_p: int, threads: int, span: int):
    rp, rt = rng.integers(0, threads, n_r), rng.integers(0, threads, n_r)
    rs = rng.integers(0, span, n_r)
    re = rs + rng.integers(0, span // 2 + 1, n_r)  # zero-length, equal and overlapping ranges
    dup = rng.random(n_r) < 0.2  # some ranges equal to another one
    if n_r and dup.any():
        src = rng.integers(0, n_r, int(dup.sum()))
        rp[dup], rt[dup], rs[dup], re[dup] = rp[src], rt[src], rs[src], re[src]
    flags = rng.integers(0, 1 << 7, n_r)
    pp, pt = rng.integers(0, threads + 2, n_p), rng.integers(0, threads + 2, n_p)  # threads without ranges
    ps = rng.integers(-2, span + span // 2 + 2, n_p)  # before, inside and after every range
    at_ends = rng.random(n_p) < 0.4  # exactly at a range's start or end, on its thread
    if n_r and at_ends.any():
        src = rng.integers(0, n_r, int(at_ends.sum()))
        pp[at_ends], pt[at_ends] = rp[src], rt[src]
        ps[at_ends] = np.where(rng.random(src.size) < 0.5, rs[src], re[src])
    return (rp, rt, rs, re, flags), (pp, pt, ps)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_r=st.integers(0, 80),
    n_p=st.integers(0, 80),
    threads=st.integers(1, 5),
    span=st.integers(1, 40),
    with_context=st.booleans(),
)
def test_walked_points_are_the_sweep(seed, n_r, n_p, threads, span, with_context):
    (rp, rt, rs, re, flags), (pp, pt, ps) = _random(np.random.default_rng(seed), n_r, n_p, threads, span)
    t = _trace(rp, rt, rs, re, flags, with_context)
    got = points.walked_points(t, pp, pt, ps)
    assert got is not None
    want = _reference(t, pp, pt, ps)
    assert list(got) == list(want)
    for col in want:
        assert got[col].dtype == np.int64, col
        np.testing.assert_array_equal(got[col], want[col], err_msg=col)
    again = points.walked_points(t, pp[::-1].copy(), pt[::-1].copy(), ps[::-1].copy())  # unsorted points
    for col in want:
        np.testing.assert_array_equal(again[col], want[col][::-1], err_msg=col)


def test_deep_stacks_and_many_points():
    """Deeply nested ranges (every one ended before the points) and many points per gap."""
    rng = np.random.default_rng(7)
    n = 400
    start = np.arange(n, dtype=np.int64)
    end = 2 * n - start  # n nested ranges
    flags = rng.integers(0, 1 << 7, n)
    zeros = np.zeros(n, np.int64)
    t = _trace(zeros, zeros, start, end, flags, with_context=False)
    ps = rng.integers(0, 3 * n, 5000)
    pp = np.zeros(ps.size, np.int64)
    got = points.walked_points(t, pp, pp, ps)
    want = _reference(t, pp, pp, ps)
    for col in want:
        np.testing.assert_array_equal(got[col], want[col], err_msg=col)


def test_sweep_points_leaves_to_the_sweep_what_the_walk_cannot_do():
    """A range ending before it starts, float times: the full sweep decides (the same result)."""
    t = _trace(*(np.array(x) for x in ([1, 1], [1, 1], [5, 10], [20, 4], [1, 1])), with_context=False)
    p = np.array([1, 1])
    assert points.walked_points(t, p, p, np.array([10, 12])) is None
    assert points.walked_points(t, p, p, np.array([10.0, 12.0])) is None
    fine = _trace(*(np.array(x) for x in ([1], [1], [5], [20], [1])), with_context=False)
    assert points.walked_points(fine, p, p, np.array([10, 12])) is not None
    assert points.walked_points(fine, p, p, np.array([10, 12], np.uint64)) is None  # float compares
    got = points.sweep_points(t, p, p, np.array([10, 12]))
    want = _reference(t, p, p, np.array([10, 12]))
    for col in want:
        np.testing.assert_array_equal(got[col], want[col], err_msg=col)


def _walk(by, at, ts, order, parent, end, m_out=None):
    """``_nesting.walk`` over one-range inputs (flags and context of the ranges: zeros)."""
    n = len(order)
    ranges = [np.zeros(n, np.int64) for _ in range(7)]
    out = [np.empty(len(ts) if m_out is None else m_out, np.int64) for _ in range(6)]
    order, parent = np.asarray(order, np.int32), np.asarray(parent, np.int32)
    nesting._nesting.walk(by, at, ts, order, parent, end, *ranges, *out)
    return out


def test_the_walk_checks_its_input():
    """``_nesting.walk``/``parents`` refuse visiting orders, positions, links and lengths out
    of range, and give a good input's context."""
    one, zero = np.ones(1, np.int64), np.zeros(1, np.int64)
    assert [x[0] for x in _walk(zero, zero, one, zero, np.array([-1]), one)] == [
        -1,
        -1,
        -1,
        -1,
        -1,
        0,
    ]  # ended
    assert [x[0] for x in _walk(zero, zero, zero, zero, np.array([-1]), one)] == [0] * 6  # open: its frame
    with pytest.raises(ValueError):
        _walk(np.array([1]), zero, zero, zero, np.array([-1]), one)  # visiting order past the points
    with pytest.raises(ValueError):
        _walk(np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64), zero, np.array([-1]), one)
    with pytest.raises(ValueError):
        _walk(zero, np.array([1]), zero, zero, np.array([-1]), one)  # position past the ranges
    with pytest.raises(ValueError):
        _walk(zero, zero, zero, zero, np.array([0]), zero)  # a link not to an earlier position
    with pytest.raises(ValueError):
        _walk(zero, zero, zero, np.array([3]), np.array([-1]), zero)  # a row past the ranges
    with pytest.raises(ValueError):
        _walk(zero, zero, zero, zero, np.array([-1]), one, m_out=2)  # lengths differ
    with pytest.raises(ValueError):
        nesting._nesting.parents(
            np.array([0, 0], np.int32), *(np.zeros(2, np.int64) for _ in range(4)), np.empty(2, np.int32)
        )
