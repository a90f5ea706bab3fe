"""The state the pipeline steps pass along: one trace file's events and the tables built from them.

Every step is a function ``step(t: Trace) -> Trace`` that adds named columns to ``t.acts`` (the
activity table: one row per device activity, or per CPU op piece on CPU-only traces) or adds one
of the side tables (``ranges``, ``modules``, ``step_ranges``, ``steps``, ``windows``,
``memory``). Steps never remove or rewrite a column an earlier step added; each documents what
it needs, adds and guarantees.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from typing import Any

import numpy as np
import pandas as pd

from ..strings import storage


@dataclass
class Trace:
    """One rank's trace as the pipeline builds it up.

    ``events``: the columns :mod:`tracekit.read.reader` decoded (read-only). ``acts``: the activity
    table. ``ranges``: the CPU ranges (ops, annotations, module frames) the nesting sweep keeps,
    with their enclosing context. ``modules``: one row per module instance (forward call).
    ``step_ranges``: the ProfilerStep ranges (CPU side). ``steps``: each step's device window.
    ``windows``: one row per (step, window) of the time engine. ``memory``: the ``[memory]``
    events (kind MEMORY, read's columns), which are not in ``events``: no step but the memory
    steps reads them (:mod:`tracekit.pipeline.memory` adds their labels).
    """

    path: str
    events: pd.DataFrame
    memory: pd.DataFrame = field(default_factory=pd.DataFrame)
    mode: str = ""
    #: Module ranges come from tracekit's capture annotations (else ``nn.Module`` frames).
    capture_modules: bool = False
    acts: pd.DataFrame = field(default_factory=pd.DataFrame)
    ranges: pd.DataFrame = field(default_factory=pd.DataFrame)
    modules: pd.DataFrame = field(default_factory=pd.DataFrame)
    step_ranges: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    windows: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The phase runs of steps whose phases interleave (:mod:`tracekit.pipeline.overlap`).
    runs: pd.DataFrame = field(default_factory=pd.DataFrame)
    meta: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)  # TraceWarning (tracekit.pipeline.checks) or str
    #: What owns FLOPs (:class:`tracekit.pipeline.flops.Units`), for ``tracekit explain``.
    perf_units: Any = None
    #: The pieces of each complete step's critical path (:mod:`tracekit.pipeline.critical`).
    critical: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: Facts derived from ``events`` or ``ranges`` alone (:meth:`once`). A view made by
    #: ``copy.copy`` shares this dict: the steps that label other points as launches (memory
    #: events, idle gaps, critical-path pieces) find what the launches' labelling derived.
    derived: dict = field(default_factory=dict, repr=False)

    def once(self, key: str, source: object, build: Callable[[], Any]) -> Any:
        """``build()``, computed once per ``key`` while ``source`` (the frame it is derived
        from, e.g. ``self.events`` or ``self.ranges``, or a tuple of them) is the same object;
        a step that replaces that frame gets a fresh value."""
        hit = self.derived.get(key)
        if hit is not None and _same(hit[0], source):
            return hit[1]
        value = build()
        self.derived[key] = (source, value)
        return value

    def release(self, *frames: str) -> None:
        """Let go of ``frames`` (e.g. ``"events"``): each becomes an empty frame, and what was
        derived from the events (:meth:`once`, the name codes) is dropped. Only the end of
        :func:`tracekit.pipeline.run`, which owns its state, calls it."""
        for name in frames:
            setattr(self, name, pd.DataFrame())
        self.derived.clear()
        for cached in ("names", "name_codes"):
            self.__dict__.pop(cached, None)

    @cached_property
    def names(self) -> np.ndarray:
        """Every event's name as an object array of str (decoded once)."""
        codes, uniq = self.name_codes
        return uniq[codes]

    @cached_property
    def name_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, distinct)``: every event's name as a code into an object array of the
        distinct names (``distinct[codes]`` is :attr:`names`). Tests of names run once per
        distinct name: see :meth:`name_test`."""
        return codes_of(self.events["name"])

    def names_of(self, idx: np.ndarray) -> np.ndarray:
        """``self.names[idx]`` (object array of str), without decoding every event's name."""
        codes, uniq = self.name_codes
        return uniq[codes[idx]]

    def name_test(self, test: Callable[[pd.Series], pd.Series]) -> np.ndarray:
        """``test`` (a vectorised test of a Series of str, e.g. ``lambda s:
        s.str.startswith(p)``) per event, evaluated once per distinct name."""
        codes, uniq = self.name_codes
        return spread(test(pd.Series(uniq, dtype=object)), codes)

    def name_categorical(self, idx: np.ndarray, default: str = "") -> pd.Categorical:
        """``pd.Categorical(take(self.names, idx, default))``, built from the codes."""
        codes, uniq = self.name_codes
        return categorical_take(uniq, codes, idx, default)

    @property
    def activities(self) -> pd.DataFrame:
        """The activity table (the name the labelling functions use)."""
        return self.acts


def _same(a: object, b: object) -> bool:
    """``a is b``; for tuples (several sources), element by element."""
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    return a is b


@dataclass
class Coded:
    """A label column as integer codes into a small object array of str ``values`` (a value
    may appear more than once): tests and rewrites run per value, rows are only indexed."""

    codes: np.ndarray
    values: np.ndarray

    @classmethod
    def taken(cls, col: pd.Series, idx: np.ndarray, default: str) -> Coded:
        """``take(as_str(col), idx, default)``, as codes (a missing value reads "")."""
        codes, uniq = codes_of(col)
        return cls(take(codes, idx, len(uniq)), np.append(uniq, default))

    def is_(self, value: str) -> np.ndarray:
        """Per row: its value is ``value``."""
        return spread(self.values == value, self.codes)

    def where(self, mask: np.ndarray, value: str) -> Coded:
        """``value`` where ``mask``, else the row's own value."""
        return Coded(np.where(mask, len(self.values), self.codes), np.append(self.values, value))

    def categorical(self) -> pd.Categorical:
        """``categorical(self.values[self.codes])``: the values present, sorted, as categories."""
        return categorical_take(self.values, self.codes, np.arange(len(self.codes)), "")


def spread(hit, codes: np.ndarray) -> np.ndarray:
    """``hit[codes]`` as a bool array (``hit``: a test per distinct value; ``codes``: per row, its
    value), with no gather when no value or every value passes."""
    hit = np.asarray(hit, dtype=bool)
    if not hit.any():
        return np.zeros(len(codes), bool)
    return np.ones(len(codes), bool) if hit.all() else hit[codes]


def add_columns(frame: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """``frame`` with ``columns`` (name -> values, one per row; names it does not have) after
    its own: the frame ``frame[name] = values`` in turn gives, built by one concatenation
    (each insert rebuilds the column index, arrow-backed in pandas 3: ~0.3 ms a column). The
    values are not copied: pass arrays that nothing writes to afterwards."""
    if not columns:
        return frame
    if any(name in frame.columns for name in columns):
        raise ValueError(f"columns already present: {[c for c in columns if c in frame.columns]}")
    return pd.concat([frame, pd.DataFrame(columns, index=frame.index, copy=False)], axis=1)


def take(arr: np.ndarray, idx: np.ndarray, default):
    """``arr[idx]`` where ``idx >= 0``, else ``default`` (also when ``arr`` is empty)."""
    idx = np.asarray(idx)
    a = np.asarray(arr)
    dtype = (
        object if isinstance(default, str) or a.dtype == object else np.result_type(a.dtype, type(default))
    )
    ok = idx >= 0
    if idx.size and ok.all():  # every row found (the common case): one gather, no mask
        return a[idx].astype(dtype, copy=False)
    out = np.full(idx.shape, default, dtype=dtype)
    if ok.any():
        out[ok] = a[idx[ok]]
    return out


def as_str(col: pd.Series) -> np.ndarray:
    """A string column as an object array of str (categoricals: through their codes, fast)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes, cats = cat_parts(col)
        if not (codes < 0).any():  # no missing value
            return cats[codes] if len(cats) else np.full(len(col), "", object)
    return col.astype(str).to_numpy()


def cat_parts(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, categories)`` of a categorical column: its codes (-1: missing) and its
    categories as an object array of str, read off its array (no accessor, no Series)."""
    arr = col.array
    cats = arr.categories
    if not isinstance(cats.dtype, pd.StringDtype):
        cats = cats.astype(str)
    return arr.codes, np.asarray(cats, dtype=object)


def str_test(col: pd.Series, test: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """``test(pd.Series(as_str(col)))`` as a bool array (``test``: a vectorised test of a Series
    of str), evaluated once per category when ``col`` is a categorical with no missing value."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes, cats = cat_parts(col)
        if len(cats) and not (codes < 0).any():
            return spread(test(pd.Series(cats, dtype=object)), codes)
    return np.asarray(test(pd.Series(as_str(col), dtype=object)), dtype=bool)


def str_in(col: pd.Series, values: tuple[str, ...]) -> np.ndarray:
    """``str_test(col, lambda s: s.isin(values))``: per row, its value is one of ``values``;
    on a categorical with no missing value, one comparison per category and no Series."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes, cats = cat_parts(col)
        if len(cats) and not (codes < 0).any():
            return spread(np.logical_or.reduce([cats == v for v in values]), codes)
    return str_test(col, lambda s: s.isin(values))


def categorical(values, categories=None) -> pd.Categorical:
    """``pd.Categorical(values, categories)`` of an array of str, each value hashed once as a
    Python object (pandas 3 would first convert the whole array to arrow strings)."""
    values = np.asarray(values, dtype=object)
    if len(values) == 0:
        return pd.Categorical(values, categories=categories)
    codes, uniq = pd.factorize(values)
    cats = pd.Index(np.sort(uniq) if categories is None else np.asarray(categories, dtype=object))
    pos = cats.get_indexer(uniq)
    return pd.Categorical.from_codes(np.where(codes >= 0, pos[codes], -1), categories=cats)


def cat_test(col: pd.Series, test: Callable[[pd.Series], pd.Series]) -> np.ndarray:
    """``test`` (a vectorised test of a Series of str) per row of a string column, evaluated
    once per distinct value."""
    codes, uniq = codes_of(col)
    return spread(test(pd.Series(uniq, dtype=object)), codes)


def codes_of(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, distinct)`` of a string column: ``distinct[codes]`` equals :func:`as_str`
    of it (``distinct`` an object array of str; a missing value reads "", as the reader
    stores an event with no name)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes, cats = cat_parts(col)
        codes = codes.astype(np.intp)
        if (codes < 0).any():
            cats, codes = np.append(cats, ""), np.where(codes < 0, len(cats), codes)
        return codes, cats
    if isinstance(col.dtype, pd.StringDtype):  # factorized by its storage (arrow: in C++)
        codes, uniq = pd.factorize(col.array)
        uniq, codes = np.asarray(uniq, dtype=object), codes.astype(np.intp)
        if (codes < 0).any():  # missing: ""
            uniq, codes = np.append(uniq, ""), np.where(codes < 0, len(uniq), codes)
        return codes, uniq
    codes, uniq = pd.factorize(pd.Series(col.fillna("").astype(str).to_numpy(), dtype=object))
    return codes.astype(np.intp), np.asarray(uniq, dtype=object)


def _str_dtype():
    """The dtype pandas gives a column of str now (pandas 3: ``str``, in the storage
    :mod:`tracekit.strings` says), once per storage."""
    return _str_dtype_of(storage())


@cache
def _str_dtype_of(storage: str):
    return pd.Series(["x"]).dtype


def str_column(values: np.ndarray, codes: np.ndarray):
    """``values[codes]`` (``values``: an object array of str) as the column pandas would make of
    it, taken from the few values by pyarrow where that is pandas' string storage: no Python
    object per row."""
    dtype = _str_dtype()
    if isinstance(dtype, pd.StringDtype) and dtype.storage == "pyarrow":
        import pyarrow as pa

        taken = pa.array(np.asarray(values, dtype=object), type=pa.large_string()).take(pa.array(codes))
        return pd.array(taken, dtype=dtype)
    if not len(codes):  # an empty object array would make an object column, not a str one
        return pd.array([], dtype=dtype)
    return np.asarray(values, dtype=object)[codes]


def distinct_rows(*columns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(key, first)``: per row the number of its combination of the columns' values (numbered
    0, 1, ... by first appearance), and per number the row where it first appears. Work to do
    once per distinct combination runs on the rows ``first``; ``result[key]`` spreads it back.

    Where runs of one combination (a thread's events) are at most a quarter of the rows, only
    each run's first row is numbered and its number repeated (the same numbers): a million
    events of a few threads are 745 runs, and no hash table of a million rows is made."""
    cols = [np.asarray(c) for c in columns]
    n = len(cols[0]) if cols else 0
    try:  # pd.NA cannot be compared (NaN only makes more runs)
        heads = np.flatnonzero(run_starts(*cols)) if n >= _RUNS_FROM else None
    except TypeError:
        heads = None
    if heads is not None and len(heads) * 4 <= n:
        key, first = _distinct_rows([c[heads] for c in cols])
        return np.repeat(key, np.diff(np.append(heads, n))), heads[first]
    return _distinct_rows(cols)


def run_starts(*columns: np.ndarray) -> np.ndarray:
    """Per row, whether it starts a run of rows equal in every column (the first row does; no
    rows: an empty mask). Raises TypeError where values cannot be compared (``pd.NA``)."""
    first = np.zeros(len(columns[0]) if columns else 0, bool)
    first[:1] = True
    for col in columns:
        first[1:] |= col[1:] != col[:-1]
    return first


#: Rows from which :func:`distinct_rows` looks for runs (below, the test costs more than it saves).
_RUNS_FROM = 4096


def _distinct_rows(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`distinct_rows` on every row."""
    n = len(columns[0]) if columns else 0
    key, size = np.zeros(n, np.int64), 1
    for col in columns:
        if col.dtype.kind in "iu" and n and col.min() >= 0 and col.max() < n:
            codes, m = col.astype(np.int64), int(col.max()) + 1  # already small codes
        else:
            codes, uniq = pd.factorize(col)  # -1: missing
            codes, m = codes.astype(np.int64) + 1, len(uniq) + 1
        if size * m >= 2**62:  # renumber before the product could overflow
            key = pd.factorize(key)[0].astype(np.int64)
            size = int(key.max()) + 1
        key, size = key * m + codes, size * m
    key = pd.factorize(key)[0] if n else key
    # factorize numbers keys by first appearance: key k first appears where the running max reaches k
    n_keys = int(key.max()) + 1 if n else 0
    return key, np.searchsorted(np.maximum.accumulate(key), np.arange(n_keys))


def row_codes(*columns: np.ndarray) -> np.ndarray:
    """Per row, the number of its combination of the columns' values, numbered 0, 1, ... by
    first appearance: ``pd.MultiIndex.from_arrays(columns).factorize()[0]`` without a tuple per
    row (e.g. one code per thread of ``(pid, tid)``, for :func:`~.intervals.containing`)."""
    return distinct_rows(*columns)[0]


def categorical_take(uniq: np.ndarray, codes: np.ndarray, idx: np.ndarray, default: str) -> pd.Categorical:
    """``pd.Categorical(take(uniq[codes], idx, default))`` (categories: the distinct values
    present, sorted), computed on the integer codes: no string is hashed per row, and the few
    values present are sorted in Python (their dtype made once per set: :func:`_dtype_of`)."""
    values = np.append(np.asarray(uniq, dtype=object), default)
    c = take(codes, idx, len(uniq))
    if len(c) == 0:
        return pd.Categorical(np.empty(0, object))
    used = np.flatnonzero(np.bincount(c, minlength=len(values)))
    present = values[used].tolist()  # a value may appear more than once (Coded)
    cats = sorted(set(present))
    where = {v: i for i, v in enumerate(cats)}
    remap = np.full(len(values), -1, np.int64)
    remap[used] = [where[v] for v in present]
    return pd.Categorical.from_codes(remap[c], dtype=_dtype_of(cats), validate=False)


#: Sets of categories up to this many have their dtype kept (:func:`_dtype_of`).
_FEW = 1024


def _dtype_of(categories: list[str]) -> pd.CategoricalDtype:
    """The categorical dtype of these sorted, distinct strings; made (and checked) once per set
    of up to :data:`_FEW`: the label columns of a run mostly have the same few values."""
    if len(categories) > _FEW:
        return _new_dtype(categories)
    return _kept_dtype(tuple(categories), storage())


@lru_cache(maxsize=256)
def _kept_dtype(categories: tuple[str, ...], storage: str) -> pd.CategoricalDtype:
    """:func:`_new_dtype`, once per set; ``storage`` (how pandas stores ``str`` now) is part of
    the key: a dtype made under the other storage is not equal to one made now."""
    return _new_dtype(categories)


def _new_dtype(categories: Sequence[str]) -> pd.CategoricalDtype:
    return pd.CategoricalDtype(pd.Index(np.array(categories, dtype=object)))


def lookup(index: pd.Series, keys: np.ndarray) -> np.ndarray:
    """``index[key]`` (int64 values) per key, -1 where the key is absent."""
    if len(index) == 0:
        return np.full(len(keys), -1, np.int64)
    pos = index.index.get_indexer(keys)  # as reindex: the index must be unique
    return np.where(pos >= 0, index.to_numpy(np.int64)[np.maximum(pos, 0)], -1).astype(np.int64)
