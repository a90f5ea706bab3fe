"""A critical-path piece with no label takes the next labelled piece's of its step
(tracekit.pipeline.critical_pieces._fill_back): looking only at the missing rows gives what
the scan of every row gave (the reference below) on random codes and steps."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline.critical_pieces import _fill_back


def _scan(code: np.ndarray, step: np.ndarray) -> np.ndarray:
    n = len(code)
    at = np.where(code >= 0, np.arange(n), n)
    nxt = np.minimum.accumulate(at[::-1])[::-1] if n else at
    ok = nxt < n
    ok[ok] &= step[nxt[ok]] == step[ok]
    return np.where(code >= 0, code, np.where(ok, code[np.minimum(nxt, max(n - 1, 0))], 0))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 40), missing=st.floats(0, 1))
def test_fill_back_is_the_scan(seed, n, missing):
    rng = np.random.default_rng(seed)
    code = np.where(rng.random(n) < missing, -1, rng.integers(0, 5, n)).astype(np.int64)
    step = np.sort(rng.integers(0, 4, n))
    got = _fill_back(code.copy(), step)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, _scan(code, step))
