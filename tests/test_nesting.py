"""The vectorised enclosing-range sweep equals the reference stack sweep, on any input."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.nesting import sweep, sweep_loop


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
    a = sweep(*args)
    b = sweep_loop(*args)
    for x, y in zip(a, b):
        assert (x == y).all()


@settings(max_examples=300, deadline=None)
@given(elements(proper=True))
def test_vectorised_equals_loop_on_nested_ranges(args):
    _same(args)


@settings(max_examples=150, deadline=None)
@given(elements(proper=False))
def test_falls_back_to_loop_on_overlapping_ranges(args):
    _same(args)
