"""The result cache: a trace file's analysis, so that a re-analysis runs no pipeline.

The parse cache (:mod:`tracekit.read.cache`) saves the decode; this saves everything after it. An
entry holds what :func:`tracekit.ranks.perfile.tabulate_file` computes for one file: its
:class:`~tracekit.pipeline.Attributed` (intervals, steps, windows, meta,
warnings) and its tables as one rank (the means over steps and the self-checks). It is one
Parquet file, ``<sha256 of the key>.result.parquet`` beside the parse cache's entries:

* the intervals are the file's columns, read only when something needs them (per-step
  tables, filters, ``Analysis.intervals``): :class:`Stored` is the handle a lazy
  :class:`~tracekit.pipeline.Attributed` holds instead of them, and is what a worker sends back
  to the parent in place of the intervals;
* everything else is in the footer: one JSON object (key, mode, meta, warnings, checks) and
  the small frames (steps, windows, memory events, tables) packed as the parent gathers them,
  all in one Arrow IPC stream (:mod:`tracekit.ranks.packed_ipc`: typed columns and codes, no
  pickle, no pandas on either side);
* key: the parse cache's file key (device, inode, size, mtime, edge hashes, read limit,
  tracekit's version), :data:`RESULT_FORMAT`, a fingerprint of tracekit's own code and rule
  files (so an edited checkout never reuses old results), and the path and SHA-256 of the
  ``--taxonomy`` / ``--kernel-rules`` files. Taken before the analysis and checked again
  before storing: a trace changed meanwhile caches nothing;
* trusted only after its seal checks (:func:`tracekit.read.cache.read_sealed`: a keyed checksum
  of the whole file, checked before anything in it is decoded), then the footer shows the right
  key, the interval columns with plain types and every size within the parse cache's bound
  (64x the trace's size on disk plus 16 MiB: the entry file itself, its columns decoded as rows
  times widths, and the frames' IPC stream, validated before anything reads it); anything else
  is a miss and is rewritten;
* one size bound and LRU over both kinds of entries (:func:`tracekit.read.cache.after_store`).

A handle whose entry is gone when its intervals are wanted (evicted, cleared, or written on a
Dask worker whose cache directory this process cannot see) analyses the file again here and
stores the result; a trace changed since then is a :class:`~tracekit.errors.TraceError`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TraceError
from ..pipeline import INTERVAL_COLUMNS, Attributed
from ..pipeline.checks import TraceWarning
from ..read import cache
from . import packed_ipc

#: Version of a result entry's layout; bump when what is stored changes shape.
RESULT_FORMAT = "tracekit-result-4"
SUFFIX = ".result.parquet"
_INFO = b"tracekit-result"
#: The footer key of the small frames' IPC stream (:mod:`tracekit.ranks.packed_ipc`).
_FRAMES_KEY = b"tracekit-frames"
#: The frames of the Attributed stored (its module instances are not: no table or view reads
#: them after the pipeline, see :func:`tracekit.ranks.analyse.fresh`).
_FRAMES = ("steps", "windows", "memory", "critical")
_RULES_MAX_BYTES = 16 << 20
#: An entry of at most this many intervals is written with lz4 and without column statistics
#: (:func:`_write`); a bigger one with zstd, as before.
SMALL_ENTRY_ROWS = 1 << 16


def _rules_file(path: str | None) -> list | None:
    """The identity of a user rules file: its path (rule ids name it) and content hash."""
    if not path:
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > _RULES_MAX_BYTES:
            raise OSError(f"{path}: not a regular file of a sensible size")
        return [os.fspath(path), hashlib.sha256(f.read(_RULES_MAX_BYTES + 1)).hexdigest()]


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A fingerprint of tracekit's code and built-in rules (every .py and .toml file's name,
    size and mtime): results are a function of them, and an editable install changes them
    without changing the version."""
    import tracekit.analyses

    h = hashlib.sha256()
    for root in (Path(__file__).parents[1], Path(tracekit.analyses.__file__).parent):
        for p in sorted(root.rglob("*")):
            if p.suffix in (".py", ".toml") and "__pycache__" not in p.parts:
                st = p.stat()
                h.update(f"{p.relative_to(root.parent)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def result_key(path: str | os.PathLike, options: Any) -> str | None:
    """The key of ``path``'s result under ``options``; None when it cannot be taken. A run
    that asks for some tables only (``options.tables``) reads the entry of a run of all of
    them (which holds them) and stores none (:func:`tracekit.ranks.perfile.tabulate_fresh`)."""
    try:
        return json.dumps(
            [
                RESULT_FORMAT,
                cache.file_key(path, options.max_bytes),
                code_digest(),
                _rules_file(options.taxonomy),
                _rules_file(options.kernel_rules),
                _rules_file(options.devices),
                options.peak_tflops,
                options.peak_bandwidth,
                *(["full series"] if getattr(options, "full_series", False) else []),
            ]
        )
    except (OSError, ValueError):
        return None


def _digest(key: str) -> bytes:
    """What a handle keeps of a key (a SHA-256): the key itself is a few hundred bytes."""
    return hashlib.sha256(key.encode()).digest()


def entry(key: str) -> Path:
    return cache.cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + SUFFIX)


def _bound(trace_size: int) -> int:
    return cache._EXPANSION * trace_size + cache._SLACK


def _plain(t: pa.DataType) -> bool:
    """Types a stored table may have: numbers, booleans, strings, categories of strings."""
    if pa.types.is_dictionary(t):
        return pa.types.is_string(t.value_type) or pa.types.is_large_string(t.value_type)
    return any(
        f(t)
        for f in (
            pa.types.is_integer,
            pa.types.is_floating,
            pa.types.is_boolean,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_null,
        )
    )


def _arrow(df: pd.DataFrame) -> pa.Table:
    """``df`` as an Arrow table: the one ``pa.Table.from_pandas(df, preserve_index=False)``
    gives, without its pandas metadata (the entry's footer replaces it), built from the
    columns' arrays as pandas stores them (no Series per column, no metadata: 2.7 -> 0.5 ms
    for a rank of 45 columns). Refused (ValueError) when reading it back would not give the
    same frame: an index other than the positions 0..n-1 (it comes back as a RangeIndex), a
    column name that is not a string, or one that repeats."""
    if df.index.name is not None or not df.index.equals(pd.RangeIndex(len(df))):
        raise ValueError("index")
    names = list(df.columns)
    if not all(isinstance(c, str) for c in names) or len(set(names)) != len(names):
        raise ValueError("column names")
    own = getattr(df, "_iter_column_arrays", None)  # pandas' own iteration: no Series built
    if callable(own):
        arrays = list(own())
    else:
        arrays = [s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array for _, s in df.items()]
    return pa.Table.from_arrays([_arrow_column(a) for a in arrays], names=names)


def _arrow_column(a: Any) -> pa.Array:
    """One column as ``from_pandas`` converts it: NaN and missing values as nulls, a
    categorical as a dictionary of its categories (all of them, in order)."""
    if isinstance(a, pd.Categorical):
        codes = a.codes
        cats = pa.array(a.categories, from_pandas=True)
        return pa.DictionaryArray.from_arrays(pa.array(codes, mask=codes == -1), cats, ordered=a.ordered)
    return pa.array(a, from_pandas=True)


def _warning_json(w: Any) -> dict:
    if isinstance(w, TraceWarning):
        return {"code": w.code, "message": w.message, "rank": w.rank, "step": w.step}
    return {"text": str(w)}


def _warning(d: Any) -> Any:
    """A warning back from its JSON (ValueError when it is not one tracekit wrote)."""
    if isinstance(d, dict) and isinstance(d.get("text"), str):
        return d["text"]
    if not (isinstance(d, dict) and isinstance(d.get("code"), str) and isinstance(d.get("message"), str)):
        raise ValueError("warning")
    rank, step = d.get("rank"), d.get("step")
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (rank, step)):
        raise ValueError("warning")
    return TraceWarning(d["code"], d["message"], rank, step)


def _footer(att: Attributed, tables: dict, key: str) -> dict[bytes, bytes]:
    """The footer of an entry: the JSON object and the small frames, packed, as one Arrow IPC
    stream (:mod:`tracekit.ranks.packed_ipc`; ValueError when something would not read back exactly)."""
    frames = {name: att.__dict__["_" + name] for name in _FRAMES}
    named = [k for k in tables if k != ("checks", "")]
    frames.update({f"table:{kind}/{name}": tables[(kind, name)] for kind, name in named})
    descs, blob = packed_ipc.encode(frames)
    checks = tables.get(("checks", ""), [])
    info = {
        "key": key,
        "mode": att.mode,
        "meta": att.meta,
        "warnings": [_warning_json(w) for w in att.warnings],
        "checks": [_warning_json(w) for w in checks],
        "tables": [list(k) for k in named],
        "has_checks": ("checks", "") in tables,
        "frames": descs,
    }
    text = json.dumps(info, allow_nan=False)
    if json.loads(text)["meta"] != att.meta:  # a tuple, an int key, a numpy number: not exact
        raise ValueError("meta")
    return {_INFO: text.encode(), _FRAMES_KEY: blob}


def store(att: Attributed, tables: dict, path: str | os.PathLike, options: Any, key: str) -> Stored | None:
    """Save ``att`` (in memory) and ``tables`` (:func:`~tracekit.ranks.perfile.tabulate_file`) of
    ``path``, analysed when its key was ``key``; the handle to the entry, or None (the file
    changed meanwhile, the cache directory is not writable, or something is not storable)."""
    try:
        if att.lazy or result_key(path, options) != key:
            return None  # replaced or modified while analysed: never cache old results under it
        footer = {**_footer(att, tables, key), **cache.SEAL_HOLE}
        table = _arrow(att.intervals).replace_schema_metadata(footer)
        loc = entry(key)
        loc.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        _write(table, loc)
        size = os.stat(path).st_size
    except Exception:
        return None
    cache.after_store(loc)
    return Stored(os.fspath(loc), _digest(key), os.fspath(path), size, options)


def _write(table: pa.Table, loc: Path) -> None:
    """Write an entry's Parquet. A small one (:data:`SMALL_ENTRY_ROWS`; a rank of a few
    thousand intervals is its columns' fixed costs, not its data) with lz4, no column
    statistics (nothing reads them) and dictionary pages for the categorical columns only:
    zstd made a fresh context per page and the other columns were tried as dictionaries first,
    3.3 of the 3.6 ms an entry of 558 intervals and 45 columns took; now 1.2 ms (CPU, warm
    process), and the file is no bigger. Read back identically either way (the tests)."""
    if table.num_rows > SMALL_ENTRY_ROWS:
        cache.write_sealed(loc, table, compression="zstd")
        return
    dictionaries = [c.name for c in table.schema if pa.types.is_dictionary(c.type)]
    cache.write_sealed(loc, table, compression="lz4", write_statistics=False, use_dictionary=dictionaries)


def _open(loc: Path, digest: bytes, trace_size: int) -> tuple[pq.ParquetFile, dict] | None:
    """The entry's file and JSON object once its footer shows it is the one for the key whose
    :func:`_digest` is ``digest``, with
    plain interval columns, every size in bounds; None otherwise (a miss)."""
    limit = _bound(trace_size)
    pf = cache.read_sealed(loc, limit)  # the whole entry, its seal checked
    if pf is None:
        return None
    info = json.loads((pf.schema_arrow.metadata or {}).get(_INFO, b"{}"))
    if not isinstance(info, dict) or not isinstance(info.get("key"), str) or _digest(info["key"]) != digest:
        return None
    schema = pf.schema_arrow
    if schema.names != INTERVAL_COLUMNS or not all(_plain(f.type) for f in schema):
        return None
    if cache.decoded_bound(pf) > limit:
        return None
    return pf, info


def _summary(loc: Path, digest: bytes, trace_size: int) -> tuple[dict, dict] | None:
    """The JSON object and small frames (packed) of an entry, or None when it is not valid."""
    got = _open(loc, digest, trace_size)
    if got is None:
        return None
    pf, info = got
    kinds = info.get("tables")
    if not isinstance(kinds, list) or not all(isinstance(k, list) and len(k) == 2 for k in kinds):
        return None
    if not all(isinstance(p, str) for k in kinds for p in k):
        return None
    md = pf.schema_arrow.metadata or {}
    frames = packed_ipc.decode(info.get("frames"), md.get(_FRAMES_KEY), _bound(trace_size))
    names = {*_FRAMES, *(f"table:{k[0]}/{k[1]}" for k in kinds)}
    if frames is None or set(frames) != names:
        return None
    if not isinstance(info.get("meta"), dict) or info.get("mode") not in ("gpu", "cpu"):
        return None
    return info, frames


def load(path: str | os.PathLike, options: Any) -> tuple[Attributed, dict] | None:
    """The cached result of ``path`` as :func:`~tracekit.ranks.perfile.tabulate_file` returns it,
    intervals lazy (a :class:`Stored`), steps, windows and tables packed
    (:class:`~tracekit.ranks.gathered.Packed`), or None when there is no valid entry."""
    try:
        key = result_key(path, options)
        if key is None:
            return None
        loc, size, digest = entry(key), os.stat(path).st_size, _digest(key)
        got = _summary(loc, digest, size) if loc.is_file() else None
        if got is None:
            return None
        info, frames = got
        att = Attributed(
            path=os.fspath(path),
            mode=info["mode"],
            intervals=Stored(os.fspath(loc), digest, os.fspath(path), size, options),
            steps=frames["steps"],
            windows=frames["windows"],
            memory=frames["memory"],
            critical=frames["critical"],
            meta=info["meta"],
            warnings=[_warning(w) for w in info.get("warnings", [])],
        )
        tables: dict = {tuple(k): frames[f"table:{k[0]}/{k[1]}"] for k in info["tables"]}
        if info.get("has_checks"):
            tables[("checks", "")] = [_warning(w) for w in info.get("checks", [])]
    except Exception:
        return None
    try:
        os.utime(loc)  # least recently used goes first
    except OSError:
        pass
    return att, tables


@dataclass(frozen=True, slots=True)
class Stored:
    """Where a file's intervals are: a result entry (picklable; what a worker sends back).
    :meth:`load` reads them, or analyses the file again when the entry is gone. A parent keeps
    one per rank: slots, the key's digest (not the key), and (:meth:`sharing`) the run's one
    Options object and the rank's path string."""

    entry: str
    digest: bytes
    source: str
    trace_size: int
    options: Any

    def sharing(self, options: Any, source: str) -> Stored:
        """This handle holding ``options`` and ``source`` (when equal to its own) instead of its
        copies: what a parent keeps of each rank's handle."""
        same = options == self.options and source == self.source
        return replace(self, options=options, source=source) if same else self

    def load(self, columns: list[str] | None = None) -> pd.DataFrame:
        try:
            got = _open(Path(self.entry), self.digest, self.trace_size)
            if got is not None:
                return got[0].read(columns=columns).to_pandas(ignore_metadata=True)
        except Exception:
            pass
        return self._again(columns)

    def _again(self, columns: list[str] | None) -> pd.DataFrame:
        """The intervals computed again from the trace (and stored again), the same as stored
        as long as the trace is the same file."""
        from .analyse import fresh

        key = result_key(self.source, self.options)
        if key is None or _digest(key) != self.digest:
            raise TraceError(self.source, "changed since it was analysed; analyse it again")
        att, tables = fresh(self.source, self.options, cached=True)[0]  # a stored file is one rank
        store(att, tables, self.source, self.options, key)
        return att.load_intervals(columns)
