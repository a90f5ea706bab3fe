"""The small tables of many ranks, kept compact by the process that gathers them.

Each rank's tables (its means over steps, ``phase_means``; :func:`tracekit.ranks.tables.tables_of`)
arrive from a worker as DataFrames of a few dozen rows. Kept as they are, each costs the
parent 7-40 KB of pandas objects (index, block manager, one Python string per label) whatever
its rows: about 150 KB per rank, 75 MB at 512 ranks. :class:`RankTables` keeps them instead as
columns over all ranks: numbers as arrays, labels as int32 codes into one vocabulary per table
and column (a kernel name is stored once, not once per rank), each rank a range of rows; a
rank's frame is built again when it is asked for. :class:`Computed` is ``Analysis._computed``
over such a store.

:meth:`RankTables.add`: Needs: a slot (a file's index) and its tables ``{(kind, name): frame}``.
Guarantees: :meth:`RankTables.frame` gives back a frame equal to the one added (values, dtypes,
categories and their order, column index); a frame of a shape this does not encode (another
index, non-string labels in an object column, other dtypes) is kept whole instead.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

_NO_MODULES = pd.DataFrame()
#: Consolidate a column's chunks into one array once it has this many (amortised appends).
_CHUNKS = 32


def _tag(s: pd.Series) -> tuple | None:
    """How a column is encoded (a hashable key of its dtype), or None when it cannot be."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        cats = dt.categories
        if cats.dtype != object and not isinstance(cats.dtype, pd.StringDtype):
            return None
        return ("cat", tuple(cats), str(cats.dtype), bool(dt.ordered))
    if isinstance(dt, pd.StringDtype):
        return ("str", str(dt), dt.storage, repr(dt.na_value))
    if isinstance(dt, np.dtype) and dt.kind in "biuf":
        return ("num", dt.str)
    if isinstance(dt, np.dtype) and dt.kind == "O" and all(type(v) is str for v in s.to_numpy()):
        return ("obj",)
    return None


class _Schema:
    """The columns of frames encoded alike, and their rows over the ranks so far."""

    def __init__(self, p: Packed):
        self.columns, self.tags, self.dtypes = p.columns, p.tags, p.dtypes
        self.chunks: list[list[np.ndarray]] = [[] for _ in p.tags]
        self.rows = 0

    def append(self, arrays: list[np.ndarray]) -> tuple[int, int]:
        start = self.rows
        for chunks, a in zip(self.chunks, arrays):
            # An unpickled array (a worker's) is a view of its message's bytes: two array
            # objects and a bytes object each, until the chunks are joined. Kept compact.
            chunks.append(a if a.base is None else a.copy())
            if len(chunks) > _CHUNKS:
                chunks[:] = [np.concatenate(chunks)]
        self.rows += len(arrays[0]) if arrays else 0
        return start, self.rows

    def column(self, i: int) -> np.ndarray:
        chunks = self.chunks[i]
        if len(chunks) != 1:
            chunks[:] = [np.concatenate(chunks) if chunks else np.empty(0)]
        return chunks[0]


class _Places:
    """``slot -> (schema, start, stop)`` of a :class:`_Table`, as arrays indexed by the slot (a
    file's index): about 20 bytes a slot, where a dict of tuples costs about 150."""

    __slots__ = ("schemas", "start", "stop", "which")

    def __init__(self) -> None:
        self.schemas: list[_Schema] = []
        self.which, self.start, self.stop = array("i"), array("q"), array("q")

    def __setitem__(self, slot: int, place: tuple[_Schema, int, int]) -> None:
        schema, start, stop = place
        if slot >= len(self.which):
            grow = slot + 1 - len(self.which)
            self.which.extend([-1] * grow)
            self.start.extend([0] * grow)
            self.stop.extend([0] * grow)
        i = next((k for k, known in enumerate(self.schemas) if known is schema), len(self.schemas))
        if i == len(self.schemas):
            self.schemas.append(schema)
        self.which[slot], self.start[slot], self.stop[slot] = i, start, stop

    def __contains__(self, slot: object) -> bool:
        return isinstance(slot, int) and 0 <= slot < len(self.which) and self.which[slot] >= 0

    def __getitem__(self, slot: int) -> tuple[_Schema, int, int]:
        if slot not in self:
            raise KeyError(slot)
        return self.schemas[self.which[slot]], self.start[slot], self.stop[slot]


class _Table:
    """One table (``(kind, name)``) of every slot: schemas, rows, label vocabularies."""

    def __init__(self) -> None:
        self.schemas: dict[tuple, _Schema] = {}
        self.where = _Places()
        self.whole: dict[int, Any] = {}
        self.vocab: dict[str, dict[str, int]] = {}
        self.words: dict[str, np.ndarray] = {}

    def add(self, slot: int, frame: Any) -> None:
        """``frame`` (a DataFrame, or :func:`pack` of one) as ``slot``'s rows."""
        p = frame if isinstance(frame, Packed) else pack(frame)
        if not isinstance(p, Packed):
            self.whole[slot] = frame
            return
        key = (tuple(p.columns), str(p.columns.dtype), p.columns.name, p.tags)
        schema = self.schemas.get(key)
        if schema is None:
            schema = self.schemas[key] = _Schema(p)
        arrays = [a if w is None else self._codes(c, a, w) for c, a, w in zip(p.columns, p.arrays, p.words)]
        self.where[slot] = (schema, *schema.append(arrays))

    def _codes(self, name: str, local: np.ndarray, words: list[str]) -> np.ndarray:
        """Codes into this table's vocabulary of ``name`` from codes into ``words``."""
        vocab = self.vocab.setdefault(name, {})
        ids = np.fromiter((vocab.setdefault(w, len(vocab)) for w in words), np.int32, len(words))
        return np.append(ids, np.int32(-1))[local]

    def _decode(self, name: str, codes: np.ndarray, tag: tuple, dtype: Any) -> Any:
        if tag[0] == "num":
            return codes.copy()
        if tag[0] == "cat":
            return pd.Categorical.from_codes(codes, dtype=dtype)
        vocab = self.vocab.get(name, {})
        words = self.words.get(name)
        if words is None or len(words) != len(vocab):
            words = self.words[name] = np.array(list(vocab), dtype=object)
        if tag[0] == "str" and dtype.storage == "pyarrow" and len(words):
            return _arrow_take(words, codes, dtype)
        out = words[np.maximum(codes, 0)] if len(words) else np.empty(len(codes), object)
        if tag[0] == "obj":
            return out
        out[codes < 0] = None
        return pd.array(out, dtype=dtype)

    def frame(self, schema: _Schema, rows: Any) -> pd.DataFrame:
        """The frame of ``rows`` (a slice or positions) of ``schema``'s columns."""
        cols = {}
        for i, (c, tag, dt) in enumerate(zip(schema.columns, schema.tags, schema.dtypes)):
            cols[i] = pd.Series(self._decode(c, schema.column(i)[rows], tag, dt), dtype=dt, copy=False)
        out = pd.DataFrame(cols, copy=False)
        out.columns = schema.columns
        return out


def _arrow_take(words: np.ndarray, codes: np.ndarray, dtype: pd.StringDtype) -> Any:
    """``words[codes]`` (-1: missing) as an arrow-backed str array: taken by pyarrow from the
    few distinct words into one buffer of exactly the output's size. Built from an object
    array of every row instead, pyarrow's builder grows its buffer by doubling: a transient
    of up to twice the column, which at 512 ranks of top kernels (4 label columns, ~10 MB of
    text) was most of what the parent's peak grew by."""
    import pyarrow as pa

    taken = pa.array(words, type=pa.large_string()).take(pa.array(codes, mask=codes < 0))
    return pd.array(taken, dtype=dtype)


class Packed:
    """One frame's columns encoded (what a worker sends back instead of the frame: cheaper to
    pickle and to gather): numbers as arrays, categories as codes, labels as codes into
    ``words``; :meth:`load` gives the frame back."""

    __slots__ = ("arrays", "columns", "dtypes", "tags", "words")

    def __init__(self, columns: pd.Index, dtypes: list, tags: tuple, arrays: list, words: list):
        self.columns, self.dtypes, self.tags, self.arrays, self.words = columns, dtypes, tags, arrays, words

    def load(self) -> pd.DataFrame:
        t = _Table()
        t.add(0, self)
        return t.frame(t.where[0][0], slice(None))


def pack(df: Any) -> Any:
    """``df`` as a :class:`Packed`, or ``df`` itself when it is not encoded (see the module)."""
    got = _columns(df)
    if got is None:
        return df
    series, tags = got
    arrays: list[np.ndarray] = []
    words: list[list[str] | None] = []
    for s, tag in zip(series, tags):
        if tag[0] == "num":
            arrays.append(s.to_numpy(copy=True))
            words.append(None)
        elif tag[0] == "cat":
            arrays.append(s.array.codes.astype(np.int32))
            words.append(None)
        else:  # of the array, not the Series: no Index of the distinct values is built
            codes, uniques = pd.factorize(s.array)  # missing: -1
            arrays.append(codes.astype(np.int32))
            words.append(list(uniques))
    return Packed(df.columns, [s.dtype for s in series], tags, arrays, words)


def pack_tables(att: Any, tables: dict) -> tuple[Any, dict]:
    """A worker's result (:func:`tracekit.ranks.perfile.tabulate_file`) with its tables, steps,
    windows and memory events packed: what :meth:`RankTables.gather` folds in cheapest."""
    att.steps, att.windows, att.memory = pack(att.steps), pack(att.windows), pack(att.memory)
    att.critical = pack(att.critical)
    return att, {k: pack(v) for k, v in tables.items()}


def _columns(df: Any) -> tuple[list[pd.Series], tuple] | None:
    """The frame's columns and their encodings; None when it is not encoded (kept whole)."""
    if not isinstance(df, pd.DataFrame) or not isinstance(df.index, pd.RangeIndex):
        return None
    if df.index.start != 0 or df.index.step != 1 or df.index.name is not None:
        return None
    names = list(df.columns)
    if len(set(names)) != len(names) or (not names and len(df)):
        return None
    if not all(isinstance(c, str) for c in names):
        return None
    series = [s for _, s in df.items()]
    tags = tuple(_tag(s) for s in series)
    return None if any(t is None for t in tags) else (series, tags)


class RankTables:
    """Per slot (a file's index) and table key ``(kind, name)``, the frames of many ranks,
    compact (see the module's docstring)."""

    def __init__(self) -> None:
        self._tables: dict[tuple, _Table] = {}

    def add(self, slot: int, tables: dict) -> None:
        for key, df in tables.items():
            self._tables.setdefault(key, _Table()).add(slot, df)

    def gather(self, slot: int, att: Any, tables: dict, *, options: Any = None) -> Any:
        """What a worker returned for file ``slot``: its tables added here, and its analysis
        back with its ``steps``, ``windows``, ``memory`` and ``critical`` kept here too (each
        read back when asked for; one already held otherwise, as :mod:`tracekit.ranks.zipped`
        holds the memory rows, is left so), its meta's keys interned, and its intervals'
        handle holding the run's ``options`` (one object, not an unpickled copy per rank)."""
        self.add(slot, tables)
        held = att.__dict__["_intervals"]
        if options is not None and hasattr(held, "sharing"):
            att.__dict__["_intervals"] = held.sharing(options, att.path)
        att.meta = _interned(att.meta)
        frames = ("steps", "windows", "memory", "critical")
        # a frame held some other way already (the memory rows, tracekit.ranks.zipped) stays so
        kept = [n for n in frames if isinstance(att.__dict__["_" + n], (pd.DataFrame, Packed))]
        self.add(slot, {("att", name): att.__dict__["_" + name] for name in kept})
        for name in kept:
            setattr(att, name, _Held(self, ("att", name), slot))
        att.modules = _NO_MODULES  # read by no view (and not sent: an empty frame, one per rank)
        return att

    def has(self, key: tuple, slot: int) -> bool:
        t = self._tables.get(key)
        return t is not None and (slot in t.where or slot in t.whole)

    def frame(self, key: tuple, slot: int) -> Any:
        """The frame added for ``slot`` under ``key`` (a new one each time); KeyError if none."""
        t = self._tables[key]
        if slot in t.whole:
            return t.whole[slot]
        schema, start, stop = t.where[slot]
        return t.frame(schema, slice(start, stop))

    def concat(self, key: tuple, slots: list[int]) -> tuple[pd.DataFrame, list[int]] | None:
        """The frames of ``slots`` concatenated (what ``pd.concat(..., ignore_index=True)``
        gives) and their lengths, decoded at once; None unless all are encoded alike."""
        t = self._tables.get(key)
        if t is None or not slots or not all(s in t.where for s in slots):
            return None
        where = [t.where[s] for s in slots]
        if any(w[0] is not where[0][0] for w in where):
            return None
        rows = np.concatenate([np.arange(a, b) for _, a, b in where])
        return t.frame(where[0][0], rows), [b - a for _, a, b in where]

    def __iter__(self) -> Iterator[tuple]:
        return iter(self._tables)


def _interned(d: dict) -> dict:
    """``d`` with its string keys (and those of the dicts in it) interned: every rank's meta
    has the same dozen keys, each an unpickled string of its own otherwise."""
    out = {}
    for k, v in d.items():
        out[sys.intern(k) if type(k) is str else k] = _interned(v) if type(v) is dict else v
    return out


class _Held:
    """One frame of a :class:`RankTables`, as an Attributed holds its steps or windows."""

    __slots__ = ("key", "slot", "store")

    def __init__(self, store: RankTables, key: tuple, slot: int):
        self.store, self.key, self.slot = store, key, slot

    def load(self) -> pd.DataFrame:
        return self.store.frame(self.key, self.slot)


class Computed:
    """``Analysis._computed``: what was computed in this process (a dict), and for each rank
    that is one file, the tables a worker computed, read from a :class:`RankTables` (a new
    frame each time: nothing decoded is kept)."""

    def __init__(self, store: RankTables | None = None, slots: dict[int, int] | None = None):
        self._own: dict = {}
        self._store = store or RankTables()
        self._slots = slots or {}

    def __contains__(self, key: object) -> bool:
        if key in self._own:
            return True
        if not (isinstance(key, tuple) and len(key) == 3):
            return False
        slot = self._slots.get(key[2])
        return slot is not None and self._store.has(key[:2], slot)

    def __getitem__(self, key: tuple) -> Any:
        if key in self._own:
            return self._own[key]
        if key in self:
            return self._store.frame(key[:2], self._slots[key[2]])
        raise KeyError(key)

    def __setitem__(self, key: tuple, value: Any) -> None:
        self._own[key] = value

    def concat(self, kind: str, name: str, ranks: list[int]) -> tuple[pd.DataFrame, list[int]] | None:
        """The ranks' gathered frames concatenated, and their lengths (:meth:`RankTables.concat`);
        None when some rank's is not gathered (or was computed here) or they differ in shape."""
        if any((kind, name, r) in self._own or r not in self._slots for r in ranks):
            return None
        return self._store.concat((kind, name), [self._slots[r] for r in ranks])

    def items(self) -> Iterator[tuple[tuple, Any]]:
        yield from self._own.items()
        for key in self._store:
            for rank, slot in self._slots.items():
                if self._store.has(key, slot) and (*key, rank) not in self._own:
                    yield (*key, rank), self._store.frame(key, slot)
