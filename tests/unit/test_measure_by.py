"""measure_by: the union's measure per group equals a per-group union, whatever the key types."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.intervals import measure, measure_by, unique


def _brute(frame: pd.DataFrame, keys: list[str]) -> dict:
    out = {}
    for key, g in frame.groupby(keys, observed=True):
        out[key] = measure(g["start"].to_numpy(), g["end"].to_numpy())
    return out


def test_measure_by_matches_per_group_union() -> None:
    rng = np.random.default_rng(7)
    n = 400
    start = rng.integers(1_700_000_000_000_000_000, 1_700_000_000_000_100_000, n)
    frame = pd.DataFrame(
        {
            "step": rng.integers(0, 4, n),
            "phase": pd.Categorical(rng.choice(["forward", "backward", "optimizer"], n)),
            "coll": rng.choice(np.array(["AllReduce", "AllGather", ""], dtype=object), n),
            "start": start,
            "end": start + rng.integers(0, 5_000, n),
        }
    )
    for keys in (["step"], ["step", "phase"], ["step", "phase", "coll"]):
        got = measure_by(frame, keys)
        want = _brute(frame, keys)
        assert got.dtype == np.int64 and list(got.index.names) == keys
        assert {(k if isinstance(k, tuple) else (k,)): v for k, v in got.items()} == {
            (k if isinstance(k, tuple) else (k,)): v for k, v in want.items()
        }
        assert list(got.index) == sorted(got.index)  # sorted by the keys, as a group-by sorts


def test_measure_by_leaves_out_missing_keys() -> None:
    frame = pd.DataFrame(
        {"phase": pd.Categorical(["a", None, "a"]), "start": [0, 0, 5], "end": [10, 100, 20]}
    )
    got = measure_by(frame, ["phase"])
    assert got.to_dict() == {"a": 20}


def test_unique_equals_numpy_unique() -> None:
    rng = np.random.default_rng(1)
    for n in (0, 1, 5, 1000):
        a = rng.integers(-5, 5, n)
        u, inv = unique(a, return_inverse=True)
        want, want_inv = np.unique(a, return_inverse=True)
        assert np.array_equal(u, want) and np.array_equal(inv, want_inv.ravel())
        assert np.array_equal(unique(a), want)


def test_merged_search_equals_searchsorted() -> None:
    from tracekit.pipeline.nesting import _merged_search

    rng = np.random.default_rng(0)
    for n in (0, 1, 10, 1000):
        a = np.sort(rng.integers(0, 50, n))
        for v in (np.sort(rng.integers(0, 50, n + 3)), rng.integers(0, 50, n + 3)):
            for side in ("left", "right"):
                assert np.array_equal(_merged_search(a, v, side), np.searchsorted(a, v, side=side))
