"""The per-step min/max of launch times (tracekit.pipeline.evidence._per_step), aggregated per
step number in place, is what sorting the activities by step gives (the sparse-steps path):
on random steps (-1 outside every step, gaps, one step), masks and extreme times."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.pipeline.evidence import _BEFORE_ALL, _NEVER, _per_step, _per_step_sorted


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 60),
    steps=st.integers(1, 8),
    spread=st.sampled_from([1, 3, 1000]),
    how=st.sampled_from(["min", "max"]),
    missing=st.sampled_from([_NEVER, _BEFORE_ALL, 0]),
)
def test_per_step_is_the_sorted_aggregate(seed, n, steps, spread, how, missing):
    rng = np.random.default_rng(seed)
    step = rng.integers(-1, steps, n) * spread
    ts = rng.integers(-(2**62), 2**62, n)
    ts[rng.random(n) < 0.2] = rng.choice([np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0])
    mask = rng.random(n) < rng.random()
    a = pd.DataFrame({"step": step, "launch_ts": ts})
    got = _per_step(a, mask, how, missing)
    want = _per_step_sorted(step, ts, mask, how, missing) if mask.any() else np.full(n, missing, np.int64)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
