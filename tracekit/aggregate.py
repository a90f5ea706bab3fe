"""Per-rank aggregation of per-step tables: the mean over complete steps, then the ratios.

:func:`mean_over_steps`: Needs: a per-step table (a ``step`` column) and the number of complete
steps. Adds: one row per key, the mean per step (rows absent from a step count as zero there;
inference ``stage`` rows are averaged over the steps that hold the stage).
:func:`derive_ratios`: Needs: a table per step or its mean, and the rank's windows. Adds:
every ratio column its spec declares (:class:`~tracekit.analyses._registry.Ratio`), from the
aggregated columns. Guarantees: a ratio column equals the ratio of the columns beside it in
every row, per step and for the mean (a percent is a ratio of means, never a mean of ratios).
:func:`whole_numbers`: Guarantees: index columns are int64; count and bytes columns are int64
per step and keep their fraction in a mean (count x mean duration = total, and a count never
reads 0 beside time).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyses import TableSpec
from tracekit.analyses._groups import grouped
from tracekit.analyses._registry import INDEX, INTEGER_UNITS, PHASE_WALL, STEP_WINDOW, Ratio
from tracekit.pipeline.state import distinct_rows
from tracekit.pipeline.windows import Windows


def mean_over_steps(df: pd.DataFrame, n_steps: int, keys: list[str] | None = None) -> pd.DataFrame:
    """Mean per step: rows absent from a step count as zero there, and so does a value a row
    leaves empty (NaN) in some steps; a value empty in every step that holds the row is unknown
    and stays empty (NaN: the time at peak of a trace with no shapes, never 0). ``keys``: the
    label columns (default: the non-numeric ones); rows of an inference ``stage`` are averaged
    over the steps that hold the stage."""
    if df.empty:
        return df.drop(columns=["step"], errors="ignore")
    numeric = {c: pd.api.types.is_numeric_dtype(t) for c, t in zip(df.columns, df.dtypes)}
    if keys is None:
        keys = [c for c in df.columns if c != "step" and not numeric[c]]
    keys = (["stage"] if "stage" in df.columns and "stage" not in keys else []) + [
        k for k in keys if k in df.columns
    ]
    # Text columns that are not keys (a label derived from the values, such as efficiency's
    # ``bound``) are not summed: the table's ``finish`` derives them again from the means.
    values = [c for c in df.columns if c not in keys and c != "step" and numeric[c]]
    if not keys:
        return df[values].sum(min_count=1).div(n_steps).to_frame().T
    groups = _groups(df, keys)
    if groups is None or len(groups[1]) == len(df):
        alone = _one_row_per_key(df, keys, values, n_steps, groups is not None)
        if alone is not None:
            return alone
    elif "stage" not in keys and len(keys) > 1:  # one key: pandas is as quick
        by_rows = _by_first_rows(df, keys, values, "sum", groups, n_steps, min_count=1)
        if by_rows is not None:
            return by_rows
    out = df.groupby(keys, observed=True, sort=False)[values].sum(min_count=1) / max(n_steps, 1)
    if "stage" in keys:  # inference stages: mean over the steps that hold the stage
        present = df.groupby("stage", observed=True)["step"].nunique()
        div = present.reindex(out.index.get_level_values("stage")).to_numpy(dtype=float)
        out = out.mul(max(n_steps, 1) / div, axis=0)
    return out.reset_index()


def mean_over_present(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Mean per key over the steps that hold it (a row absent from a step says nothing about
    that step, as with a peak); a value no step records (NaN) stays NaN."""
    if df.empty:
        return df.drop(columns=["step"], errors="ignore")
    keys = [k for k in keys if k in df.columns]
    values = [c for c in df.columns if c not in keys and c != "step"]
    groups = _groups(df, keys)
    by_rows = None if groups is None else _by_first_rows(df, keys, values, "mean", groups)
    if by_rows is not None:
        return by_rows
    return df.groupby(keys, observed=True, sort=False)[values].mean().reset_index()


def _by_first_rows(
    df: pd.DataFrame,
    keys: list[str],
    values: list[str],
    how: str,
    groups: tuple[np.ndarray, np.ndarray],
    n_steps: int | None = None,
    **kw: Any,
) -> pd.DataFrame | None:
    """``df.groupby(keys, observed=True, sort=False)[values].<how>(**kw)`` (divided by
    ``n_steps``, if given) ``.reset_index()``, on ``groups`` (:func:`_groups`): pandas numbers
    the groups by first appearance, as :func:`distinct_rows` does, so the same rows are summed
    the same way (:func:`~tracekit.analyses._groups.grouped`: the same blocks); each key's
    values are taken from its group's first row, of the key's dtype. Without pandas' per-key
    groupers and result MultiIndex. None where a value column is not a numpy number."""
    if not values or any(
        df[c].dtype.kind not in "iufb" or not isinstance(df[c].dtype, np.dtype) for c in values
    ):
        return None
    group, first = groups
    out = grouped(df[values], group, how, **kw)
    if n_steps is not None:
        out = out / max(n_steps, 1)
    cols: dict = {k: df[k].array.take(first) for k in keys}
    cols.update({c: out[i].to_numpy() for i, c in enumerate(values)})
    return pd.DataFrame(cols)


def _groups(df: pd.DataFrame, keys: list[str]) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row the number of its group of ``keys`` (by first appearance) and per group its
    first row (:func:`distinct_rows` of the keys' codes); None when a key is missing somewhere
    or is neither categorical, str nor integer (or bool): a dtype whose result index pandas
    may infer (object) or whose missing values it groups its own way (float)."""
    codes = []
    for k in keys:
        col = df[k]
        if isinstance(col.dtype, pd.CategoricalDtype):
            c = col.array.codes
        elif isinstance(col.dtype, pd.StringDtype):
            c = pd.factorize(col.array)[0]
        elif isinstance(col.dtype, np.dtype) and col.dtype.kind in "iub":
            c = pd.factorize(col.to_numpy())[0]
        else:
            return None
        if (c < 0).any():
            return None
        codes.append(c)
    return distinct_rows(*codes) if codes else None


def _one_row_per_key(
    df: pd.DataFrame, keys: list[str], values: list[str], n_steps: int, distinct: bool = False
) -> Any:
    """:func:`mean_over_steps` when no two rows share their keys and no key is missing: each
    group is one row, whose sum is itself (-0.0 as 0.0, NaN stays NaN, as the group-by's sum
    gives them), so the means are computed on the columns with no group-by (a few milliseconds a
    table, most of a small rank's aggregation; a trace of one complete step is this case).
    None (not a frame) otherwise. ``distinct``: the keys are known to be distinct."""
    if not distinct and not _distinct_keys(df, keys):
        return None
    n = max(n_steps, 1)
    scale = None
    if "stage" in keys:  # a stage's rows over the steps that hold the stage
        codes = pd.factorize(df["stage"])[0]
        pairs = pd.factorize(codes.astype(np.int64) * (1 << 32) + pd.factorize(df["step"])[0])[0]
        held = np.bincount(codes[np.unique(pairs, return_index=True)[1]])
        scale = n / held[codes].astype(float)
    cols: dict = {k: df[k].array for k in keys}
    for c in values:
        v = df[c].to_numpy()
        if v.dtype.kind == "f":
            v = v + 0.0
        elif v.dtype.kind == "b":
            v = v.astype(np.int64)
        elif v.dtype.kind not in "iu":
            return None
        cols[c] = v / n if scale is None else (v / n) * scale
    return pd.DataFrame(cols)


def _distinct_keys(df: pd.DataFrame, keys: list[str]) -> bool:
    """No key is missing and no two rows share their keys (``df.duplicated(keys)`` is all
    False), found on the key columns' integer codes."""
    codes = []
    for k in keys:
        col = df[k]
        is_cat = isinstance(col.dtype, pd.CategoricalDtype)
        c = col.array.codes if is_cat else pd.factorize(col.array)[0]
        if (c < 0).any():  # missing
            return False
        codes.append(c)
    return len(df) <= 1 or int(distinct_rows(*codes)[0].max()) + 1 == len(df)


def derive_ratios(spec: TableSpec, df: pd.DataFrame, windows: Windows, n_steps: int | None) -> pd.DataFrame:
    """``df`` (one rank's table: per step when ``n_steps`` is None, else its mean over that
    many steps) with every ratio column of ``spec.ratios`` computed from its aggregated
    columns, the value columns in the spec's order. An empty table gets its ratio columns too
    (empty): its columns are the same whether or not a run has rows (CSV, Parquet headers)."""
    if not spec.ratios:
        return df
    df = df.copy()
    lead = [c for c in df.columns if c not in spec.values]
    order = lead + [c for c in spec.values if c in df.columns or c in spec.ratios]
    for col, r in spec.ratios.items():
        if df.empty:
            value: Any = np.empty(0, float)
        else:
            num = df[r.num].to_numpy(dtype=float)
            den = _denominator(df, r, windows, n_steps)
            value = np.divide(num * r.scale, den, out=np.zeros(len(df)), where=den > 0)
        if col in df.columns:
            df[col] = value
        else:  # inserted where it is shown: no reordering of the whole frame after
            df.insert(sum(c in df.columns for c in order[: order.index(col)]), col, value)
    return df if list(df.columns) == order else df[order]


def _denominator(df: pd.DataFrame, r: Ratio, windows: Windows, n_steps: int | None) -> np.ndarray:
    """Per row, the denominator of ``r`` (see :class:`Ratio`)."""
    if r.of == STEP_WINDOW:
        steps = windows.steps
        if n_steps is None:
            return steps.set_index("step")["window_ms"].reindex(df["step"]).fillna(0.0).to_numpy()
        return np.full(len(df), steps["window_ms"].sum() / max(n_steps, 1))
    if r.of == PHASE_WALL:
        ph = windows.phases
        phase = df["phase"].astype(str).to_numpy()
        if n_steps is None:
            wall = ph.set_index(["step", "phase"])["wall_ms"]
            return wall.reindex(pd.MultiIndex.from_arrays([df["step"], phase])).fillna(0.0).to_numpy()
        mean = ph.groupby("phase")["wall_ms"].sum() / max(n_steps, 1)
        return mean.reindex(phase).fillna(0.0).to_numpy()
    of = df[r.of].astype(float)
    if r.within is None:
        return of.to_numpy()
    keys = [k for k in ("rank", "step", *r.within) if k in df.columns]
    if not keys:
        return np.full(len(df), of.sum())
    return of.groupby([df[k] for k in keys], observed=True, sort=False).transform("sum").to_numpy()


def whole_numbers(spec: TableSpec | None, df: pd.DataFrame, mean: bool = False) -> pd.DataFrame:
    """Count, bytes and index columns as integers; in a ``mean`` over steps, counts and bytes
    keep their fraction (float: the mean number per step). A count that does not apply to a
    row (the Idle row of kernel categories: no activities) stays empty (JSON null): NaN in a
    mean, a missing value of a nullable integer column per step."""
    if spec is None or df.empty:
        return df
    for c, unit in spec.values.items():
        if unit in INTEGER_UNITS and c in df.columns and pd.api.types.is_numeric_dtype(df[c]):
            v = df[c].to_numpy(dtype=float, na_value=np.nan)
            if mean and unit != INDEX:
                df[c] = v
                continue
            v = np.round(v)  # Series.round's numpy round
            missing = np.isnan(v)
            if unit != INDEX and missing.any():
                df[c] = pd.array(v, dtype="Int64")
                continue
            v[missing] = 0
            df[c] = v.astype("int64")
    return df
