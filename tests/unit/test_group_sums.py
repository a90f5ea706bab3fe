"""The group-by fast paths give pandas' own results, bit for bit, on random frames.

:func:`tracekit.aggregate.mean_over_steps` and ``mean_over_present`` group on one array of group
numbers (``_by_first_rows``), and :func:`analyses._groups.flat_sums` and ``sums_at`` on pandas'
own group numbers (:func:`analyses._groups.grouped`). pandas sums a block with
``np.add.reduceat`` where the group numbers come in sorted runs and the block has no NaN, and
with its compensated sum otherwise; the two differ in the last bits, so these frames mix sorted
and shuffled rows, NaN and -0.0, values of very different sizes, one row, unused categories and
missing keys (where the fast paths defer to pandas)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses._common import sums
from tracekit.analyses._groups import flat_sums, sums_at, text_index

from tracekit.aggregate import mean_over_present, mean_over_steps


def same(a: pd.DataFrame, b: pd.DataFrame, signed_zero: bool = True) -> None:
    """The same columns, dtypes, index and values; floats bit for bit (NaN where NaN, -0.0
    unless not ``signed_zero``)."""
    assert list(a.columns) == list(b.columns)
    assert list(a.dtypes) == list(b.dtypes)
    assert a.index.equals(b.index)
    for c in a.columns:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype.kind == "f":
            assert np.array_equal(x, y, equal_nan=True), c
            assert not signed_zero or (np.signbit(x) == np.signbit(y)).all(), c
        else:
            assert list(x) == list(y), c


def frame(rng: np.random.Generator, n: int, missing: bool) -> pd.DataFrame:
    """Per-step rows: integer, categorical (unused categories) and str keys; float (sizes
    1e-3 to 1e12, NaN, -0.0), integer and bool values; sorted or shuffled."""
    names = ["b", "a", "c", "d", "unused"]
    name = rng.choice(names[:4], n).astype(object)
    kind = rng.choice(["x", "y"], n).astype(object)
    if missing and n:
        (name if rng.random() < 0.5 else kind)[rng.integers(0, n)] = None
    big = rng.choice([1e-3, 1.0, 1e12], n) * rng.random(n)
    big[rng.random(n) < 0.1] = -0.0
    if rng.random() < 0.5:
        big[rng.random(n) < 0.2] = np.nan
    df = pd.DataFrame(
        {
            "step": rng.integers(0, 4, n),
            "name": pd.Categorical(name, categories=names),
            "kind": pd.array(kind, dtype="str"),
            "dev": rng.integers(0, 3, n),
            "dur": big,
            "other": rng.random(n) * 1e6,
            "count": rng.integers(0, 10, n),
            "flag": rng.random(n) < 0.5,
        }
    )
    if rng.random() < 0.5:
        df = df.sort_values(["step", "name", "kind", "dev"], kind="stable").reset_index(drop=True)
    return df


def cases():
    rng = np.random.default_rng(34)
    for i in range(120):
        n = int(rng.choice([1, 2, 3, 7, 50, 400]))
        yield frame(rng, n, missing=i % 5 == 0), rng


KEYS = [["name"], ["kind", "name"], ["dev"], ["name", "kind", "dev"]]


@pytest.mark.parametrize("keys", KEYS)
def test_mean_over_steps_is_pandas_group_by_mean(keys):
    for df, rng in cases():
        n_steps = int(rng.integers(1, 5))
        values = [c for c in df.columns if c not in keys and c != "step"]
        values = [c for c in values if c not in ("name", "kind")]
        df = df[["step", *keys, *values]]
        want = (df.groupby(keys, observed=True, sort=False)[values].sum(min_count=1) / n_steps).reset_index()
        # One row per key: computed with no group-by, which gives 0.0 for a sum of -0.0 where
        # pandas' np.add.reduceat keeps -0.0 (the output of c42c687 onwards; kept)
        alone = not df.duplicated(keys).any() and not df[keys].isna().any().any()
        same(mean_over_steps(df, n_steps, keys), want, signed_zero=not alone)


@pytest.mark.parametrize("keys", KEYS)
def test_mean_over_present_is_pandas_group_by_mean(keys):
    for df, _ in cases():
        values = [c for c in df.columns if c not in keys and c not in ("step", "name", "kind")]
        df = df[["step", *keys, *values]]
        want = df.groupby(keys, observed=True, sort=False)[values].mean().reset_index()
        same(mean_over_present(df, keys), want)


@pytest.mark.parametrize("sort", [True, False])
def test_flat_sums_is_pandas_named_sums(sort):
    named = {"time": "dur", "n": "count", "more": "other"}
    for df, _ in cases():
        for keys in (["step", "name"], ["step", "dev"], ["name"]):
            want = sums(df, keys, named, sort=sort, observed=True).reset_index()
            same(flat_sums(df, keys, named, sort=sort), want)


def test_sums_at_is_pandas_group_by_at_labels():
    for df, _ in cases():
        for cols in (["dur"], ["dur", "other", "count"]):
            s = df.groupby(["step", "name"], observed=True)[cols].sum()
            s.index = text_index(s.index)
            idx = [(st, nm) for st in range(5) for nm in ("a", "b", "d", "zz")]
            got = sums_at(df, ["step", "name"], cols, idx)
            for c in cols:
                want = s[c].reindex(pd.Index(idx)).fillna(0.0).to_numpy(dtype=float)
                assert np.array_equal(got[c], want) and (np.signbit(got[c]) == np.signbit(want)).all()


def _thinned_by_pandas(key: np.ndarray, lvl: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """memory_timeline's ``thinned`` as pandas computes it (cumcount, idxmin, idxmax)."""
    size = np.bincount(key)[key]
    slices = runs[key]
    keep = size <= 2 * slices
    if keep.all():
        return keep
    rank = pd.Series(np.zeros(len(key))).groupby(key).cumcount().to_numpy()
    run = np.concatenate(([0], np.cumsum(runs)[:-1]))[key] + rank * slices // size
    s = pd.Series(lvl)
    keep[s.groupby(run).idxmin().to_numpy()] = True
    keep[s.groupby(run).idxmax().to_numpy()] = True
    return keep


def test_memory_timeline_thinning_is_pandas_idxmin_idxmax():
    from tracekit.analyses.memory_timeline import thinned

    rng = np.random.default_rng(7)
    for i in range(300):
        n = int(rng.choice([1, 2, 5, 40, 300, 3000]))
        keys = int(rng.integers(1, 6))
        key = np.sort(rng.integers(0, keys, n)) if i % 2 else rng.integers(0, keys, n)
        key = pd.factorize(key)[0]  # numbered from 0 by first appearance, as the table's
        lvl = rng.choice([0.0, -0.0, 1.0, 2.0, 3.5], n) if i % 3 else rng.random(n) * 1e9
        if i % 7 == 0 and n > 1:
            lvl[rng.integers(0, n, max(1, n // 10))] = np.nan
            lvl[0] = 1.0  # no run only NaN (pandas' idxmin fails on one)
            lvl[key == key[0]] = np.where(np.isnan(lvl[key == key[0]]), 1.0, lvl[key == key[0]])
        runs = rng.integers(1, 20, int(key.max()) + 1)
        try:
            want = _thinned_by_pandas(key, lvl, runs)
        except ValueError:  # an all-NaN run: pandas fails, and so must the table
            with pytest.raises(ValueError):
                thinned(key, lvl, runs)
            continue
        assert (thinned(key, lvl, runs) == want).all()


def test_critical_timeline_order_is_the_lexsort():
    """critical_path_timeline ranks a step's pieces longest first (ties by start, then row) by
    one stable sort where the rows are by step and in time order: the lexsort's order."""
    from tracekit.analyses.critical_path_timeline import _longest_first

    rng = np.random.default_rng(11)
    for i in range(400):
        n = int(rng.choice([0, 1, 2, 9, 200, 2000]))
        step = np.sort(rng.integers(0, 4, n)) if i % 5 else rng.integers(0, 4, n)
        lo = rng.integers(0, 50, n) if i % 3 else rng.integers(0, 10**12, n)
        if i % 5:  # in time order within each step (most cases), ties in start
            lo = lo[np.lexsort((lo, step))]
        hi = lo + rng.choice([0, 1, 5, 10**9], n)
        first = np.flatnonzero(np.r_[True, step[1:] != step[:-1]]) if n else np.zeros(0, int)
        of = np.repeat(np.arange(len(first)), np.diff(np.r_[first, n]))
        assert (_longest_first(step, lo, hi, of) == np.lexsort((lo, -(hi - lo), step))).all()


def test_whole_sums_are_the_group_by_sums():
    """idle_causes and idle_host sum their pieces' integer lengths per integer key on one key
    (analyses._groups.whole_sums): the group-by's keys, order and sums (exact in float64
    below 2**53; -1 is a key like any other, as a categorical's code for a missing label)."""
    from tracekit.analyses._groups import whole_sums

    rng = np.random.default_rng(5)
    for i in range(200):
        n = int(rng.choice([0, 1, 3, 50, 5000]))
        keys = [rng.integers(0, 40, n), rng.choice([7, 3, 20, 1000], n), rng.integers(-1, 3, n)]
        keys = keys[: 1 + i % 3]
        ns = rng.integers(0 if i % 4 else 1, 10**15 if i % 10 == 0 else 10**7, n)
        sums = pd.Series(ns).groupby(keys).sum()
        got, total = whole_sums(keys, ns)
        for k in range(len(keys)):
            want = sums.index.get_level_values(k).to_numpy()
            assert got[k].dtype == want.dtype and (got[k] == want).all()
        assert np.array_equal(total / 1e6, sums.to_numpy() / 1e6)


def test_unions_under_masks_are_each_masks_union():
    """phases measures three unions (compute, comm, recompute) of its labelled spans with the
    groups numbered once (analyses._groups.unions_ms_at): each equals union_ms_at of the rows."""
    from tracekit.analyses._groups import union_ms_at, unions_ms_at

    rng = np.random.default_rng(3)
    for i in range(150):
        n = int(rng.choice([1, 2, 10, 300]))
        start = rng.integers(0, 10**6, n)
        frame = pd.DataFrame(
            {
                "step": rng.integers(0, 3, n),
                "phase": pd.Categorical(
                    rng.choice(["backward", "forward"], n), categories=["backward", "forward"]
                ),
                "start": start,
                "end": start + rng.integers(0, 10**5, n),
            }
        )
        idx = [(s, p) for s in range(4) for p in ("forward", "backward", "optimizer")]
        masks = [rng.random(n) < 0.5, np.zeros(n, bool), np.ones(n, bool)]
        for got, m in zip(unions_ms_at(frame, ["step", "phase"], idx, masks), masks):
            want = union_ms_at(frame[m], ["step", "phase"], idx)
            assert np.array_equal(got, want) and (np.signbit(got) == np.signbit(want)).all()
