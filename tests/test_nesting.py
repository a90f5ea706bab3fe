"""The vectorised and the C enclosing-range sweeps equal the reference stack sweep, on any input."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline import nesting
from tracekit.pipeline.nesting import sweep, sweep_loop, sweep_numpy


def _nested(draw, lo, hi, depth, out):
    """Random properly nested ranges inside [lo, hi)."""
    t = lo
    while t < hi and len(out) < 60:
        a = draw(st.integers(t, hi))
        b = draw(st.integers(a, hi))
        out.append((a, b))
        if depth < 4 and b - a > 1 and draw(st.booleans()):
            _nested(draw, a, b, depth + 1, out)
        t = b + draw(st.integers(0, 3))


@st.composite
def elements(draw, proper: bool):
    rows = []
    for tid in range(draw(st.integers(1, 3))):
        spans: list = []
        _nested(draw, 0, 200, 0, spans)
        if not proper:  # add ranges that overlap without nesting
            for _ in range(draw(st.integers(1, 4))):
                a = draw(st.integers(0, 190))
                spans.append((a, a + draw(st.integers(0, 60))))
        for a, b in spans:
            rows.append((1, tid, a, b, True, draw(st.integers(0, 127))))
        for _ in range(draw(st.integers(0, 30))):  # anchor points
            t = draw(st.integers(0, 200))
            rows.append((1, tid, t, t, False, 0))
    arr = list(zip(*rows)) if rows else [[]] * 6
    pid, tid, s, e, r, f = (np.array(x) for x in arr)
    return (
        pid.astype(np.int64),
        tid.astype(np.int64),
        s.astype(np.int64),
        e.astype(np.int64),
        r.astype(bool),
        f.astype(np.int64),
    )


def _same(args):
    b = sweep_loop(*args)
    forms = [sweep, sweep_numpy] + ([nesting.sweep_native] if nesting._nesting is not None else [])
    for form in forms:
        for x, y in zip(form(*args), b):
            assert x.dtype == np.int64 and (x == y).all()


@settings(max_examples=300, deadline=None)
@given(elements(proper=True))
def test_vectorised_equals_loop_on_nested_ranges(args):
    _same(args)


@settings(max_examples=150, deadline=None)
@given(elements(proper=False))
def test_falls_back_to_loop_on_overlapping_ranges(args):
    _same(args)


@pytest.mark.skipif(nesting._nesting is None, reason="the C sweep is not built here")
def test_native_rejects_bad_buffers():
    pid = np.zeros(3, np.int64)
    out = [np.empty(3, np.int64) for _ in range(6)]
    rng = np.ones(3, bool)
    with pytest.raises(ValueError, match="permutation"):
        nesting._nesting.sweep(np.array([0, 0, 1]), pid, pid, pid, pid, rng, pid, *out)
    with pytest.raises(ValueError, match="lengths"):
        nesting._nesting.sweep(np.arange(3), pid, pid, pid[:2], pid, rng, pid, *out)


def test_native_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TRACEKIT_NATIVE", "0")
    assert not nesting.native()


@pytest.mark.skipif(not os.environ.get("CI"), reason="a dev tree may predate tracekit/pipeline/_nesting.c")
def test_native_is_built_in_ci():
    """CI installs with ``pip install -e .``, which compiles it: the tests above then cover it."""
    assert nesting._nesting is not None, "tracekit.pipeline._nesting is not compiled: pip install -e ."


def test_sweep_order_is_the_five_key_lexsort():
    rng = np.random.default_rng(11)
    for n in (0, 1, 2, 50, 3000):
        pid, tid = rng.integers(0, 3, n), rng.integers(0, 4, n)
        start = rng.integers(0, 40, n)  # many ties in (pid, tid, start), and full ties
        end = start + rng.integers(0, 5, n)
        is_range = rng.random(n) < 0.7
        want = np.lexsort((~is_range, -end, start, tid, pid))
        assert np.array_equal(nesting.sweep_order(pid, tid, start, end, is_range), want)
