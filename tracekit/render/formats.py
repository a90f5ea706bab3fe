"""Render tables to JSON, CSV, Markdown and Parquet. Same DataFrames, every format.

JSON is the public interface: ``{"meta": {...}, "tables": {name: [records]}}`` (docs/cli.md).
CSV cells that a spreadsheet would run as a formula (leading ``=``, ``+``, ``-``, ``@``) are
prefixed with ``'``; Markdown cells are escaped so trace names cannot change the table.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _clean(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else round(f, 6)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def records(df: pd.DataFrame) -> list[dict]:
    out = []
    cols = list(df.columns)
    for row in df.itertuples(index=False, name=None):
        out.append({c: _clean(v) for c, v in zip(cols, row)})
    return out


def to_json(meta: dict, tables: dict[str, pd.DataFrame]) -> str:
    doc = {"meta": meta, "tables": {k: records(v) for k, v in tables.items()}}
    return json.dumps(doc, indent=2, default=str, allow_nan=False)


#: Line breaks become spaces: the CSV writer does not even quote a cell for a bare "\r", so a
#: reader would start a new row there whose first cell could be a formula; with no breaks at all
#: every row is one line for any reader (names from traces never need one).
_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def safe_csv_cell(v):
    if isinstance(v, str):
        if v.startswith(_FORMULA_START):
            v = "'" + v
        v = v.translate(_BREAKS)
    return v


def to_csv(df: pd.DataFrame) -> str:
    safe = df.copy()
    for c in safe.columns:
        # Every column that is not numbers (object, category, pandas' string dtype, ...).
        if not (pd.api.types.is_numeric_dtype(safe[c]) or pd.api.types.is_bool_dtype(safe[c])):
            safe[c] = safe[c].astype(object).map(safe_csv_cell)
    safe.columns = [safe_csv_cell(str(c)) for c in safe.columns]
    buf = io.StringIO()
    safe.to_csv(buf, index=False, float_format="%.6g")
    return buf.getvalue()


def md_escape(v) -> str:
    s = str(v)
    for ch in ("\\", "|", "`", "*", "_", "<", ">", "[", "]"):
        s = s.replace(ch, "\\" + ch)
    return s.replace("\n", " ").replace("\r", " ")


def to_markdown(title: str, df: pd.DataFrame) -> str:
    lines = [f"### {md_escape(title)}", ""]
    if df.empty:
        return "\n".join(lines + ["(no rows)", ""])
    cols = list(df.columns)
    lines.append("| " + " | ".join(md_escape(c) for c in cols) + " |")
    lines.append("|" + "|".join("---:" if pd.api.types.is_numeric_dtype(df[c]) else "---"
                                for c in cols) + "|")
    for row in df.itertuples(index=False, name=None):
        cells = []
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append(f"{v:.3f}")
            else:
                cells.append(md_escape(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def write_parquet(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, df in tables.items():
        p = out_dir / f"{name}.parquet"
        df2 = df.copy()
        for c in df2.columns:
            if isinstance(df2[c].dtype, pd.CategoricalDtype):
                df2[c] = df2[c].astype(str)
        df2.to_parquet(p, index=False)
        paths.append(p)
    return paths
