"""Small helpers shared by the table modules."""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TypeVar

import numpy as np
import pandas as pd

from tracekit.pipeline.intervals import measure, measure_by
from tracekit.pipeline.state import categorical_take, codes_of
from tracekit.pipeline.windows import Windows

T = TypeVar("T")

NS_PER_MS = 1e6
PHASES = ["forward", "backward", "optimizer"]
#: Every phase window of a step, in time order: the paper's phases and the tail with no
#: phase evidence (``unattributed``), which tables show only where a rank has some.
WINDOW_PHASES = ["forward", "backward", "unattributed", "optimizer"]


def text(col: pd.Series, replace: dict[str, str] | None = None) -> pd.Categorical:
    """``col.astype(str).replace(replace)`` as a categorical of str (categories sorted, so
    group order is that of the strings), computed once per distinct value: tables build and
    group their frames on it, then turn the few result rows to str (:func:`as_text`)."""
    same = _sorted_categorical(col, replace)
    if same is not None:
        return same
    codes, uniq = codes_of(col)
    if replace:
        uniq = np.array([replace.get(u, u) for u in uniq], dtype=object)
    return categorical_take(uniq, codes, np.arange(len(codes)), "")


def _sorted_categorical(col: pd.Series, replace: dict[str, str] | None) -> pd.Categorical | None:
    """:func:`text` of a categorical column of str with no missing value and no used category
    that ``replace`` rewrites (the interval table's label columns), from its codes: the used
    categories, sorted, with the codes remapped (no row's string is converted or hashed). The
    column itself when that changes nothing; None for any other column."""
    dtype = col.dtype
    if not isinstance(dtype, pd.CategoricalDtype) or dtype.ordered or dtype.categories.dtype != _STR:
        return None
    codes = col.array.codes
    if len(col) == 0 or (codes < 0).any():  # empty, or a missing value
        return None
    used = np.flatnonzero(np.bincount(codes, minlength=len(dtype.categories)))
    kept = np.asarray(dtype.categories, dtype=object)[used]
    if replace and any(k in replace for k in kept):
        return None
    order = np.argsort(kept, kind="stable")
    if len(used) == len(dtype.categories) and (order == np.arange(len(order))).all():
        return col.array
    remap = np.full(len(dtype.categories), -1, np.intp)
    remap[used[order]] = np.arange(len(used))
    return pd.Categorical.from_codes(remap[codes], categories=dtype.categories[used[order]], validate=False)


#: The dtype pandas gives an Index of str (pandas 3: arrow-backed ``str``).
_STR = pd.Index(["x"]).dtype


def as_text(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    """The (few) result rows' label columns back as str, as tables give them."""
    for c in cols:
        if c in df.columns and isinstance(df[c].dtype, pd.CategoricalDtype):
            cat = df[c].array
            if len(cat) and (cat.codes >= 0).all():  # each category converted once, then taken
                df[c] = cat.categories.astype(str).take(cat.codes).array
            else:
                df[c] = df[c].astype(str)
    return df


def text_index(idx: pd.Index) -> pd.Index:
    """A (Multi)Index grouped on categoricals, with its levels as str (the labels of the few
    result rows)."""
    if isinstance(idx, pd.MultiIndex):
        levels = [lv.astype(str) if isinstance(lv, pd.CategoricalIndex) else lv for lv in idx.levels]
        return idx.set_levels(levels)
    return idx.astype(str) if isinstance(idx, pd.CategoricalIndex) else idx


def narrow(intervals: pd.DataFrame, columns: list[str], mask: np.ndarray | None = None) -> pd.DataFrame:
    """The intervals' ``columns`` (those it has), on the rows of ``mask``: a table picks rows of
    the few columns it reads, never of the whole interval table (selecting rows of its ~45
    columns, each its own block, costs ten times more). All rows: the table itself."""
    if mask is None or mask.all():
        return intervals
    cols = [c for c in columns if c in intervals.columns]
    if len(set(cols)) < len(cols) or np.asarray(mask).dtype != bool:
        return intervals[cols][mask]
    # Each column's array masked, the frame built once (a third of selecting the columns,
    # then masking their frame); the rows keep their labels, as the selection does.
    return pd.DataFrame({c: _values(intervals[c])[mask] for c in cols}, index=intervals.index[mask])


def _values(col: pd.Series):
    """The column's values of its dtype: a numpy array, or its extension array."""
    return col.to_numpy() if isinstance(col.dtype, np.dtype) else col.array


def sums(frame: pd.DataFrame, keys, named: dict[str, str], **groupby) -> pd.DataFrame:
    """``frame.groupby(keys, **groupby).agg(name=(column, "sum"), ...)`` for ``named``
    (name -> column), as one sum over the columns: pandas parses a named aggregation at a
    cost close to the sum's."""
    out = frame.groupby(keys, **groupby)[list(named.values())].sum()
    out.columns = list(named)
    return out


def labelled_spans(intervals: pd.DataFrame, mask: np.ndarray | None = None) -> pd.DataFrame:
    """``step``, ``phase`` (:func:`text`), ``start``, ``end`` of the intervals (of ``mask``):
    the narrow frame the union measures group."""
    m = slice(None) if mask is None else mask
    return pd.DataFrame(
        {
            "step": intervals["step"].to_numpy()[m],
            "phase": text(intervals["phase"])[m],
            "start": intervals["start"].to_numpy()[m],
            "end": intervals["end"].to_numpy()[m],
        }
    )


def at(series: pd.Series, keys) -> np.ndarray:
    """``series.reindex(keys).fillna(0.0).to_numpy()`` of a float series with unique labels
    (a group-by's result), for ``keys`` an iterable of labels (tuples for a MultiIndex), by
    one dict: reindexing on a MultiIndex builds hash engines for both sides, milliseconds for
    the few rows of a per-step table."""
    keys = list(keys)
    if series.dtype.kind != "f":
        out = series.reindex(pd.Index(keys)).fillna(0.0).to_numpy()
        # an empty group-by (no activity at all: every duration 0) is of dtype object
        return out.astype(float) if out.dtype == object else out
    found = dict(zip(series.index, series.to_numpy()))
    out = np.fromiter((found.get(k, np.nan) for k in keys), dtype=float, count=len(keys))
    out[np.isnan(out)] = 0.0
    return out


def ms(ns) -> float:
    return float(ns) / NS_PER_MS


def union_ms(frame: pd.DataFrame) -> float:
    """Measure of the union of the frame's [start, end) intervals, in ms."""
    if frame.empty:
        return 0.0
    return ms(measure(frame["start"].to_numpy(), frame["end"].to_numpy()))


def union_ms_by(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Measure (ms) of the union of ``[start, end)`` intervals per group of ``keys``."""
    out = measure_by(frame, keys) / NS_PER_MS
    out.index = text_index(out.index)
    return out


def largest_first(
    df: pd.DataFrame, value: str, groups: tuple[str, ...] = ("rank", "step"), columns: list[str] | None = None
) -> pd.DataFrame:
    """``df`` in the order of its ``groups`` columns (those it has), each group's rows by
    ``value``, largest first (ties keep their order); ``columns``: the columns shown, in order,
    after ``rank`` (those it has)."""
    return largest_first_of(df, {}, value, groups, columns)


def largest_first_of(
    df: pd.DataFrame,
    new: dict[str, np.ndarray],
    value: str,
    groups: tuple[str, ...] = ("rank", "step"),
    columns: list[str] | None = None,
) -> pd.DataFrame:
    """:func:`largest_first` of ``df`` with the columns ``new`` set (a finish's ratios), on the
    columns' arrays: one stable sort (descending ``value``: its negation, NaN still last) and
    the frame built once (:func:`~._frames.rebuilt`)."""
    from ._frames import rebuilt, stable_order

    by = [df[c].to_numpy() for c in groups if c in df.columns]
    v = np.asarray(new[value]) if value in new else df[value].to_numpy()
    order = stable_order([*by, -v], len(df)) if v.dtype.kind in "if" else None
    names = [*df.columns, *(c for c in new if c not in df.columns)]
    if order is None:  # a value that cannot be negated: pandas' sort
        out = df.assign(**new).sort_values(
            [c for c in groups if c in df.columns] + [value],
            ascending=[True] * len(by) + [False],
            kind="stable",
        )
        order, df, new = np.arange(len(out)), out, {}
    shown = names if columns is None else [c for c in ("rank", *columns) if c in names]
    return rebuilt(df, new, order, shown)


def once_per_table(build: Callable[[pd.DataFrame], T]) -> Callable[[pd.DataFrame], T]:
    """``build`` computed once per interval table: the value is kept while that table lives (a
    weak reference per table), so the tables that read it share one computation, whatever the
    order they are asked in (table by table over many ranks in memory, or rank by rank).
    Callers only read the value."""
    held: dict[int, tuple[weakref.ref, T]] = {}

    @functools.wraps(build)
    def cached(intervals: pd.DataFrame) -> T:
        key = id(intervals)
        got = held.get(key)
        if got is not None and got[0]() is intervals:
            return got[1]
        value = build(intervals)

        def forget(_ref: weakref.ref, k: int = key) -> None:
            held.pop(k, None)

        held[key] = (weakref.ref(intervals, forget), value)
        return value

    return cached


@once_per_table
def window_shares(intervals: pd.DataFrame) -> pd.DataFrame:
    """Long frame of each activity's share (ms) in each phase window: step, phase (the window),
    group, module, recompute (activation recomputation), share_ms. Rows with no share are
    dropped. Computed once per interval table (the phases and modules tables both read it)."""
    group, module = text(intervals["group"]), text(intervals["module"])
    recompute, step = _recompute(intervals), intervals["step"].to_numpy()
    phases = sorted(WINDOW_PHASES)  # categories in string order: groups sort as the strings
    rows, codes, share = [], [], []  # per window phase with shares: its rows, built as one frame
    for ph in WINDOW_PHASES:
        col = intervals[share_column(ph)].to_numpy()
        keep = np.flatnonzero(col > 0)
        if not len(keep):
            continue
        rows.append(keep)
        codes.append(np.full(len(keep), phases.index(ph)))
        share.append(col[keep] / NS_PER_MS)
    if not rows:
        return pd.DataFrame(columns=["step", "phase", "group", "module", "recompute", "share_ms"])
    at = np.concatenate(rows)
    return pd.DataFrame(
        {
            "step": step[at],
            "phase": pd.Categorical.from_codes(np.concatenate(codes), categories=phases),
            "group": group.take(at),
            "module": module.take(at),
            "recompute": recompute[at],
            "share_ms": np.concatenate(share),
        }
    )


def _recompute(iv: pd.DataFrame) -> np.ndarray:
    if "recompute" not in iv:
        return np.zeros(len(iv), bool)
    return iv["recompute"].to_numpy(bool)


def percent(part, whole) -> np.ndarray:
    part = np.asarray(part, dtype=float)
    whole = np.asarray(whole, dtype=float)
    return np.divide(part * 100.0, whole, out=np.zeros(np.broadcast(part, whole).shape), where=whole > 0)


def phases_present(intervals: pd.DataFrame, windows: Windows) -> list[str]:
    """The phases a rank's tables show: the paper's three, and ``unattributed`` where some
    activity has that label or some complete step has an unattributed window."""
    has = _unattributed_window(windows) or bool((intervals["phase"] == "unattributed").any())
    return WINDOW_PHASES if has else PHASES


def _unattributed_window(windows: Windows) -> bool:
    """``windows.has_unattributed()`` on the phase windows' arrays (a fifth of its cost: the
    Series arithmetic and masking of a few rows is most of it)."""
    p = windows.phases
    width = p["hi"].to_numpy() - p["lo"].to_numpy()
    return bool((width[p["phase"].to_numpy() == "unattributed"] > 0).any())


def share_column(phase: str) -> str:
    return f"share_{phase}"
