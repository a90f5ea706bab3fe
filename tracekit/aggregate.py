"""Per-rank aggregation of per-step tables: the mean over complete steps, whole-number units.

:func:`mean_over_steps`: Needs: a per-step table (a ``step`` column) and the number of complete
steps. Adds: one row per key, the mean per step (rows absent from a step count as zero there;
inference ``stage`` rows are averaged over the steps that hold the stage).
:func:`whole_numbers`: Guarantees: count, bytes and index columns are int64.
"""

from __future__ import annotations

import pandas as pd

from tracekit.analyses import TableSpec
from tracekit.analyses._registry import INTEGER_UNITS


def mean_over_steps(df: pd.DataFrame, n_steps: int, keys: list[str] | None = None) -> pd.DataFrame:
    """Mean per step: rows absent from a step count as zero there. ``keys``: the label columns
    (default: the non-numeric ones); rows of an inference ``stage`` are averaged over the steps
    that hold the stage."""
    if df.empty:
        return df.drop(columns=["step"], errors="ignore")
    if keys is None:
        keys = [c for c in df.columns if c != "step" and not pd.api.types.is_numeric_dtype(df[c])]
    keys = (["stage"] if "stage" in df.columns and "stage" not in keys else []) + [
        k for k in keys if k in df.columns
    ]
    values = [c for c in df.columns if c not in keys and c != "step"]
    if not keys:
        return df[values].sum().div(n_steps).to_frame().T
    out = df.groupby(keys, observed=True, sort=False)[values].sum() / max(n_steps, 1)
    if "stage" in keys:  # inference stages: mean over the steps that hold the stage
        present = df.groupby("stage", observed=True)["step"].nunique()
        div = present.reindex(out.index.get_level_values("stage")).to_numpy(dtype=float)
        out = out.mul(max(n_steps, 1) / div, axis=0)
    return out.reset_index()


def whole_numbers(spec: TableSpec | None, df: pd.DataFrame) -> pd.DataFrame:
    """Count, bytes and index columns as integers (a mean count is rounded to the nearest)."""
    if spec is None or df.empty:
        return df
    for c, unit in spec.values.items():
        if unit in INTEGER_UNITS and c in df.columns and pd.api.types.is_numeric_dtype(df[c]):
            df[c] = df[c].astype(float).round().fillna(0).astype("int64")
    return df
