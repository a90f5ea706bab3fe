"""A Parquet cache of a trace's parsed columns, keyed by the file's identity.

Reading (decoding JSON) is the slow part of an analysis; link and attribute are fast. So the
:class:`~tracekit.read.RawTrace` of a file is saved as Parquet and read back instead of the
JSON when the file has not changed:

* where: ``<trace>.tracekit.parquet`` beside the trace; when that folder is not writable, in
  the cache directory (``$TRACEKIT_CACHE_DIR``, else ``$XDG_CACHE_HOME/tracekit``, else
  ``~/.cache/tracekit``) under a name derived from the key;
* key: the resolved path, size, modification time (ns), inode and device of the trace, the
  read limit, and :data:`FORMAT` (bumped whenever the reader's columns or rules change). The key
  is stored in the Parquet file's metadata and must match exactly, else the entry is ignored and
  rewritten;
* writes go to a temporary file renamed into place, so a reader never sees half a file; a
  cache that cannot be read or written is skipped silently (it is only a cache).

Parquet holds typed columns only: nothing in a cache file is evaluated or unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .read import RawTrace

#: Version of the cached columns; bump when read.py's output changes.
FORMAT = "tracekit-raw-1"
SUFFIX = ".tracekit.parquet"
_META_KEY = b"tracekit"


def cache_dir() -> Path:
    env = os.environ.get("TRACEKIT_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tracekit"


def file_key(path: str | os.PathLike, max_bytes: int) -> str:
    p = Path(path).resolve()
    st = p.stat()
    return json.dumps([FORMAT, str(p), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev,
                       int(max_bytes)])


def _locations(path: str | os.PathLike, key: str) -> list[Path]:
    p = Path(path)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return [p.with_name(p.name + SUFFIX), cache_dir() / f"{digest}{SUFFIX}"]


def _writable(folder: Path) -> bool:
    """Writable, and not marked read-only (root may write anywhere; it should not here)."""
    try:
        return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)
    except OSError:
        return False


def load(path: str | os.PathLike, max_bytes: int) -> RawTrace | None:
    """The cached RawTrace of ``path``, or None when there is no valid entry."""
    try:
        key = file_key(path, max_bytes)
    except OSError:
        return None
    for loc in _locations(path, key):
        try:
            if not loc.is_file():
                continue
            table = pq.read_table(loc)
            info = json.loads((table.schema.metadata or {}).get(_META_KEY, b"{}"))
            if info.get("key") != key:
                continue
            events = table.to_pandas()
        except Exception:  # unreadable or foreign: a miss, never an error
            continue
        return RawTrace(path=os.fspath(path), events=events, meta=info["meta"],
                        warnings=info["warnings"])
    return None


def store(raw: RawTrace, path: str | os.PathLike, max_bytes: int) -> Path | None:
    """Save ``raw`` for ``path``; the location written, or None when nowhere was writable."""
    try:
        key = file_key(path, max_bytes)
    except OSError:
        return None
    info = json.dumps({"key": key, "meta": raw.meta, "warnings": raw.warnings},
                      default=str).encode()
    table = pa.Table.from_pandas(raw.events, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), _META_KEY: info})
    for loc in _locations(path, key):
        tmp = None
        if loc.parent.is_dir() and not _writable(loc.parent):
            continue
        try:
            loc.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tracekit-", suffix=".tmp", dir=loc.parent)
            os.close(fd)
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, loc)
            return loc
        except OSError:
            if tmp:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            continue
    return None
