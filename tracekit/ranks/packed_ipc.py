"""A result entry's small frames as one Arrow IPC stream, in their packed form.

A rank's small frames (its steps, windows and tables: :class:`tracekit.ranks.gathered.Packed`, what a
worker sends back anyway) are stored in the result cache (:mod:`tracekit.ranks.results`) as one
record batch of one row: each column of each frame is a list column holding the column's
values (numbers, or int32 codes), beside a ``list<string>`` of its words for label columns.
What says how to read them back (column names, dtypes) is JSON. Writing it costs no pandas at
all (the frames are packed once, for the parent), and reading it back gives Packed frames the
parent gathers as they are: no frame is built on either side.

:func:`encode`: Needs: ``{name: Packed}``. Adds: the JSON description and the stream's bytes.
Guarantees: ValueError when something would not read back exactly (a dtype, a category or a
column name JSON does not carry), so that nothing inexact is stored.
:func:`decode`: Guarantees: the frames :func:`encode` was given, or None for anything else:
unreadable or truncated bytes, types other than plain numbers and int32 codes, codes out of
range, lengths that disagree, more than ``limit`` bytes of columns, descriptions of other
shapes. Nothing is evaluated or unpickled.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from .gathered import Packed

_NUM = re.compile(r"[<>|=][biuf][1248]")
_NA = {"nan": np.nan, "<NA>": pd.NA}
_INDEX_DTYPES = ("object", "str", "range")


def _dtype(tag: tuple) -> Any:
    """The pandas dtype a column's tag stands for (ValueError for a tag of another shape)."""
    kind = tag[0]
    if kind == "num" and len(tag) == 2 and isinstance(tag[1], str) and _NUM.fullmatch(tag[1]):
        return np.dtype(tag[1])
    if kind == "obj" and len(tag) == 1:
        return np.dtype(object)
    if kind == "cat" and len(tag) == 4 and tag[2] in ("object", "str") and isinstance(tag[3], bool):
        if not all(isinstance(c, str) for c in tag[1]):
            raise ValueError("categories")
        return pd.CategoricalDtype(pd.Index(list(tag[1]), dtype=tag[2]), ordered=tag[3])
    if kind == "str" and len(tag) == 4 and tag[2] in ("python", "pyarrow") and tag[3] in _NA:
        return pd.StringDtype(tag[2], na_value=_NA[tag[3]])
    raise ValueError("tag")


def _tag(raw: Any) -> tuple:
    """A tag back from its JSON (a cat tag's categories as a tuple, as :func:`pack` makes it)."""
    if not isinstance(raw, list) or not raw or not isinstance(raw[0], str):
        raise ValueError("tag")
    if raw[0] == "cat" and len(raw) == 4 and isinstance(raw[1], list):
        return ("cat", tuple(raw[1]), *raw[2:])
    return tuple(raw)


def _json_tag(tag: tuple) -> list:
    return [tag[0], list(tag[1]), *tag[2:]] if tag[0] == "cat" else list(tag)


def _describe(p: Packed) -> dict:
    """The JSON of ``p``'s columns and tags, checked to read back as the same ones."""
    desc = {"columns": list(p.columns), "columns_dtype": _index_dtype(p.columns)}
    if p.columns.name is not None or desc["columns_dtype"] not in _INDEX_DTYPES:
        raise ValueError("column index")
    desc["tags"] = [_json_checked(t, d) for t, d in zip(p.tags, p.dtypes)]
    return desc


#: ``tag -> (its JSON, the dtype that reads back as, the last dtype found equal to that)``.
_CHECKED: dict[tuple, tuple[list, Any, Any]] = {}


def _json_checked(tag: tuple, dtype: Any) -> list:
    """The JSON of a column's tag, checked to read back as ``tag`` and ``dtype`` (ValueError
    otherwise). Remembered per tag: a JSON checked once reads back as the same dtype, so a
    column whose dtype is that one (often the very object: a worker's ranks share most dtype
    objects) needs no new check. Building a categorical dtype from its tag and ``str`` of
    every dtype were 1.2 of the 3.4 ms it took to encode a rank's frames."""
    got = _CHECKED.get(tag)
    if got is not None:
        text, back, last = got
        if last is dtype:
            return text
        if back == dtype and str(back) == str(dtype):
            _CHECKED[tag] = (text, back, dtype)
            return text
    text = _json_tag(tag)
    if _tag(text) != tag:
        raise ValueError("dtype")
    back = _dtype(tag)
    if not (back == dtype and str(back) == str(dtype)):
        raise ValueError("dtype")
    if len(_CHECKED) >= 4096:
        _CHECKED.clear()
    _CHECKED[tag] = (text, back, dtype)
    return text


def _index_dtype(columns: pd.Index) -> str:
    """How the column index reads back: ``range`` for no columns at all (``pd.DataFrame()``)."""
    if isinstance(columns, pd.RangeIndex) and not len(columns):
        return "range"
    return str(columns.dtype)


def _columns(names: list, dtype: str) -> pd.Index:
    return pd.RangeIndex(0) if dtype == "range" and not names else pd.Index(names, dtype=dtype)


def encode(frames: dict[str, Any]) -> tuple[list[dict], bytes]:
    """The description (JSON) and the IPC stream of ``frames`` (ValueError: not storable)."""
    descs, names, arrays = [], [], []
    for i, (name, p) in enumerate(frames.items()):
        if not isinstance(p, Packed):
            raise ValueError(name)
        descs.append({"name": name, **_describe(p)})
        for j, (a, w) in enumerate(zip(p.arrays, p.words)):
            names.append(f"{i}.{j}")
            arrays.append(_one_row(pa.array(a)))
            if w is not None:
                names.append(f"{i}.{j}.w")
                arrays.append(_one_row(pa.array(w, pa.string())))
    batch = pa.RecordBatch.from_arrays(arrays, names=names) if arrays else pa.RecordBatch.from_pydict({})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return descs, sink.getvalue().to_pybytes()


#: ``n -> the offsets [0, n]`` of a one-row list (Arrow arrays are immutable: shared). A
#: rank's 110 columns have a handful of lengths; making each anew was a third of packing them.
_OFFSETS: dict[int, pa.Array] = {}


def _one_row(values: pa.Array) -> pa.ListArray:
    n = len(values)
    offsets = _OFFSETS.get(n)
    if offsets is None:
        if len(_OFFSETS) >= 1024:
            _OFFSETS.clear()
        offsets = _OFFSETS[n] = pa.array([0, n], pa.int32())
    return pa.ListArray.from_arrays(offsets, values)


def decode(descs: Any, blob: Any, limit: int) -> dict[str, Packed] | None:
    """The frames of an :func:`encode` d stream, or None when it is not a valid one."""
    try:
        if not isinstance(descs, list) or not isinstance(blob, bytes) or len(blob) > limit:
            return None
        table = pa.ipc.open_stream(pa.BufferReader(blob)).read_all()
        table.validate(full=True)  # before anything reads it: a damaged stream crashed nbytes
        if table.num_rows != (1 if table.num_columns else 0) or table.nbytes > limit:
            return None
        cols = {name: table.column(name).combine_chunks() for name in table.column_names}
        out = {}
        for i, d in enumerate(descs):
            got = _frame(d, i, cols)
            if got is None:
                return None
            out[d["name"]] = got
        return out if len(out) == len(descs) else None
    except (pa.ArrowException, OSError, ValueError, TypeError, KeyError, IndexError):
        return None


def _frame(d: Any, i: int, cols: dict) -> Packed | None:
    """Frame ``i`` of the stream's columns, as ``d`` describes it, or None when it is not."""
    if not isinstance(d, dict) or not isinstance(d.get("name"), str):
        return None
    if not isinstance(d.get("columns"), list):
        return None
    names, tags = d["columns"], [_tag(t) for t in d.get("tags") or []]
    if len(tags) != len(names) or not all(isinstance(c, str) for c in names):
        return None
    if len(set(names)) != len(names) or d.get("columns_dtype") not in _INDEX_DTYPES:
        return None
    dtypes = [_dtype(t) for t in tags]
    arrays, words = [], []
    for j, (tag, dt) in enumerate(zip(tags, dtypes)):
        got = _column(cols.get(f"{i}.{j}"), cols.get(f"{i}.{j}.w"), tag, dt)
        if got is None:
            return None
        arrays.append(got[0])
        words.append(got[1])
    if len({len(a) for a in arrays}) > 1:
        return None
    return Packed(_columns(names, d["columns_dtype"]), dtypes, tuple(tags), arrays, words)


def _values(col: Any, value_type: pa.DataType) -> pa.Array | None:
    if not isinstance(col, pa.ListArray) or len(col) != 1 or col.null_count:
        return None
    values = col.flatten()
    return values if values.type == value_type and not values.null_count else None


def _column(col: Any, wcol: Any, tag: tuple, dt: Any) -> tuple[np.ndarray, list | None] | None:
    """A column's values (numbers, or codes in range) and words, or None when not valid."""
    if tag[0] == "num":
        values = _values(col, pa.from_numpy_dtype(dt))
        return None if values is None else (values.to_numpy(zero_copy_only=False), None)
    codes = _values(col, pa.int32())
    if codes is None:
        return None
    a = codes.to_numpy(zero_copy_only=False)
    if tag[0] == "cat":
        n, words = len(tag[1]), None
        if wcol is not None:
            return None
    else:
        w = _values(wcol, pa.string())
        if w is None:
            return None
        words = w.to_pylist()
        n = len(words)
    if len(a) and (a.min() < -1 or a.max() >= n):
        return None
    return a, words
