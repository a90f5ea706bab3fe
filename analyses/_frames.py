"""Result frames built in one go: a table's ``finish`` computes its new columns and its row
order on arrays, then builds the frame once (setting a small frame's columns one at a time,
sorting it and selecting its columns cost pandas tens of microseconds each, most of a finish).

:func:`rebuilt` is ``df.assign(**new).iloc[order][columns].reset_index(drop=True)``;
:func:`place` and :func:`stable_order` are the row order ``sort_values(..., kind="stable")``
gives (a missing value last).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def rebuilt(
    df: pd.DataFrame, new: dict[str, Any], order: np.ndarray | None, columns: list[str]
) -> pd.DataFrame:
    """``df`` with the columns ``new`` set (arrays: added or replaced, as ``df[c] = v``), its rows
    taken in ``order`` (None: as they are) and the columns ``columns`` (each one ``new`` or
    ``df`` has, in that order), indexed 0..n-1. Each column keeps its dtype."""
    out: dict[str, Any] = {}
    for c in columns:
        if c in new:
            v = np.asarray(new[c])
            out[c] = v if order is None else v[order]
        elif c in df.columns:
            col = df[c]
            v = col.array if order is None else col.array.take(order)
            if col.dtype == object:  # kept object: a frame built from its values infers str
                v = pd.Series(np.asarray(v, dtype=object), dtype=object)
            out[c] = v
    return pd.DataFrame(out)


def place(col: pd.Series, order: list[str]) -> np.ndarray:
    """Per row, the position of its value (as str) in ``order``; ``len(order)`` for any other
    (``col.astype(str).map(...)``'s NaN, which a sort puts last)."""
    at = {v: i for i, v in enumerate(order)}
    return np.fromiter((at.get(v, len(order)) for v in col.astype(str).tolist()), np.int64, count=len(col))


def stable_order(keys: list, n: int) -> np.ndarray:
    """The order of ``n`` rows by a stable sort on ``keys`` (arrays, the first the primary key,
    all ascending; a missing value last, ties in row order), as ``sort_values(kind="stable")``
    orders them: a key that is not numeric sorts by its sorted distinct values' codes, as
    pandas' lexsort of several keys does."""
    return np.lexsort([_sortable(k) for k in reversed(keys)]) if keys else np.arange(n)


def _sortable(key) -> np.ndarray:
    v = np.asarray(key)
    if v.dtype.kind in "biuf":
        return v
    codes, uniq = pd.factorize(key, sort=True)
    return np.where(codes < 0, len(uniq), codes)
