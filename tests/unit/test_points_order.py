"""The points' merged sweep order (tracekit.pipeline.points) is exactly the full sort's.

``merged_order`` inserts a point set into the CPU ranges' order, derived once per trace,
instead of sorting ranges and points together for each point set (memory events, idle gaps,
critical-path pieces). The sweep's result depends on that order, so it must be the same
permutation as ``sweep_order`` over the concatenation, ties included: ranges that start with a
point (longest first, zero-length ones too) come before it, equal points keep index order,
points on threads with no range are grouped by thread.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline import points
from tracekit.pipeline.nesting import sweep_order
from tracekit.pipeline.state import Trace


def _trace(pid, tid, start, end) -> Trace:
    t = Trace(path="x", events=pd.DataFrame())
    t.ranges = pd.DataFrame(
        {"pid": pid, "tid": tid, "start": start, "end": end, "flags": np.ones(len(pid), np.int64)}
    )
    return t


def _full(t: Trace, pid, tid, ts) -> np.ndarray:
    r = t.ranges
    return sweep_order(
        np.concatenate([r["pid"].to_numpy(), pid]),
        np.concatenate([r["tid"].to_numpy(), tid]),
        np.concatenate([r["start"].to_numpy(), ts]),
        np.concatenate([r["end"].to_numpy(), ts]),
        np.concatenate([np.ones(len(r), bool), np.zeros(len(ts), bool)]),
    )


def _random(rng: np.random.Generator, n_r: int, n_p: int, threads: int, span: int):
    rp, rt = rng.integers(0, threads, n_r), rng.integers(0, threads, n_r)
    rs = rng.integers(0, span, n_r)
    re = rs + rng.integers(0, span // 4 + 1, n_r)  # zero-length ranges included
    pp, pt = (
        rng.integers(0, threads + 2, n_p),
        rng.integers(0, threads + 2, n_p),
    )  # some threads without ranges
    ps = rng.integers(0, span, n_p)
    return (rp, rt, rs, re), (pp, pt, ps)


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_r=st.integers(0, 60),
    n_p=st.integers(0, 60),
    threads=st.integers(1, 4),
    span=st.integers(1, 30),
)
def test_merged_order_is_the_full_sort(seed, n_r, n_p, threads, span):
    (rp, rt, rs, re), (pp, pt, ps) = _random(np.random.default_rng(seed), n_r, n_p, threads, span)
    t = _trace(rp, rt, rs, re)
    got = points.merged_order(t, pp, pt, ps)
    assert got is not None
    np.testing.assert_array_equal(got, _full(t, pp, pt, ps))


def test_the_ranges_order_is_derived_once_and_reused():
    (rp, rt, rs, re), (pp, pt, ps) = _random(np.random.default_rng(1), 500, 200, 3, 1000)
    t = _trace(rp, rt, rs, re)
    first = points.merged_order(t, pp, pt, ps)
    plan = t.derived["range_order"][1]
    second = points.merged_order(t, pp[::-1].copy(), pt[::-1].copy(), ps[::-1].copy())
    assert t.derived["range_order"][1] is plan
    np.testing.assert_array_equal(first, _full(t, pp, pt, ps))
    np.testing.assert_array_equal(second, _full(t, pp[::-1], pt[::-1], ps[::-1]))


def test_a_range_ending_before_it_starts_leaves_the_order_to_the_full_sort():
    t = _trace(np.array([1, 1]), np.array([1, 1]), np.array([5, 10]), np.array([20, 4]))
    assert points.merged_order(t, np.array([1]), np.array([1]), np.array([10])) is None


def test_many_threads_leave_the_order_to_the_full_sort():
    n = points.MAX_MERGED_THREADS + 1
    t = _trace(np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64), np.ones(n, np.int64))
    assert points.merged_order(t, np.arange(n), np.zeros(n, np.int64), np.zeros(n, np.int64)) is None


def test_a_point_sets_context_columns_own_their_memory():
    """``sweep_points`` sweeps every CPU range with the points; each column it returns is the
    points' own array, not a slice that keeps the ranges' part of the sweep alive (35 MB on a
    1 GB trace for as long as the view lived), with the values the slice had."""
    from tracekit.pipeline import nesting

    rng = np.random.default_rng(3)
    (rp, rt, rs, re), (pp, pt, ps) = _random(rng, 500, 40, 3, 1000)
    t = _trace(rp, rt, rs, re)
    got = points.sweep_points(t, pp, pt, ps)
    r = t.ranges
    full = nesting.sweep(
        np.concatenate([rp, pp]),
        np.concatenate([rt, pt]),
        np.concatenate([rs, ps]),
        np.concatenate([re, ps]),
        np.concatenate([np.ones(len(r), bool), np.zeros(len(ps), bool)]),
        np.concatenate([r["flags"].to_numpy(), np.zeros(len(ps), np.int64)]),
    )
    for (name, col), want in zip(got.items(), full):
        assert col.base is None and col.flags.owndata, name
        assert len(col) == len(ps) and np.array_equal(col, want[len(r) :]), name
