"""A Parquet cache of a trace's parsed columns, in the user's cache directory.

Reading (decoding JSON) is the slow part of an analysis; link and attribute are fast. So the
:class:`~tracekit.read.reader.RawTrace` of a file is saved as Parquet and read back instead of the
JSON when the file has not changed:

* where: ``$TRACEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracekit``, else ``~/.cache/tracekit``,
  one ``<sha256 of the key>.parquet`` per trace. Nothing is ever written beside a trace;
* key: the trace's device, inode, size, modification time (ns), a hash of its first and last
  64 KiB, the read limit, tracekit's version and :data:`FORMAT`. The key is taken before the
  trace is read and again after; if the file changed while it was read nothing is cached;
* a cache file is trusted only after its footer (never its columns) shows the right key, the
  expected columns and types, and an in-memory size bounded by the trace's own size; anything
  else (unreadable, forged, foreign) is a miss and is rewritten, never an error;
* size bound: ``$TRACEKIT_CACHE_MAX_BYTES`` (default 2 GiB), least recently used entries
  evicted first (:func:`after_store`); ``tracekit cache info`` / ``tracekit cache clear``;
* writes go through :mod:`tracekit.safewrite` (temporary name, fsync, rename).

Parquet holds typed columns only: nothing in a cache file is evaluated or unpickled.

The result cache (:mod:`tracekit.ranks.results`: a file's analysis, so a re-analysis runs no pipeline)
keeps its entries (``<hash>.result.parquet``) in the same directory under the same rules; the
size bound, :func:`evict`, :func:`info` and :func:`clear` cover both kinds.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .columns import CATEGORICAL_COLUMNS
from .reader import _COLUMNS, RawTrace

#: Version of the cached columns; bump when read.py's output changes.
FORMAT = "tracekit-raw-7"
SUFFIX = ".parquet"
_META_KEY = b"tracekit"
#: Entry names: the parse cache's ``<hash>.parquet`` and the result cache's ``<hash>.result.parquet``
#: (:mod:`tracekit.ranks.results`); one size bound and one LRU order over both.
_ENTRY = re.compile(r"[0-9a-f]{32}(\.result)?\.parquet")
_TEMP = re.compile(r"\.[0-9a-f]{32}(\.result)?\.parquet\..*\.tmp")
DEFAULT_MAX_CACHE_BYTES = 2 * 1024**3
_EDGE = 1 << 16
#: In-memory columns may be this many times the trace's size on disk (gzip included), plus slack.
_EXPANSION, _SLACK = 64, 16 << 20
_CATEGORICAL = set(CATEGORICAL_COLUMNS)
_TYPES = {
    "kind": pa.int8(),
    "bytes": pa.float64(),
    "total_allocated": pa.float64(),
    "total_reserved": pa.float64(),
}


def cache_dir() -> Path:
    env = os.environ.get("TRACEKIT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tracekit"


def max_cache_bytes() -> int:
    try:
        return max(0, int(os.environ.get("TRACEKIT_CACHE_MAX_BYTES", DEFAULT_MAX_CACHE_BYTES)))
    except ValueError:
        return DEFAULT_MAX_CACHE_BYTES


def _version() -> str:
    from .. import __version__

    return __version__


def file_key(path: str | os.PathLike, max_bytes: int) -> str:
    """The identity of the bytes at ``path`` now (raises OSError when it cannot be read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    with open(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{os.fsdecode(path)}: not a regular file")
        h = hashlib.sha256(f.read(_EDGE))
        if st.st_size > _EDGE:
            f.seek(max(_EDGE, st.st_size - _EDGE))
            h.update(f.read(_EDGE))
    return json.dumps(
        [FORMAT, _version(), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, h.hexdigest(), int(max_bytes)]
    )


def _entry(key: str) -> Path:
    return cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + SUFFIX)


def _valid_schema(schema: pa.Schema) -> bool:
    if schema.names != list(_COLUMNS):
        return False
    for f in schema:
        if f.name in _CATEGORICAL:
            ok = pa.types.is_dictionary(f.type) and pa.types.is_string(f.type.value_type)
        else:
            ok = f.type == _TYPES.get(f.name, pa.int64())
        if not ok:
            return False
    return True


def _load_entry(loc: Path, key: str, trace_size: int) -> RawTrace | None:
    pf = pq.ParquetFile(loc)  # reads the footer only
    info = json.loads((pf.schema_arrow.metadata or {}).get(_META_KEY, b"{}"))
    if not isinstance(info, dict) or info.get("key") != key:
        return None
    md = pf.metadata
    in_memory = sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
    if in_memory > _EXPANSION * trace_size + _SLACK or not _valid_schema(pf.schema_arrow):
        return None
    meta, warnings = info.get("meta"), info.get("warnings")
    if not isinstance(meta, dict) or not isinstance(warnings, list):
        return None
    events = pf.read().to_pandas(ignore_metadata=True)
    return RawTrace(path="", events=events, meta=meta, warnings=[str(w) for w in warnings])


def load(path: str | os.PathLike, max_bytes: int) -> RawTrace | None:
    """The cached RawTrace of ``path``, or None when there is no valid entry."""
    try:
        key = file_key(path, max_bytes)
        loc = _entry(key)
        raw = _load_entry(loc, key, os.stat(path).st_size) if loc.is_file() else None
    except Exception:
        return None
    if raw is None:
        return None
    try:
        os.utime(loc)  # least recently used goes first
    except OSError:
        pass
    raw.path = os.fspath(path)
    return raw


def store(raw: RawTrace, path: str | os.PathLike, max_bytes: int, key: str) -> Path | None:
    """Save ``raw``, read from ``path`` when its identity was ``key``; the entry written, or
    None (the file changed while it was read, or the cache directory is not writable)."""
    from ..safewrite import atomic_file

    try:
        if file_key(path, max_bytes) != key:
            return None  # replaced or modified while read: never cache old events under it
        info = json.dumps({"key": key, "meta": raw.meta, "warnings": raw.warnings}, default=str).encode()
        table = pa.Table.from_pandas(raw.events, preserve_index=False)
        table = table.replace_schema_metadata({_META_KEY: info})
        loc = _entry(key)
        loc.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with atomic_file(loc, sync_dir=False) as f:
            pq.write_table(table, f, compression="zstd")
    except Exception:
        return None
    after_store(loc)
    return loc


def entries() -> list[Path]:
    """The cache's entries (only files named as tracekit names them)."""
    try:
        return [p for p in cache_dir().iterdir() if _ENTRY.fullmatch(p.name) and p.is_file()]
    except OSError:
        return []


def evict(limit: int, keep: Path | None = None) -> int:
    """Remove least recently used entries until the cache holds at most ``limit`` bytes (7/8
    of it once over it); the number of entries removed."""
    return _evict(limit, keep)[0]


def _evict(limit: int, keep: Path | None) -> tuple[int, int]:
    """:func:`evict`, and the bytes the cache holds after."""
    sized = []
    for p in entries():
        try:
            st = p.stat()
        except OSError:
            continue
        sized.append((st.st_mtime_ns, st.st_size, p))
    total = sum(s for _, s, _ in sized)
    target = limit if total <= limit else limit - limit // 8  # room for a few writes before the next scan
    removed = 0
    for _, size, p in sorted(sized):
        if total <= target:
            break
        if p == keep:
            continue
        try:
            p.unlink()
        except OSError:
            continue
        total -= size
        removed += 1
    return removed, total


#: Per process: the directory and bound of the last scan, the bytes found, bytes written since.
_SCAN: dict = {"where": None, "total": 0, "since": 0}
#: Writers assumed to share the directory at once (a pool's workers): the bound holds for them.
_WRITERS = max(4, os.cpu_count() or 1)


def after_store(loc: Path) -> None:
    """Keep the size bound after ``loc`` was written (both kinds of entries). The directory is
    listed (and LRU-evicted) only when this process's writes since its last listing, times
    :data:`_WRITERS`, could have filled the room it found then: a run storing thousands of
    entries does not list thousands of entries for each one (quadratic in the entry count)."""
    limit = max_cache_bytes()
    try:
        size = loc.stat().st_size
    except OSError:
        size = 0
    where = (os.fspath(cache_dir()), limit)
    _SCAN["since"] += size
    if _SCAN["where"] == where and _SCAN["total"] + _WRITERS * _SCAN["since"] <= limit:
        return
    _SCAN.update(where=where, total=_evict(limit, loc)[1], since=0)


def info() -> dict:
    """Where the cache is, its entries and bytes (all, and the result cache's), and its bound."""
    sizes, results = [], 0
    for p in entries():
        try:
            sizes.append(p.stat().st_size)
        except OSError:
            continue
        results += p.name.endswith(".result.parquet")
    return {
        "directory": os.fspath(cache_dir()),
        "entries": len(sizes),
        "result_entries": results,
        "bytes": sum(sizes),
        "max_bytes": max_cache_bytes(),
    }


def clear() -> int:
    """Remove every entry (and leftover temporaries); the number of files removed."""
    _SCAN["where"] = None
    n = 0
    try:
        names = [p for p in cache_dir().iterdir() if _ENTRY.fullmatch(p.name) or _TEMP.fullmatch(p.name)]
    except OSError:
        return 0
    for p in names:
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    return n
