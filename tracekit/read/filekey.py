"""A trace file's identity, the key of its cache entries (:mod:`tracekit.read.cache`,
:mod:`tracekit.ranks.results`): a cache must never answer for content it did not read.

The key holds the file's device, inode, size, modification time and **change time** (ns): the
change time moves on every write, also one whose modification time was put back (``touch -d``,
``os.utime``), and users cannot set it. It also holds a SHA-256 of the file's first and last
64 KiB and of 16 blocks of 4 KiB spread between them (a few seeks), the read limit, tracekit's
version and the cache format.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat

#: Version of the cached columns; bump when read.py's output changes.
FORMAT = "tracekit-raw-13"
_EDGE = 1 << 16
#: Blocks of the middle of a trace its key hashes too.
_SAMPLES, _SAMPLE = 16, 1 << 12


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
            for at in _samples(st.st_size):
                f.seek(at)
                h.update(f.read(_SAMPLE))
            f.seek(max(_EDGE, st.st_size - _EDGE))
            h.update(f.read(_EDGE))
    return json.dumps(
        [
            FORMAT,
            _version(),
            st.st_dev,
            st.st_ino,
            st.st_size,
            st.st_mtime_ns,
            st.st_ctime_ns,  # a write with its mtime put back still moves the change time
            h.hexdigest(),
            int(max_bytes),
        ]
    )


def _samples(size: int) -> range:
    """Offsets of the blocks of the middle of a file of ``size`` bytes that its key hashes."""
    middle = size - 2 * _EDGE
    if middle <= 0:
        return range(0)
    step = max(_SAMPLE, middle // _SAMPLES)
    return range(_EDGE, size - _EDGE, step)
