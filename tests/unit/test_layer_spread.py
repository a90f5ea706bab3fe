"""analyses.layers.spread: the spread across layers is what a loop over pandas' groups gives,
float for float (group order, means, the slowest layer at ties), on random layer tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracekit.analyses.layers import _groups, spread


def _by_loop(layers: pd.DataFrame) -> pd.DataFrame:
    """The rule as first written: one pandas group at a time."""
    groups = _groups(layers)
    cols = groups + ["layers", "mean_ms", "min_ms", "max_ms", "slowest_layer", "slowest_over_mean_pct"]
    if layers.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    for key, g in layers.groupby(groups, observed=True, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        t = g["time_ms"].to_numpy(dtype=float)
        mean = float(t.mean())
        rows.append(
            {
                **dict(zip(groups, key)),
                "layers": len(g),
                "mean_ms": mean,
                "min_ms": float(t.min()),
                "max_ms": float(t.max()),
                "slowest_layer": int(g["layer"].iloc[int(np.argmax(t))]),
                "slowest_over_mean_pct": (float(t.max()) / mean - 1) * 100 if mean > 0 else 0.0,
            }
        )
    return pd.DataFrame(rows, columns=cols)


def _layers(rng: np.random.Generator, n: int, with_rank: bool, with_step: bool) -> pd.DataFrame:
    phases = ["forward", "backward", "optimizer", "unused"]
    df = pd.DataFrame(
        {
            "phase": pd.Categorical(rng.choice(phases[:3], n), categories=phases),
            "layer": rng.integers(0, 40, n).astype(np.int64),
            # repeated values make ties for the slowest; zeros make zero means
            "time_ms": rng.choice([0.0, 0.1, 0.3, 1 / 3, 2.5, 1e-9, 7e5], n) * rng.integers(0, 3, n),
        }
    )
    if with_step:
        df.insert(0, "step", rng.integers(0, 4, n).astype(np.int64))
    if with_rank:
        df.insert(0, "rank", rng.integers(0, 9, n).astype(np.int64))
    if n and rng.random() < 0.3:
        df.loc[rng.random(n) < 0.1, "phase"] = np.nan  # a row with no group
    return df


def test_spread_is_the_loop_over_groups():
    rng = np.random.default_rng(11)
    for case in range(300):
        n = int(rng.integers(0, 200))
        df = _layers(rng, n, with_rank=case % 2 == 0, with_step=case % 3 == 0)
        want, got = _by_loop(df), spread(df)
        pd.testing.assert_frame_equal(got, want, check_exact=True)
        assert list(got.dtypes) == list(want.dtypes)
