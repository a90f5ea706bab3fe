"""Decode one big plain trace on several cores: the event array cut into byte ranges, a process each.

Decoding JSON holds the GIL, so only processes decode in parallel. The parent finds where to
cut (a ``}`` ``,`` ``{`` gap near each k-th of the array: :func:`plan`), forks one child per range
but the last, and decodes the last range (with the document's tail: ``distributedInfo``,
``deviceProperties``...) itself. Each child reads only its range, decodes it slice by slice with
the streaming reader (:func:`tracekit.read.streaming.decode_events`) into a column builder, and sends
back typed columns: a few bytes per kept event, never a Python object per event. The builders
are joined in file order, so the columns are exactly those of the serial reader.

The children are forked directly (``os.fork``: their arguments are already in memory; no pool,
no handler threads, no pickled task), and send their columns through an anonymous in-memory file
(``memfd``) the parent made before forking: a small pickle of the builder whose arrays are
out-of-band buffers (pickle protocol 5), then those buffers' raw bytes, which the parent reads
straight into fresh arrays once the child has written all of it (:func:`tracekit.forked.send`,
:func:`_receive`). A child writes all it has while the parent still decodes its own range, and
its file is freed as soon as it is read: the parent never holds two copies of a column for longer
than one read.

Used for plain (not gzip) files of at least :data:`MIN_BYTES`, when more than one core is
available (``TRACEKIT_READ_JOBS`` overrides the count; ``1`` turns this off), the platform forks,
and the process is single-threaded and not itself a pool worker (a rank pool already uses every
core). Anything unexpected — a cut that fell inside a string, a child that failed or died, a file
that changed — returns ``None`` and the caller reads the file serially, with its usual errors.
Ctrl-C or an error in the parent kills and reaps the children; a child never returns into the
parent's code (it leaves by ``os._exit`` whatever happens).
"""

from __future__ import annotations

import mmap
import os
import re
import tempfile

from .. import forked
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
    return jobs > 1 and size >= MIN_BYTES and forked.usable()


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


def _decode_range(path: str, lo: int, hi: int, chunk: int) -> _FrameBuilder:
    builder = _FrameBuilder()
    with PlainText.open(path, lo, hi, PIECE_BYTES) as text:
        decode_events(text, builder, chunk)
    return builder


class _Child:
    """A forked child decoding ``path[lo:hi]``. It writes its builder into the in-memory file
    ``fd`` (:func:`tracekit.forked.send`), then one byte into the pipe ``done`` and exits; when
    anything fails, it exits without that byte (the parent reads the pipe's end instead). ``others``: the
    children forked before it. ``pid`` is None once the child is reaped."""

    def __init__(self, path: str, lo: int, hi: int, chunk: int, others: list[_Child]) -> None:
        self.fd, self.pid = -1, None
        self.done, ready = os.pipe()
        try:
            self.fd = _anonymous_file()
            theirs = [o.fd for o in others if o.fd >= 0]
            self.pid = forked.fork(lambda: _run_child(ready, self.fd, theirs, (path, lo, hi, chunk)))
        except BaseException:
            self.end()
            raise
        finally:
            os.close(ready)  # the child holds the only writer: its exit ends the pipe

    def receive(self) -> _FrameBuilder | None:
        """The child's builder, read once it has written all of it (it is then exiting, reaped
        by :meth:`end`); None when it failed or died first."""
        if os.read(self.done, 1) != _DONE:
            return None
        fd, self.fd = self.fd, -1
        try:
            return _receive(fd)
        finally:
            os.close(fd)  # its memory is freed now

    def end(self) -> None:
        """Kill the child if it still runs, reap it, close its pipe and file."""
        if self.pid is not None:
            forked.reap(self.pid, kill=True)
            self.pid = None
        for name in ("done", "fd"):
            if getattr(self, name) >= 0:
                os.close(getattr(self, name))
                setattr(self, name, -1)


def _run_child(ready: int, fd: int, theirs: list[int], task: tuple) -> None:
    """In the child (:func:`tracekit.forked.fork`: any failure exits with status 1): decode
    ``task``'s range, write its builder to ``fd``, then ``_DONE`` to ``ready``. ``theirs``:
    files of earlier children."""
    for other in theirs:  # theirs to free once read, not to be held here
        os.close(other)
    forked.send(fd, _decode_range(*task))
    os.write(ready, _DONE)


_DONE = b"\x01"


def _anonymous_file() -> int:
    """A file descriptor of an empty file in memory, never named on disk."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("tracekit-columns", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as f:  # no memfd: an unlinked temporary file
        return os.dup(f.fileno())


_PRIVATE = mmap.MAP_PRIVATE | getattr(mmap, "MAP_POPULATE", 0)


def _mapping(size: int) -> mmap.mmap | bytes:
    """A mapping of its own (its pages made at once) for one array: its memory goes back to the
    system as soon as the builder's column is dropped (malloc's heap keeps it: +40 MB peak)."""
    return mmap.mmap(-1, size, flags=_PRIVATE) if size else b""


def _receive(fd: int) -> _FrameBuilder | None:
    """The builder the child sent to ``fd`` (:func:`tracekit.forked.send`), its arrays read
    straight into fresh memory mappings; None when the file does not hold exactly that."""
    os.lseek(fd, 0, os.SEEK_SET)  # the child's writes moved the offset this file shares
    builder = forked.receive(fd, _mapping)
    if os.lseek(fd, 0, os.SEEK_CUR) != os.fstat(fd).st_size:
        return None
    return builder if isinstance(builder, _FrameBuilder) else None


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
    children: list[_Child] = []
    try:
        for a, b in ranges:
            children.append(_Child(os.fspath(path), a, b, chunk, children))
        mine = _FrameBuilder()
        with PlainText.open(path, lo, None, PIECE_BYTES, _clean_head(head) + b"[") as text:
            doc = stream_decode(text, mine, chunk)
        if doc is None:  # the last range did not decode
            return None
        out = _FrameBuilder()
        for child in children:
            theirs = child.receive()
            if theirs is None:
                return None
            out.absorb(theirs)
    except Exception:  # a failure of any kind: the serial reader will say what
        return None
    finally:  # also on Ctrl-C: no child outlives this call
        for child in children:
            child.end()
    out.absorb(mine)
    return out, doc
