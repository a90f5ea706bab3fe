"""Group-by sums and union measures of a few groups, on arrays: pandas' own numbers without
its per-key groupers, result MultiIndex or reindexing (most of a small table's time).

:func:`flat_sums` and :func:`sums_at` sum with pandas over one array of the group numbers
pandas gives the groups (:func:`group_numbers`, :func:`numbered`), the columns selected as
pandas selects them: the same summation of the same rows, the same floats. :func:`union_ms_at`
measures each group's union on its group number (the same integers as ``measure_by``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.intervals import measure_by_key
from tracekit.pipeline.state import distinct_rows

from ._common import NS_PER_MS, at, sums, text_index, union_ms_by


def flat_sums(frame: pd.DataFrame, keys: list[str], named: dict[str, str], sort: bool = True) -> pd.DataFrame:
    """``sums(frame, keys, named, sort=sort, observed=True).reset_index()``, grouped on one
    array of group numbers found from the keys' integer codes (categorical or integer keys):
    pandas' sums themselves over pandas' own group numbers (:func:`numbered`; so the same
    summation of the rows in the same order, the same floats), without its per-key groupers
    and result MultiIndex (half a small table's time).
    Groups in order of first appearance, or (``sort``) of the keys' codes, as pandas orders
    them; the key columns keep their dtypes. Any other key, or a missing key: pandas'."""
    got = group_numbers(frame, keys, sort)
    cols = list(named.values())
    if got is None or len(set(cols)) < len(cols):
        return sums(frame, keys, named, sort=sort, observed=True).reset_index()
    group, first = got
    # The columns selected as pandas selects them (the same blocks: pandas picks the summation
    # per block, np.add.reduceat or its compensated sum when a value of the block is NaN).
    summed = grouped(frame[cols], group, "sum")
    out = {k: _take(frame[k], first) for k in keys}
    out.update({name: summed[i].to_numpy() for i, name in enumerate(named)})
    return pd.DataFrame(out)


def grouped(values: pd.DataFrame, group: np.ndarray, how: str, **kw) -> pd.DataFrame:
    """``values.groupby(group).<how>(**kw)`` with the columns labelled 0..n-1 (read by
    position): the same blocks and group numbers, so the same floats. Labelled so first:
    pandas looks a grouping array up among a frame's column labels, and an index of str
    formats the whole array into the error message it catches (0.4 ms for 300 rows); a
    RangeIndex raises with no message. Labels only: the blocks are the same."""
    values = values.set_axis(pd.RangeIndex(values.shape[1]), axis=1)
    return getattr(values.groupby(group), how)(**kw)


#: Per row its group's number, and per group its first row (:func:`group_numbers`).
Groups = tuple[np.ndarray, np.ndarray]


def sums_at(frame: pd.DataFrame, keys: list[str], cols: list[str], idx: list) -> dict[str, np.ndarray]:
    """Per column of ``cols``: ``at(s[col], idx)`` of ``s = frame.groupby(keys,
    observed=True)[cols].sum()`` (one column: of the column's group-by, a Series) with its
    index as :func:`text_index` (labels ``idx``: tuples of the keys' values, a categorical's
    as str), summed as :func:`flat_sums` sums (pandas' own group numbers and blocks) and read
    by a dict of the groups' labels."""
    got = group_numbers(frame, keys)
    if got is None:
        s = frame.groupby(keys, observed=True)[cols].sum()
        s.index = text_index(s.index)
        return {c: at(s[c], idx) for c in cols}
    group, first = got
    if len(cols) == 1:  # a Series' group-by looks nothing up
        summed = frame[cols[0]].groupby(group).sum().to_frame(0)
    else:
        summed = grouped(frame[cols], group, "sum")
    rows = {label: i for i, label in enumerate(zip(*(labels_of(frame[k], first) for k in keys)))}
    where = np.fromiter((rows.get(k, -1) for k in idx), dtype=np.intp, count=len(idx))
    out = {}
    for i, c in enumerate(cols):
        v = np.where(where >= 0, summed[i].to_numpy(dtype=float)[np.maximum(where, 0)], 0.0)
        v[np.isnan(v)] = 0.0
        out[c] = v
    return out


def group_numbers(frame: pd.DataFrame, keys: list[str], sort: bool = True) -> Groups | None:
    """``(group, first)``: per row the number of its group of ``keys`` as ``frame.groupby(keys,
    sort=sort, observed=True)`` numbers them (by first appearance, or by the keys' codes), and
    per group its first row; None where :func:`flat_sums` defers to pandas (a key neither
    categorical nor integer, a missing key, no rows)."""
    codes = _key_codes(frame, keys)
    return None if codes is None else numbered(codes, sort)


def numbered(codes: list[np.ndarray], sort: bool = True) -> Groups:
    """:func:`group_numbers` of integer key columns: the groups by first appearance, or
    (``sort``) by the keys' values, as pandas numbers a group-by's groups. The same numbers
    matter, not only the same groups: pandas sums groups whose numbers are sorted runs by
    ``np.add.reduceat`` and others by its compensated sum, which differ in the last bits."""
    group, first = distinct_rows(*codes)
    if sort:  # renumber the groups in the order of their keys' codes
        order = np.lexsort([c[first] for c in reversed(codes)])
        rank = np.empty(len(order), np.int64)
        rank[order] = np.arange(len(order))
        group, first = rank[group], first[order]
    return group, first


def _key_codes(frame: pd.DataFrame, keys: list[str]) -> list[np.ndarray] | None:
    """Per key, integers that group and sort as pandas groups the key (a categorical's codes,
    an integer column's values); None when a key is of another dtype, missing somewhere, or
    the frame is empty."""
    if frame.empty:
        return None
    out = []
    for k in keys:
        col = frame[k]
        if isinstance(col.dtype, pd.CategoricalDtype):
            c = col.array.codes
            if (c < 0).any():
                return None
        elif col.dtype.kind in "iub" and isinstance(col.dtype, np.dtype):
            c = col.to_numpy()
        else:
            return None
        out.append(c)
    return out


def _take(col: pd.Series, rows: np.ndarray):
    """The column's values at ``rows``, of its dtype (a categorical keeps its categories)."""
    return col.array.take(rows) if isinstance(col.dtype, pd.CategoricalDtype) else col.to_numpy()[rows]


def union_ms_at(frame: pd.DataFrame, keys: list[str], idx: list) -> np.ndarray:
    """``at(union_ms_by(frame, keys), idx)``: the measure (ms) of the union of each group's
    intervals at the labels ``idx`` (tuples of the keys' values, a categorical's as str), 0
    where a label has no rows: measured on the group numbers (:func:`measure_by_key`, the same
    integers), with no group-by index built or looked up."""
    got = group_numbers(frame, keys, sort=False)
    if got is None:
        return at(union_ms_by(frame, keys), idx)
    group, first = got
    ns = measure_by_key(group, frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64), len(first))
    labels = zip(*(labels_of(frame[k], first) for k in keys))
    found = dict(zip(labels, ns / NS_PER_MS))
    return np.fromiter((found.get(k, 0.0) for k in idx), dtype=float, count=len(idx))


def unions_ms_at(frame: pd.DataFrame, keys: list[str], idx: list, masks: list) -> list[np.ndarray]:
    """``[union_ms_at(frame[m], keys, idx) for m in masks]``, the groups numbered and labelled
    once over every row: each mask's rows measured per group (:func:`measure_by_key`, integer
    ns of each group's own rows: the same numbers), a group with no row in a mask 0 as an
    absent label."""
    got = group_numbers(frame, keys, sort=False)
    if got is None:
        return [union_ms_at(frame[m], keys, idx) for m in masks]
    group, first = got
    start, end = frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64)
    at = {label: i for i, label in enumerate(zip(*(labels_of(frame[k], first) for k in keys)))}
    where = np.fromiter((at.get(k, -1) for k in idx), dtype=np.intp, count=len(idx))
    out = []
    for m in masks:
        ms = measure_by_key(group[m], start[m], end[m], len(first)) / NS_PER_MS
        out.append(np.where(where >= 0, ms[np.maximum(where, 0)], 0.0))
    return out


def labels_of(col: pd.Series, rows: np.ndarray | None = None) -> list:
    """The column's values at ``rows`` as a group-by's labels read after :func:`text_index`
    (a categorical's as str)."""
    at = slice(None) if rows is None else rows
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = np.asarray(col.array.categories.astype(str), dtype=object)
        return cats[col.array.codes[at]].tolist()
    return col.to_numpy()[at].tolist()


def whole_sums(keys: list[np.ndarray], ns: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    """``s = pd.Series(ns).groupby(keys).sum()`` of integer ``keys`` and integers ``ns`` (>=
    0): per group, in the group-by's sorted order, each key's value (``s.index``'s levels) and
    its sum, on one integer key. pandas' integer sums are exact and so are these, counted in
    float64 while every sum is below 2**53 (else pandas' own, int64)."""
    lows = [int(k.min()) if len(k) else 0 for k in keys]
    sizes = [int(k.max()) - low + 1 if len(k) else 1 for k, low in zip(keys, lows)]
    inexact = len(ns) > 0 and (ns.min() < 0 or int(ns.sum()) >= 2**53)
    if not keys or inexact or np.prod(sizes, dtype=float) >= 2**62:
        s = pd.Series(ns).groupby(keys).sum()
        return [s.index.get_level_values(i).to_numpy() for i in range(len(keys))], s.to_numpy()
    key = np.zeros(len(ns), np.int64)
    for k, low, size in zip(keys, lows, sizes):  # the keys' values, in order: one integer
        key = key * size + (k.astype(np.int64) - low)
    code, uniq = pd.factorize(key, sort=True)
    total = np.bincount(code, weights=ns, minlength=len(uniq))
    out = []
    for k, low, size in zip(reversed(keys), reversed(lows), reversed(sizes)):
        out.append((uniq % size + low).astype(k.dtype))
        uniq = uniq // size
    return out[::-1], total
