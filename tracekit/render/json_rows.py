"""A table's rows as JSON text, a column at a time: the text ``json.dumps`` gives them.

``json.dumps(..., indent=2)`` runs Python's pure-Python encoder (the C one has no indent), and
:func:`tracekit.render.formats.records` first builds one dict per row, cleaning each cell in a
Python call: 1.1 s of the parent's serial time for 100 small ranks (72k rows), about 10 ms a
rank after the pool is done (docs/performance.md). Here each column is encoded once as a list
of value texts (numbers by ``repr``/``str`` over ``tolist()``, a string's text once per distinct
string) and the rows are joined from them.

Needs: a frame whose column names are strings. Gives: the rows of
``json.dumps(records(df), indent=2)`` (``records``'s cleaning: NaN and infinities as null,
floats rounded to 6 places, numpy scalars as Python's), each row indented for its place in the
output document; None when the frame holds a cell this does not encode (a list, a dict, any
other object but a string, number, bool or missing value): the caller then takes the general
path. Guarantees: the same characters as the general path (tests/unit/test_json_pieces.py).
"""

from __future__ import annotations

import json
import math
from itertools import repeat

import numpy as np
import pandas as pd

#: The indentation of a row's braces and of its keys inside ``{"tables": {name: [rows]}}``.
ROW_INDENT, KEY_INDENT = " " * 6, " " * 8

_SCALARS = (str, int, float, bool, type(None))


def rows_text(df: pd.DataFrame) -> str | None:
    """The rows of ``df`` as they stand in the document, joined by ``",\\n" + ROW_INDENT``
    (the first row's ``{`` unindented); None when a cell needs the general encoder."""
    if not all(isinstance(c, str) for c in df.columns):
        return None
    if not len(df.columns):
        return (",\n" + ROW_INDENT).join(repeat("{}", len(df)))
    texts = []
    for i, name in enumerate(df.columns):
        enc = _column(df.iloc[:, i])
        if enc is None:
            return None
        head = ("," if i else "") + "\n" + KEY_INDENT + json.dumps(name) + ": "
        texts.append([head + v for v in enc])
    close = "\n" + ROW_INDENT + "}"
    return (",\n" + ROW_INDENT).join("{" + "".join(parts) + close for parts in zip(*texts))


def _column(s: pd.Series) -> list[str] | None:
    """Each value's JSON text, as :func:`~tracekit.render.formats.records` cleans it."""
    dt = s.dtype
    if isinstance(dt, np.dtype) and dt.kind == "f":
        return _floats(s.to_numpy())
    if isinstance(dt, np.dtype) and dt.kind in "iu":
        return list(map(str, s.to_numpy().tolist()))
    if isinstance(dt, np.dtype) and dt.kind == "b":
        return ["true" if v else "false" for v in s.to_numpy().tolist()]
    return _objects(s.to_numpy(dtype=object))


def _floats(a: np.ndarray) -> list[str]:
    """``repr(round(v, 6))`` of each float (Python's correctly rounded ``round``, not numpy's
    scaled one, which differs in the last place), ``null`` where it is not finite."""
    out = list(map(repr, map(round, a.tolist(), repeat(6))))
    bad = ~np.isfinite(a)
    if bad.any():
        for i in np.flatnonzero(bad).tolist():
            out[i] = "null"
    return out


def _objects(a: np.ndarray) -> list[str] | None:
    """Strings (each distinct one encoded once), missing values and scalars of other kinds
    in an object column; None when a cell is not a scalar."""
    known: dict[str, str] = {}
    out = []
    for v in a.tolist():
        if type(v) is str:
            t = known.get(v)
            if t is None:
                t = known[v] = json.dumps(v)
            out.append(t)
            continue
        t = _scalar(v)
        if t is None:
            return None
        out.append(t)
    return out


def clean(v):
    """A cell as JSON writes it: NaN and infinities None, floats rounded to 6 places, numpy
    scalars as Python's (:func:`~tracekit.render.formats.records` and :func:`_scalar`)."""
    if v is pd.NA:
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return None if math.isnan(f) or math.isinf(f) else round(f, 6)
    if isinstance(v, np.bool_):
        return bool(v)
    return v


def _scalar(v: object) -> str | None:
    """One non-string cell's text as ``records`` then ``json.dumps`` write it; None for a
    cell that is not a scalar."""
    c = clean(v)
    return json.dumps(c) if isinstance(c, _SCALARS) else None
