"""Columns of strings as pandas categoricals, built from codes: a slice's distinct names and
shape texts are few, so each is turned into a string (and sorted) once, not once per event.
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..strings import storage


def _categorical(values: list[str]) -> pd.Categorical:
    """``pd.Categorical(values)`` (categories sorted), built from codes: the distinct values are
    found by hashing the Python strings, and only they become pandas strings (pandas 3 would
    otherwise convert every value to an Arrow string first: 4x slower)."""
    if not values:
        return pd.Categorical([])
    codes, distinct = pd.factorize(np.array(values, dtype=object), sort=True)
    return pd.Categorical.from_codes(codes, categories=distinct)


def _categorical_codes(codes: np.ndarray, value: Any) -> pd.Categorical:
    """``_categorical([value(c) for c in codes])`` for small non-negative int codes, with one
    call of ``value`` per distinct code (several codes may have one value). The distinct values
    are few (a slice's names, shapes...), so they are sorted in Python, and the categorical's
    dtype is made once per set of categories (:func:`_dtype`): pandas builds and checks an
    index of them otherwise, which costs more than the rest for a slice's column."""
    used = np.flatnonzero(np.bincount(codes))
    values = [value(int(c)) for c in used]
    distinct = sorted(set(values))
    where = {v: i for i, v in enumerate(distinct)}
    remap = np.zeros(len(used) and int(used[-1]) + 1, dtype=np.int64)
    remap[used] = [where[v] for v in values]
    dtype = _dtype(tuple(distinct), storage()) if len(distinct) <= _FEW else pd.CategoricalDtype(distinct)
    return pd.Categorical.from_codes(remap[codes], dtype=dtype, validate=False)


#: Sets of categories up to this many are made into a dtype once (:func:`_dtype`).
_FEW = 1024


@functools.lru_cache(maxsize=64)
def _dtype(categories: tuple[str, ...], storage: str) -> pd.CategoricalDtype:
    """The categorical dtype of these (sorted, distinct) categories: one object per set, so
    the slices of a file, whose columns mostly have the same few values, share it. Its
    categories are stored as pandas stores ``str`` now (``storage``, the cache's key too: a
    dtype made under the other storage is not equal to one made now)."""
    return pd.CategoricalDtype(list(categories))


def _raw_texts(values: list[msgspec.Raw]) -> pd.Categorical:
    """The JSON texts of ``msgspec.Raw`` values as a categorical, each distinct text decoded
    once: as written, ``""`` for an absent value (empty), ``null``, or text not UTF-8."""
    if not values:
        return pd.Categorical([])
    codes, distinct = pd.factorize(np.array([bytes(v) for v in values], dtype=object))
    texts = np.array([_raw_text(b) for b in distinct], dtype=object)
    return _categorical_codes(codes, lambda c: texts[c])


def _raw_text(raw: bytes) -> str:
    if raw == b"null":
        return ""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # msgspec does not check the strings of a raw value
        return ""
