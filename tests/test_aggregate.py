"""mean_over_steps (tracekit/aggregate.py): the means of a table whose keys are unique, computed
without a group-by, equal the group-by's exactly (values, dtypes, NaN and -0.0, inference
stages), on planted tables and on every table of real single- and multi-step traces."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from golden import sources
from shared_traces import param
from tracekit.analyses import REGISTRY

import tracekit
from tracekit import aggregate
from tracekit.strings import python_strings


def _both(monkeypatch, df: pd.DataFrame, n: int, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    fast = aggregate.mean_over_steps(df, n, keys)
    with monkeypatch.context() as m:
        m.setattr(aggregate, "_one_row_per_key", lambda *a: None)
        m.setattr(aggregate, "_by_first_rows", lambda *a, **k: None)  # pandas' own group-by
        slow = aggregate.mean_over_steps(df, n, keys)
    return fast, slow


def _same(fast: pd.DataFrame, slow: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(fast, slow, check_exact=True)
    assert list(fast.dtypes) == list(slow.dtypes)
    assert np.array_equal(
        np.signbit(fast.select_dtypes("number").to_numpy(float)),
        np.signbit(slow.select_dtypes("number").to_numpy(float)),
    )


@pytest.mark.parametrize("n_steps", [0, 1, 3])
def test_unique_keys_without_a_group_by(monkeypatch, n_steps):
    df = pd.DataFrame(
        {
            "step": [1, 1, 2, 2],
            "stage": pd.Categorical(["decode", "prefill", "decode", "decode"]),
            "phase": pd.Categorical(["forward", "forward", "forward", "backward"]),
            "name": pd.array(["a", "b", "e", "c"], dtype="str"),
            "ms": [0.1, float("nan"), -0.0, 2.5],
            "count": np.array([1, 2, 3, 4], np.int64),
            "hit": [True, False, True, True],
        }
    )
    for frame in (df, df.drop(columns=["stage"])):
        for keys in (["phase", "name"], ["name", "phase"]):
            assert aggregate._one_row_per_key(frame, *_split(frame, keys), n_steps) is not None
            _same(*_both(monkeypatch, frame, n_steps, keys))


def _split(df: pd.DataFrame, keys: list[str]) -> tuple[list[str], list[str]]:
    keys = (["stage"] if "stage" in df.columns else []) + keys
    return keys, [c for c in df.columns if c not in keys and c != "step"]


def test_repeated_or_missing_keys_take_the_group_by(monkeypatch):
    df = pd.DataFrame({"step": [1, 2], "phase": ["forward", "forward"], "ms": [1.0, 2.0]})
    assert aggregate._one_row_per_key(df, ["phase"], ["ms"], 2) is None
    df = pd.DataFrame({"step": [1, 1], "phase": ["forward", None], "ms": [1.0, 2.0]})
    assert aggregate._one_row_per_key(df, ["phase"], ["ms"], 1) is None
    _same(*_both(monkeypatch, df, 1, ["phase"]))


@pytest.mark.parametrize(
    "src", [param(s, s.name) for s in sources() if "decode" in s.name or "rank-0" in s.name][:3]
)
def test_every_table_of_real_traces(monkeypatch, tmp_path, src):
    dst = tmp_path / src.name
    (shutil.copytree if src.is_dir() else shutil.copy)(src, dst)
    a = tracekit.load(dst, cache=False, jobs=1)
    with python_strings():  # the private tables are computed as the API computes them
        for rank in a.ranks:
            for name, spec in REGISTRY.items():
                if not spec.of_intervals:
                    continue
                df = a._per_step(name, rank)
                _same(*_both(monkeypatch, df, a._n_steps(a.ranks[rank]), list(spec.keys)))


def test_at_is_reindex_then_zero_fill():
    """analyses._common.at (the tables' lookup of a group-by's sums at the rows they report)
    equals ``reindex(keys).fillna(0.0)``: absent keys and NaN sums read 0.0, for a MultiIndex
    of (step, phase) as the tables build it, and for an int series (the pandas path)."""
    from tracekit.analyses._common import at

    s = pd.Series(
        [1.5, np.nan, -0.0], index=pd.MultiIndex.from_tuples([(1, "forward"), (1, "backward"), (2, "x")])
    )
    keys = [(1, "backward"), (np.int64(2), "x"), (3, "forward"), (1, "forward")]
    want = s.reindex(pd.MultiIndex.from_tuples(keys)).fillna(0.0).to_numpy()
    got = at(s, keys)
    assert got.dtype == want.dtype and np.array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
    ints = pd.Series([3, 4], index=pd.Index([10, 11]))
    np.testing.assert_array_equal(at(ints, [11, 12]), ints.reindex([11, 12]).fillna(0.0).to_numpy())
