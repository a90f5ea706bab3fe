"""Gzip inflation for the readers: ISA-L's (``isal``) where it is installed, zlib's otherwise.

Intel's ISA-L inflates a Kineto trace about 5x faster than zlib: a 1 GB trace gzipped to
32 MB in 0.15 s of CPU against 0.82 s, a small rank's 2.7 MB in 1.1 ms against 6.2 ms
(docs/performance.md, "Seventh pass"). That is most of what reading a gzipped rank costs.
``isal.isal_zlib`` has zlib's API (``decompressobj``, ``decompress(data, max_length)``,
``eof``, ``unused_data``, ``unconsumed_tail``), so the readers are written once against
:func:`decompressobj`. A damaged stream raises one of :data:`ERRORS` under either library; the
texts of their messages differ (they follow "corrupt gzip stream" in tracekit's).
``tests/test_inflate.py`` checks that both give the same bytes or the same kind of failure on
valid, concatenated, truncated, damaged and padded streams.

``TRACEKIT_ZLIB=1`` in the environment makes tracekit use zlib (to compare, or to rule ISA-L
out). Both release the GIL while they inflate.
"""

from __future__ import annotations

import os
import zlib
from typing import Any

_z: Any = zlib
ERRORS: tuple[type[Exception], ...] = (zlib.error,)
if os.environ.get("TRACEKIT_ZLIB") != "1":
    try:
        from isal import isal_zlib

        _z = isal_zlib
        ERRORS = (zlib.error, _z.error)
    except ImportError:  # a platform without its wheel: zlib, the same results, slower
        pass

#: The library in use: ``"isal"`` or ``"zlib"``.
BACKEND = "isal" if _z is not zlib else "zlib"


def decompressobj() -> Any:
    """A gzip (not raw deflate, not zlib-wrapped) decompressor of one member."""
    return _z.decompressobj(16 + _z.MAX_WBITS)


#: A gzip member's first bytes: the magic and the method (8, deflate); the flags byte follows.
_GZIP_START = b"\x1f\x8b\x08"
#: The flags byte's reserved bits (RFC 1952: must be zero).
_RESERVED_FLAGS = 0xE0


def bad_member_start(head: bytes, after: bool) -> str | None:
    """What is wrong with a gzip member that starts with ``head`` (None: nothing seen): it
    must start ``1f 8b 08`` with no reserved flag bit set. Checked by tracekit, not left to
    the library, because the libraries differ: ISA-L ignores reserved flags (zlib refuses
    them), and of bytes after the last member zlib says "bad header", ISA-L "ends early".
    ``after``: ``head`` follows a member. A header cut short (the end of a read) is left to
    the library: ISA-L and zlib read the same bytes (tests/test_inflate.py, fuzz target reader)."""
    k = min(len(head), 4)
    if head[: min(k, 3)] == _GZIP_START[: min(k, 3)] and not (k == 4 and head[3] & _RESERVED_FLAGS):
        return None
    what = "bytes after a member are not another" if after else "not a gzip deflate header"
    return f"{what}: {head[:4].hex(' ')}"
