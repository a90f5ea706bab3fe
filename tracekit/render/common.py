"""What every human-facing renderer (terminal, HTML, Markdown) shows of a table, from its spec.

Machine formats (JSON, CSV, Parquet) keep every row and full names; people get:

* headers with units (``wall_ms`` -> ``wall (ms)``, ``percent`` -> ``%``);
* numbers by unit: counts and bytes as integers with separators, ms with 3 decimals, % with 1;
* no all-zero rows (a phase absent from the trace, a category with nothing in it), and a note
  saying how many were hidden; a row with any non-zero value is always shown;
* the top rows of long tables (``spec.top``, largest ``spec.sort_by`` first), with a note;
* long names shortened by the spec's ``shorten`` functions unless ``wide``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyses import column_unit, spec_of
from tracekit.analyses._registry import BYTES, COUNT, INDEX, MB, MS, PCT, PER_S, US

#: Titles of tables that are not in the registry (``tracekit compare``).
COMPARE_TITLES = {"attention": "Attention time, A vs B (Table VIII)"}


def title(name: str) -> str:
    spec = spec_of(name)
    if spec is not None:
        return spec.heading
    if name.endswith("_delta") and spec_of(name[:-6]) is not None:
        return f"{spec_of(name[:-6]).title}: B - A"
    return COMPARE_TITLES.get(name, name)


def header(name: str, column: str) -> str:
    """``wall_ms`` -> ``wall (ms)``; ``percent`` -> ``%``; ``vs_mean_pct`` -> ``vs mean (%)``;
    ``peak_rss_mb`` -> ``peak rss (MB)``; ``tokens_per_s`` -> ``tokens/s``."""
    unit = column_unit(name, column)
    base = column
    for suffix in ("_ms", "_us", "_pct", "_mb"):
        base = base.removesuffix(suffix)
    if unit == PER_S and base.endswith("_per_s"):
        return base.removesuffix("_per_s").replace("_", " ") + "/s"
    if base == "percent":
        return "%" if not column.startswith("paper_") else "paper %"
    base = base.replace("_", " ")
    shown = {MS: "ms", US: "us", PCT: "%", MB: "MB"}.get(unit)
    return f"{base} ({shown})" if shown else base


def cell(name: str, column: str, v) -> str:
    """One value as text, by its column's unit."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        unit = column_unit(name, column)
        f = float(v)
        if unit in (COUNT, BYTES, INDEX) or (isinstance(v, (int, np.integer)) and unit != MS):
            return f"{round(f):,}" if unit != INDEX else str(round(f))
        if unit == PCT:
            return f"{f:,.1f}"
        if unit in (US, MB, PER_S):
            return f"{f:,.1f}"
        return f"{f:,.3f}"
    return str(v)


def numeric(df: pd.DataFrame, column: str) -> bool:
    return pd.api.types.is_numeric_dtype(df[column]) and not pd.api.types.is_bool_dtype(df[column])


def value_columns(name: str, df: pd.DataFrame) -> list[str]:
    spec = spec_of(name)
    if spec is not None and spec.values:
        return [c for c in df.columns if c in spec.values and c != "vs_mean_pct"]
    return [c for c in df.columns if numeric(df, c) and c not in ("rank", "step", "layer")]


@dataclass
class Shown:
    """The rows a person sees, and what was left out of them."""

    frame: pd.DataFrame
    zero_rows: int = 0
    total_rows: int = 0
    top: int | None = None

    def notes(self) -> list[str]:
        out = []
        if self.top is not None and self.total_rows > len(self.frame):
            sort_by = spec_of_sort(self)
            out.append(
                f"top {len(self.frame)} of {self.total_rows} rows{sort_by}; "
                "--top N for more, JSON/CSV have all"
            )
        if self.zero_rows:
            out.append(f"{self.zero_rows} all-zero row{'s' if self.zero_rows != 1 else ''} hidden")
        return out


def spec_of_sort(shown: Shown) -> str:
    return f" by {shown.frame.attrs.get('sort_by')}" if shown.frame.attrs.get("sort_by") else ""


def shown_rows(name: str, df: pd.DataFrame, *, top: int | None = None, wide: bool = False) -> Shown:
    """The rows of ``df`` to show: no all-zero rows, the top ``top`` (default: the spec's)."""
    values = value_columns(name, df)
    if values and len(df):
        v = df[values].apply(pd.to_numeric, errors="coerce").fillna(0.0).to_numpy(dtype=float)
        nonzero = (v != 0).any(axis=1)
    else:
        nonzero = np.ones(len(df), dtype=bool)
    kept = df[nonzero]
    out = Shown(kept, zero_rows=int((~nonzero).sum()), total_rows=len(kept))
    spec = spec_of(name)
    limit = top if top is not None else (spec.top if spec is not None else None)
    if limit is not None and spec is not None and spec.sort_by in kept.columns and len(kept) > limit:
        kept = kept.sort_values(spec.sort_by, ascending=False, kind="stable").head(limit)
        kept.attrs["sort_by"] = spec.sort_by
        out.frame, out.top = kept, limit
    if not wide and spec is not None and spec.shorten:
        out.frame = out.frame.copy()
        for col, fn in spec.shorten.items():
            if col in out.frame.columns:
                out.frame[col] = out.frame[col].astype(str).map(fn)
    return out


def steps_text(steps: list[int]) -> str:
    """Step numbers, shortened when many: ``3,4,5`` / ``1..60 (60)``."""
    return ",".join(map(str, steps)) if len(steps) < 8 else f"{steps[0]}..{steps[-1]} ({len(steps)})"


def filters_text(filters: dict) -> str:
    """The filters of a run, for people: ``steps 3,4, phase backward, module Attention``
    (``--module`` shows the categories it selected, ``+`` between several)."""
    parts = []
    for k, v in filters.items():
        if k in ("tables_left_out", "complete_steps_kept"):
            continue
        if k == "steps":
            v = steps_text(list(v))
        elif isinstance(v, list | tuple):
            v = " + ".join(map(str, v))
        parts.append(f"{k} {v}")
    return ", ".join(parts)
