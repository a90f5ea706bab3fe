"""A Parquet cache of a trace's parsed columns, in the user's cache directory.

Reading (decoding JSON) is the slow part of an analysis; link and attribute are fast. So the
:class:`~tracekit.read.reader.RawTrace` of a file is saved as Parquet and read back instead of the
JSON when the file has not changed:

* where: ``$TRACEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracekit``, else ``~/.cache/tracekit``,
  one ``<sha256 of the key>.parquet`` per trace. Nothing is ever written beside a trace;
* key: the trace's device, inode, size, modification time (ns), a hash of its first and last
  64 KiB, the read limit, tracekit's version and :data:`FORMAT`. The key is taken before the
  trace is read and again after; if the file changed while it was read nothing is cached;
* a cache file is trusted only after (:func:`read_sealed`) its seal checks: a keyed checksum
  (HMAC-SHA256, under a random key kept in the cache directory, mode 0600) of the whole file,
  computed when tracekit wrote it. A flipped bit, a half-written file, an entry planted or
  copied from elsewhere is a miss before any byte of it is decoded. Then its footer (never its
  columns) must show the right key, the expected columns and types, and a decoded size (rows
  times column widths, plus the strings: :func:`decoded_bound`) bounded by the trace's own
  size; anything else is a miss and is rewritten, never an error;
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
import hmac
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
FORMAT = "tracekit-raw-9"
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
    from .._version import __version__

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
    limit = _EXPANSION * trace_size + _SLACK
    pf = read_sealed(loc, limit)
    if pf is None:
        return None
    info = json.loads((pf.schema_arrow.metadata or {}).get(_META_KEY, b"{}"))
    if not isinstance(info, dict) or info.get("key") != key:
        return None
    if not _valid_schema(pf.schema_arrow) or decoded_bound(pf) > limit:
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
    """Save ``raw`` (its events and memory events as one table; a load splits them again), read
    from ``path`` when its identity was ``key``; the entry written, or None (the file changed
    while it was read, or the cache directory is not writable)."""
    try:
        if file_key(path, max_bytes) != key:
            return None  # replaced or modified while read: never cache old events under it
        info = json.dumps({"key": key, "meta": raw.meta, "warnings": raw.warnings}, default=str).encode()
        frames = [raw.events] if raw.memory is None or raw.memory.empty else [raw.events, raw.memory]
        table = pa.concat_tables([pa.Table.from_pandas(f, preserve_index=False) for f in frames])
        table = table.replace_schema_metadata({_META_KEY: info, **SEAL_HOLE})
        loc = _entry(key)
        loc.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_sealed(loc, table, compression="zstd")
    except Exception:
        return None
    after_store(loc)
    return loc


#: The footer entry that holds an entry's seal; written as zeros, then filled in place.
_SEAL_KEY = b"tracekit-seal"
SEAL_HOLE = {_SEAL_KEY: b"hmac-sha256:" + b"0" * 64}
_SEAL = re.compile(rb"tracekit-seal[\x00-\xff]{1,4}?hmac-sha256:([0-9a-f]{64})")
_KEY_FILE = ".seal-key"


def _seal_key(create: bool) -> bytes | None:
    """This cache directory's secret (32 random bytes, mode 0600), made when first needed."""
    path = cache_dir() / _KEY_FILE
    try:
        with open(path, "rb") as f:
            key = f.read(64)
        if len(key) == 32:
            return key
    except OSError:
        pass
    if not create:
        return None
    tmp = path.with_name(f"{_KEY_FILE}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with open(fd, "wb") as f:
        f.write(os.urandom(32))
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return _seal_key(False)


def _mac(key: bytes, data: bytes | bytearray, at: int) -> bytes:
    """The seal of ``data`` whose seal's hex digits start at ``at`` (read as zeros)."""
    h = hmac.new(key, memoryview(data)[:at], hashlib.sha256)
    h.update(b"0" * 64)
    h.update(memoryview(data)[at + 64 :])
    return h.hexdigest().encode()


def _seal_at(data: bytes | bytearray) -> int | None:
    """Where the seal's hex digits are: in the Parquet footer (the file's last bytes)."""
    if len(data) < 12 or data[-4:] != b"PAR1":
        return None
    footer = int.from_bytes(data[-8:-4], "little")
    lo = len(data) - 8 - footer
    if footer <= 0 or lo < 4:
        return None
    found = [m.start(1) for m in _SEAL.finditer(data, lo, len(data) - 8)]
    return found[0] if len(found) == 1 else None


def write_sealed(loc: Path, table: pa.Table, **options) -> None:
    """Write ``table`` (its metadata holding :data:`SEAL_HOLE`) as a sealed Parquet entry."""
    from ..safewrite import atomic_file

    key = _seal_key(create=True)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    data = bytearray(sink.getvalue().to_pybytes())
    at = _seal_at(data)
    if key is None or at is None:
        raise ValueError("cannot seal")
    data[at : at + 64] = _mac(key, data, at)
    with atomic_file(loc, sync_dir=False) as f:
        f.write(data)


def read_sealed(loc: Path, limit: int) -> pq.ParquetFile | None:
    """The entry at ``loc``, read whole (at most ``limit`` bytes) and opened from memory, if
    its seal is this cache's; None otherwise. (Nothing is decoded before the seal is checked,
    and what is decoded is what was checked.)"""
    key = _seal_key(create=False)
    if key is None:
        return None
    with open(loc, "rb") as f:
        data = f.read(limit + 1)
    at = _seal_at(data) if len(data) <= limit else None
    if at is None or not hmac.compare_digest(_mac(key, data, at), data[at : at + 64]):
        return None
    return pq.ParquetFile(pa.py_buffer(data))


def _width(t: pa.DataType) -> int:
    """Bytes per value of a column of type ``t`` (of a string: its offset)."""
    if pa.types.is_dictionary(t):
        return _width(t.index_type)
    if pa.types.is_boolean(t) or pa.types.is_null(t):
        return 1
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return 4
    try:
        return max(1, t.bit_width // 8)
    except ValueError:
        return 8


def decoded_bound(pf: pq.ParquetFile) -> int:
    """The size the entry's columns take decoded: rows times the columns' widths, plus their
    strings (the byte arrays' own size in the file). Parquet's encoded sizes are no bound: a
    column of one repeated value encodes to a few bytes whatever its rows."""
    md = pf.metadata
    rows = sum(md.row_group(i).num_rows for i in range(md.num_row_groups))
    fixed = rows * sum(_width(f.type) for f in pf.schema_arrow)
    strings = 0
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        for j in range(rg.num_columns):
            col = rg.column(j)
            if col.physical_type == "BYTE_ARRAY":
                strings += max(col.total_uncompressed_size, col.total_compressed_size)
    return fixed + strings


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
    """Remove every entry (and leftover temporaries, and the seal's key: a new one is made by
    the next store); the number of entries and temporaries removed."""
    _SCAN["where"] = None
    n = 0
    try:
        names = [p for p in cache_dir().iterdir() if _ENTRY.fullmatch(p.name) or _TEMP.fullmatch(p.name)]
    except OSError:
        return 0
    try:
        (cache_dir() / _KEY_FILE).unlink()
    except OSError:
        pass
    for p in names:
        try:
            p.unlink()
            n += 1
        except OSError:
            pass
    return n
