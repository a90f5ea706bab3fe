"""A trace file's rank from its head (or tail), without reading its events.

Kineto writes ``distributedInfo`` as a top-level key of the trace document, before the
``traceEvents`` array in current versions and after it in some older ones. So the rank is in
the bytes before the array (the *head*: read at most :data:`HEAD_BYTES`, inflating only that
much of a gzip file) or in the bytes after it (the *tail*: the last :data:`TAIL_BYTES` of a
plain file, found by seeking; a gzip stream has no index, so its tail is inflated through and
only the last bytes are kept, never the whole text).

:func:`head_rank`: Needs: a path and the read bound. Adds: the ``distributedInfo.rank`` the full
reader (:func:`tracekit.read.reader.read_trace`) would find, or ``None`` when the document has none.
Guarantees: never decodes an event; raises :class:`Unknown` when the head or tail cannot be
told (not a trace of this shape, a key inside a string, more than ``max_bytes``): the caller
then reads the file in full.
"""

from __future__ import annotations

import os
import re
from typing import Any

import msgspec

from ..read import inflate

HEAD_BYTES = 1 << 20
TAIL_BYTES = 256 << 10
_FIRST_READ = 64 << 10
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BLANK = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"


class Unknown(Exception):
    """The rank cannot be told from the head and tail; read the whole file."""


class _Doc(msgspec.Struct):
    """The top-level keys of a trace document that say which rank wrote it (the same type as
    :class:`tracekit.read.schema.TraceDoc`, so a value the reader refuses is refused here too)."""

    distributedInfo: dict[str, Any] | None = None


_DOC = msgspec.json.Decoder(_Doc)


#: What reading a file's head or tail may raise: the rank is then not known from it.
_UNREADABLE: tuple[type[BaseException], ...] = (OSError, EOFError, *inflate.ERRORS)


def head_rank(path: str | os.PathLike, max_bytes: int) -> int | None:
    """``distributedInfo.rank`` of the trace at ``path`` (``None``: the file has none)."""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            head = _gz_head(f, HEAD_BYTES) if gz else _plain_head(f, HEAD_BYTES)
            found, rank = _from_head(head)
            if found:
                return rank
            tail = _gz_tail(f, max_bytes) if gz else _plain_tail(f)
    except _UNREADABLE:
        raise Unknown from None
    return _from_tail(tail)


def _rank(doc: _Doc) -> int | None:
    r = (doc.distributedInfo or {}).get("rank")
    return r if isinstance(r, int) and not isinstance(r, bool) and 0 <= r < 1 << 31 else None


def _from_head(head: bytes) -> tuple[bool, int | None]:
    """(whether the head holds ``distributedInfo``, its rank). The document up to the
    ``traceEvents`` array, closed with an empty array, is decoded on its own."""
    if head.startswith(_BOM):
        head = head[len(_BOM) :]
    if head.lstrip(_BLANK)[:1] == b"[":  # the document is the event array itself: no header
        return True, None
    m = _EVENTS_KEY.search(head)
    if m is None:
        raise Unknown
    try:
        doc = _DOC.decode(head[: m.end()] + b"]}")
    except (msgspec.DecodeError, RecursionError):
        raise Unknown from None
    return doc.distributedInfo is not None, _rank(doc)


def _from_tail(tail: bytes) -> int | None:
    """The rank named after the ``traceEvents`` array: the tail after its closing ``]`` is
    decoded as the rest of an object (tried at each ``]`` that closes an event or an empty
    array, from the end; a ``]`` of a nested array cannot close the document)."""
    end = len(tail)
    for _ in range(64):
        end = tail.rfind(b"]", 0, end)
        if end < 0:
            break
        before = tail[:end].rstrip(_BLANK)[-1:]
        if before not in (b"}", b"[", b""):  # "": blank up to the start of the window
            continue
        try:
            return _rank(_DOC.decode(b'{"traceEvents":[]' + tail[end + 1 :]))
        except (msgspec.DecodeError, RecursionError):
            continue
    raise Unknown


def _plain_head(f: Any, limit: int) -> bytes:
    """The bytes up to the ``traceEvents`` array: 64 KiB, more (up to ``limit``) when the
    array starts later."""
    head = f.read(_FIRST_READ)
    if len(head) == _FIRST_READ and _EVENTS_KEY.search(head) is None:
        head += f.read(limit - len(head))
    return head


def _plain_tail(f: Any) -> bytes:
    size = os.fstat(f.fileno()).st_size
    f.seek(max(0, size - TAIL_BYTES))
    return f.read(TAIL_BYTES)


def _gz_head(f: Any, limit: int) -> bytes:
    """The first ``limit`` decompressed bytes (fewer when the stream is shorter), inflating
    no more than asked."""
    d = inflate.decompressobj()
    out = bytearray()
    while len(out) < limit and not d.eof:
        chunk = d.unconsumed_tail or f.read(1 << 14)
        if not chunk:
            break
        out += d.decompress(chunk, min(_FIRST_READ, limit - len(out)))
        if _EVENTS_KEY.search(out, max(0, len(out) - _FIRST_READ - 64)):
            break  # the array has started: the head is complete
    return bytes(out)


def _gz_tail(f: Any, max_bytes: int) -> bytes:
    """The last :data:`TAIL_BYTES` of the decompressed stream (concatenated members too),
    inflated in bounded pieces; more than ``max_bytes`` in all is :class:`Unknown`."""
    f.seek(0)
    d = inflate.decompressobj()
    tail, total = b"", 0
    while True:
        chunk = f.read(1 << 20)
        if not chunk:
            break
        while chunk:
            if d.eof:
                d = inflate.decompressobj()
            piece = d.decompress(chunk, 1 << 24)
            total += len(piece)
            if total > max_bytes:
                raise Unknown
            tail = (tail + piece)[-TAIL_BYTES:]
            chunk = d.unused_data if d.eof else d.unconsumed_tail
    if not d.eof:
        raise Unknown
    return tail
