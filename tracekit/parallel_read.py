"""Decode one big plain trace on several cores: the event array cut into byte ranges, a process each.

Decoding JSON holds the GIL, so only processes decode in parallel. The parent finds where to
cut (a ``}`` ``,`` ``{`` gap near each k-th of the array: :func:`plan`), forks one child per range
but the last, and decodes the last range (with the document's tail: ``distributedInfo``,
``deviceProperties``...) itself. Each child reads only its range, decodes it slice by slice with
the streaming reader (:func:`tracekit.streaming.decode_events`) into a column builder, and sends
back typed columns: a few bytes per kept event, never a Python object per event. The builders
are joined in file order, so the columns are exactly those of the serial reader.

Used for plain (not gzip) files of at least :data:`MIN_BYTES`, when more than one core is
available (``TRACEKIT_READ_JOBS`` overrides the count; ``1`` turns this off), the platform forks,
and the process is single-threaded and not itself a pool worker (a rank pool already uses every
core). Anything unexpected — a cut that fell inside a string, a child that failed, a file that
changed — returns ``None`` and the caller reads the file serially, with its usual errors.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import threading

from .columns import _FrameBuilder
from .files import PIECE_BYTES, PlainText
from .schema import TraceDoc
from .streaming import _EVENT_GAP, _clean_head, _head, decode_events, stream_decode

#: Smallest file read in parallel: below it, forking costs more than it saves.
MIN_BYTES = 96 << 20
_PROBE = 1 << 20
_FIRST_EVENT = re.compile(rb"[ \t\r\n]*\{")


def read_jobs() -> int:
    """Processes for one file's decode: ``TRACEKIT_READ_JOBS``, else the usable cores."""
    env = os.environ.get("TRACEKIT_READ_JOBS")
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def usable(size: int, jobs: int) -> bool:
    """Whether a file of ``size`` bytes may be decoded by ``jobs`` forked processes here."""
    return (
        jobs > 1
        and size >= MIN_BYTES
        and "fork" in mp.get_all_start_methods()
        and threading.active_count() == 1
        and not mp.current_process().daemon
    )


def plan(path: str | os.PathLike, jobs: int) -> tuple[bytes, list[tuple[int, int]], int] | None:
    """(the text before ``traceEvents``'s ``[``, the children's byte ranges, where the parent's
    range starts), or None when the file is not shaped for it (gzip, no top-level
    ``traceEvents`` near the start, no event gap near a cut)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        buf = bytearray(f.read(_PROBE))
        if buf[:2] == b"\x1f\x8b":
            return None
        head = _head(buf)
        if head is None:
            return None
        first = _FIRST_EVENT.match(buf, len(head) + 1)
        if first is None:
            return None
        lo = first.end() - 1
        ranges, start = [], lo
        for j in range(1, jobs):
            at = start + (size - start) * j // jobs
            f.seek(at)
            gap = _EVENT_GAP.search(f.read(_PROBE))
            if gap is None:
                return None
            cut, nxt = at + gap.start() + 1, at + gap.end() - 1
            if cut <= lo:
                return None
            ranges.append((lo, cut))
            lo = nxt
    return head, ranges, lo


def _child(path: str, lo: int, hi: int, chunk: int) -> _FrameBuilder:
    builder = _FrameBuilder()
    with PlainText.open(path, lo, hi, PIECE_BYTES) as text:
        decode_events(text, builder, chunk)
    return builder


def read_parallel(
    path: str | os.PathLike, jobs: int, chunk: int
) -> tuple[_FrameBuilder, TraceDoc | bytearray] | None:
    """The columns of ``path`` decoded by ``jobs`` processes, and the document (or, when the
    last range was too short to stream, the text of the document that range makes: decode it
    whole into the builder); None: read it serially (not worth it, not shaped for it, or
    something failed)."""
    if not usable(os.path.getsize(path), jobs):
        return None
    got = plan(path, jobs)
    if got is None:
        return None
    head, ranges, lo = got
    ctx = mp.get_context("fork")
    with ctx.Pool(len(ranges)) as pool:
        pending = [pool.apply_async(_child, (os.fspath(path), a, b, chunk)) for a, b in ranges]
        mine = _FrameBuilder()
        try:
            with PlainText.open(path, lo, None, PIECE_BYTES, _clean_head(head) + b"[") as text:
                doc = stream_decode(text, mine, chunk)
            if doc is None:  # the last range did not decode
                return None
            out = _FrameBuilder()
            for p in pending:
                out.absorb(p.get())
        except Exception:  # a child's failure of any kind: the serial reader will say what
            return None
    out.absorb(mine)
    return out, doc
