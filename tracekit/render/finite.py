"""One rule for numbers that are not finite, at the output boundary: shown empty, never ``inf``.

Finite inputs can still give results that are not: a sum of finite bytes or FLOPs past
float64's range (two allocations of 1.5e308 bytes), a ratio over such a sum. Every output
format shows such a value as empty (JSON ``null``; CSV, Markdown, the terminal and HTML an
empty cell), never ``inf``, ``Infinity`` or ``NaN`` text, and JSON stays strict JSON. One
notice says how many values were emptied.

:func:`finite_output`: Needs: the meta and tables about to be written. Adds: copies in which
every infinite float (in the tables' float columns, and anywhere in the meta) is NaN/None, and
a notice in ``meta["warnings"]`` when there was one. Guarantees: the tables' columns keep
their dtypes; nothing finite changes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

#: The code of the notice (docs/security.md, "Numbers").
CODE = "not_finite"


def finite_obj(obj: Any) -> tuple[Any, int]:
    """``obj`` with every non-finite float inside dicts, lists and tuples made None, and how
    many there were (NaN, an empty value already, is made None but not counted)."""
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return (obj, 0) if math.isfinite(f) else (None, int(math.isinf(f)))
    if isinstance(obj, dict):
        pairs = [(k, finite_obj(v)) for k, v in obj.items()]
        return {k: v for k, (v, _) in pairs}, sum(n for _, (_, n) in pairs)
    if isinstance(obj, (list, tuple)):
        items = [finite_obj(v) for v in obj]
        return type(obj)(v for v, _ in items), sum(n for _, n in items)
    return obj, 0


def strict_json(obj: Any) -> str:
    """``obj`` as strict JSON (indented), non-finite floats as ``null``."""
    return json.dumps(finite_obj(obj)[0], indent=2, allow_nan=False)


def finite_frame(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """``df`` with the infinite values of its float columns as NaN, and how many there were."""
    count, out = 0, None
    for c in df.columns:
        col = df[c]
        if col.dtype.kind != "f":
            continue
        bad = np.isinf(col.to_numpy())
        if bad.any():
            out = df.copy() if out is None else out
            out[c] = col.mask(bad)
            count += int(bad.sum())
    return (df if out is None else out), count


def finite_output(meta: dict, tables: Mapping[str, pd.DataFrame]) -> tuple[dict, Mapping[str, pd.DataFrame]]:
    """``meta`` and ``tables`` as every format shows them (see the module docstring). Tables
    computed when read (:class:`tracekit.cli.one_by_one.OneByOne`) have counted their values
    that are not finite already (``not_finite``), and read finite: they are passed on as they are."""
    if isinstance(tables, dict):
        fixed = {k: finite_frame(v) for k, v in tables.items()}
        tables, in_tables = {k: df for k, (df, _) in fixed.items()}, sum(c for _, c in fixed.values())
    else:
        in_tables = tables.not_finite  # type: ignore[attr-defined]
    warnings = meta.get("warnings", [])
    got = {k: (v, 0) if k == "warnings" else finite_obj(v) for k, v in meta.items()}
    meta = {k: v for k, (v, _) in got.items()}
    n = sum(c for _, c in got.values()) + in_tables
    if n:
        meta["warnings"] = [
            *warnings,
            {
                "code": CODE,
                "message": f"{n} value(s) computed past the range of 64-bit floats (from finite "
                "inputs: sums or ratios of huge numbers in the trace) are shown empty",
                "rank": None,
                "step": None,
            },
        ]
    return meta, tables
