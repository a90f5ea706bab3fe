"""Trace files: finding them in a directory, and reading their bytes within a bound.

``read_bytes`` reads a plain or gzip file and never holds more than ``max_bytes`` of
decompressed data (a small gzip that inflates to gigabytes is refused in one line);
``iter_text`` gives the same text piece by piece, for the streaming reader;
``trace_listing`` says which entries of a rank directory are traces and which were skipped, and why.
"""

from __future__ import annotations

import io
import os
import queue
import stat
import threading
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from .. import progress
from ..errors import TraceError
from . import inflate

if TYPE_CHECKING:  # numpy stays out of the CLI's start-up (tracekit --help)
    from .blanks import Blanks

#: Default bound on decompressed size; ``--max-bytes`` raises it.
DEFAULT_MAX_BYTES = 8 * 1024**3


def read_bytes(
    path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES, blanks: Blanks | None = None
) -> bytes | bytearray:
    """The file's JSON bytes, gunzipped when needed, refusing more than ``max_bytes``.

    A gunzipped file comes back as the ``bytearray`` it was inflated into (never copied: a
    2 GiB inflation must not need 4 GiB). ``blanks``: long runs of whitespace are squeezed out
    as the text arrives (:mod:`tracekit.blanks`), so they cost no memory."""
    with _opened(path) as (f, gz):
        if gz or blanks is not None:
            pieces = _gunzip_pieces(f, max_bytes, Path(path)) if gz else _plain_pieces(f, max_bytes, path)
            out, n = bytearray(), 0
            for piece in pieces:
                out[n : n + len(piece)] = piece
                n = n + len(piece) if blanks is None else blanks.squeeze(out, n, n + len(piece))
            del out[n:]
            return out
        data = _read_bounded(f, max_bytes)
    if len(data) > max_bytes:
        raise _too_large(path, max_bytes)
    return data


def iter_text(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> Generator[bytes, None, None]:
    """The file's JSON bytes in pieces of at most ``PIECE_BYTES``, gunzipped when needed, as they
    are read: nothing holds the whole text. Refuses more than ``max_bytes`` (of decompressed
    text) with the same errors as :func:`read_bytes`; progress goes up to ``progress.DECODED``
    with the share of the file read."""
    with _opened(path) as (f, gz):
        if gz:  # inflated one piece ahead, by a thread (inflate releases the GIL)
            yield from _read_ahead(_gunzip_pieces(f, max_bytes, Path(path), progress.DECODED))
            return
        size = max(os.fstat(f.fileno()).st_size, 1)
        if size > max_bytes:
            raise _too_large(path, max_bytes)
        n = 0
        while piece := f.read(PIECE_BYTES):
            n += len(piece)
            if n > max_bytes:
                raise _too_large(path, max_bytes)
            progress.fraction(progress.DECODED * min(n / size, 1.0))
            yield piece


def open_text(
    path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES
) -> PlainText | Generator[bytes, None, None]:
    """The file's JSON text for the streaming reader, as :func:`iter_text` gives it, with its
    errors: a plain file as a :class:`PlainText` (read straight into the reader's buffer), a
    gzip file as :func:`iter_text`'s pieces. Close it when done."""
    p = Path(path)
    f, gz = _open(p)
    if gz:
        f.close()
        return iter_text(path, max_bytes)
    text = PlainText(f, p, max_bytes=max_bytes, piece=PIECE_BYTES, share=progress.DECODED)
    if text.size > max_bytes:
        text.close()
        raise _too_large(path, max_bytes)
    return text


class PlainText:
    """The bytes of the open plain file ``f`` from ``lo`` to ``hi`` (its end when None), after
    ``prefix`` and before ``suffix``, for the streaming reader: :meth:`readinto` reads them
    straight into the reader's buffer. (Iterating over ``f.read(n)`` pieces makes a new bytes
    object per piece, fresh memory the kernel faults in page by page, then copied into the
    buffer.) ``piece``: the read size to ask for. Refuses more than ``max_bytes`` of file as
    :func:`iter_text` does; OS errors become one-line TraceErrors; a file that ends before
    ``hi`` (it shrank while read) is an OSError. Owns ``f``: :meth:`close` (or ``with``) closes
    it. ``share``: progress goes up to it with the share of the file read (None: no progress)."""

    def __init__(
        self,
        f: io.BufferedReader,
        path: Path,
        *,
        lo: int = 0,
        hi: int | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        piece: int,
        share: float | None = None,
        prefix: bytes = b"",
    ) -> None:
        self.f, self.path, self.hi, self.max_bytes, self.piece = f, path, hi, max_bytes, piece
        self.share, self.prefix, self.suffix = share, prefix, b""
        self.at, self.n, self.done = lo, 0, False
        try:
            self.size = os.fstat(f.fileno()).st_size
            f.seek(lo)
        except OSError as e:
            f.close()
            raise _os_error(path, e) from None

    @classmethod
    def open(
        cls, path: str | os.PathLike, lo: int, hi: int | None, piece: int, prefix: bytes = b""
    ) -> PlainText:
        """``path``'s bytes ``lo`` to ``hi`` after ``prefix`` (the parallel reader's ranges)."""
        return cls(open(path, "rb"), Path(path), lo=lo, hi=hi, piece=piece, prefix=prefix)

    @property
    def left(self) -> int:
        """About how many bytes are still to come (exact unless the file changes meanwhile)."""
        end = self.size if self.hi is None else self.hi
        return len(self.prefix) + (0 if self.done else max(end - self.at, 0)) + len(self.suffix)

    def readinto(self, out: memoryview) -> int:
        """Fills the start of ``out`` with the next bytes; how many (0: the end, and only then)."""
        if self.prefix:
            return self._give(out, "prefix")
        if not self.done:
            got = self._read(out)
            if got:
                return got
        return self._give(out, "suffix")

    def _give(self, out: memoryview, name: str) -> int:
        data: bytes = getattr(self, name)
        k = min(len(data), len(out))
        out[:k] = data[:k]
        setattr(self, name, data[k:])
        return k

    def _read(self, out: memoryview) -> int:
        want = len(out) if self.hi is None else min(len(out), self.hi - self.at)
        got = 0
        if want > 0:
            with out[:want] as part:
                try:
                    got = self.f.readinto(part) or 0
                except OSError as e:
                    raise _os_error(self.path, e) from None
        if not got:
            self.done = True
            if self.hi is not None and self.at < self.hi:
                raise OSError("the file shrank while it was read")
            return 0
        self.at += got
        self.n += got
        if self.n > self.max_bytes:
            raise _too_large(self.path, self.max_bytes)
        if self.share is not None:
            progress.fraction(self.share * min(self.n / max(self.size, 1), 1.0))
        return got

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> PlainText:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_ahead(pieces: Generator[bytes, None, None]) -> Generator[bytes, None, None]:
    """``pieces``, produced by a helper thread one piece ahead of the consumer. Inflating
    (:mod:`tracekit.read.inflate`) does not hold the GIL, so a gzip trace inflates on a second
    core while the piece before it is decoded. At most three pieces are alive at once
    (consumed, queued, being made); the producer's errors are raised here, in order; closing
    this generator stops the thread before returning (the file it reads from stays open until
    then)."""
    ready: queue.Queue = queue.Queue(maxsize=1)
    stop = threading.Event()

    def offer(item: tuple) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for piece in pieces:
                if not offer((piece, None)):
                    return
            offer((None, None))
        except BaseException as e:  # handed to the consumer, raised there
            offer((None, e))

    worker = threading.Thread(target=produce, name="tracekit-inflate", daemon=True)
    worker.start()
    try:
        while True:
            piece, error = ready.get()
            if error is not None:
                raise error
            if piece is None:
                return
            yield piece
    finally:
        stop.set()
        worker.join()
        pieces.close()


def _too_large(path: str | os.PathLike, max_bytes: int) -> TraceError:
    return TraceError(path, f"larger than the {max_bytes:,}-byte limit (raise it with --max-bytes)")


@contextmanager
def _opened(path: str | os.PathLike) -> Iterator[tuple[io.BufferedReader, bool]]:
    """The open file and whether it is gzip; every OS error is a one-line TraceError."""
    p = Path(path)
    f, gz = _open(p)
    try:
        with f:
            yield f, gz
    except OSError as e:
        raise _os_error(p, e) from None


def _open(p: Path) -> tuple[io.BufferedReader, bool]:
    """:func:`_opened`'s file, open (the caller closes it), and whether it is gzip."""
    try:
        # A FIFO or device would block or never end: only regular files are read.
        if p.exists() and not p.is_dir() and not stat.S_ISREG(p.stat().st_mode):
            raise TraceError(p, "not a regular file (a pipe, socket or device?); refused")
        f = open(p, "rb")  # noqa: SIM115 (the caller closes it)
        try:
            head = f.read(2)
            f.seek(0)
        except BaseException:
            f.close()
            raise
        return f, head == b"\x1f\x8b"
    except OSError as e:
        raise _os_error(p, e) from None


def _os_error(p: Path, e: OSError) -> TraceError:
    if isinstance(e, IsADirectoryError):
        return TraceError(p, "is a directory, expected a trace file")
    if isinstance(e, FileNotFoundError):
        return TraceError(p, "no such file")
    if isinstance(e, PermissionError):
        return TraceError(p, "permission denied")
    # symlink loops, names too long, I/O errors: one line, not a traceback
    return TraceError(p, f"cannot read: {e.strerror or e}")


def _plain_pieces(f: io.BufferedReader, max_bytes: int, path: str | os.PathLike) -> Iterator[bytes]:
    """A plain file's bytes, ``PIECE_BYTES`` at a time, refusing more than ``max_bytes``."""
    n = 0
    while piece := f.read(PIECE_BYTES):
        n += len(piece)
        if n > max_bytes:
            raise _too_large(path, max_bytes)
        yield piece


def _read_bounded(f: io.BufferedReader, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes, allocating by what is there (``read(n)`` reserves n)."""
    size = os.fstat(f.fileno()).st_size
    parts = [f.read(min(size, max_bytes) + 1)]
    n = len(parts[0])
    while n <= max_bytes and n > size:  # the file grew, or reports no size (/proc): read on
        chunk = f.read(min(1 << 24, max_bytes + 1 - n))
        if not chunk:
            break
        parts.append(chunk)
        n += len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


#: Bytes of text per piece: the inflate step, and the read size of plain files when streaming.
PIECE_BYTES = 1 << 24


def _gunzip_pieces(
    f: io.BufferedReader, max_bytes: int, p: Path, share: float = progress.READ
) -> Generator[bytes, None, None]:
    """The inflated text, at most ``PIECE_BYTES`` per piece (no bomb-sized temporaries), and
    never more than ``max_bytes`` in all, across concatenated gzip members too."""
    d = inflate.decompressobj()
    size = max(os.fstat(f.fileno()).st_size, 1)
    n = 0
    try:
        _check_member_start(f.peek(4)[:4], p, after=False)  # the file's first bytes (not consumed)
        while chunk := f.read(1 << 20):
            progress.fraction(share * f.tell() / size)
            while True:
                if d.eof and chunk:  # concatenated gzip members: start the next one
                    _check_member_start(chunk, p, after=True)
                    d = inflate.decompressobj()
                cap = min(PIECE_BYTES, max_bytes + 1 - n)
                piece = d.decompress(chunk, cap)
                n += len(piece)
                if n > max_bytes:
                    raise TraceError(
                        p,
                        f"decompresses to more than the {max_bytes:,}-byte limit "
                        "(a gzip bomb? raise the limit with --max-bytes)",
                    )
                if piece:
                    yield piece
                chunk = d.unused_data if d.eof else d.unconsumed_tail
                if not chunk and (d.eof or len(piece) < cap):
                    break  # input used up and no output pending
        if not d.eof:
            raise TraceError(p, "truncated gzip stream (the file ends early)")
    except inflate.ERRORS as e:
        raise TraceError(p, f"corrupt gzip stream ({e})") from None


def _check_member_start(head: bytes, p: Path, after: bool) -> None:
    """:func:`~tracekit.read.inflate.bad_member_start` as this file's one-line error."""
    what = inflate.bad_member_start(head, after)
    if what:
        raise TraceError(p, f"corrupt gzip stream ({what})")


TRACE_SUFFIXES = (".json", ".json.gz")


def trace_listing(directory: str | os.PathLike) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The trace files of a directory of per-rank traces (sorted), and the entries skipped
    (``(path, why)``: FIFOs, sockets, devices, dangling links), refusing escaping symlinks."""
    root = Path(directory).resolve()
    files: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    try:
        entries = sorted(Path(directory).iterdir())
    except OSError as e:
        raise TraceError(directory, f"cannot list the directory ({e.strerror or e})") from None
    for p in entries:
        is_trace = p.name.endswith(TRACE_SUFFIXES) and p.name != "manifest.json"
        try:
            mode = p.lstat().st_mode
        except OSError:
            continue  # removed while listed
        if not (is_trace or stat.S_ISLNK(mode)) and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            skipped.append((p, "not a regular file (a pipe, socket or device?)"))
            continue
        if not is_trace:
            continue
        try:
            real = p.resolve()
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            raise TraceError(p, "symlink loop; refused") from None
        if root not in real.parents:
            raise TraceError(p, "symlink points outside the trace directory; refused")
        try:
            st = real.stat()
        except OSError:
            skipped.append((p, "dangling symlink"))
            continue
        if stat.S_ISREG(st.st_mode):
            files.append(p)
        elif not stat.S_ISDIR(st.st_mode):
            skipped.append((p, "not a regular file (a pipe, socket or device?)"))
    if not files:
        raise TraceError(directory, "no trace files (*.json, *.json.gz) in this directory")
    # Files named as torch's trace handler names them win over other JSON (configs and the like).
    profiler_named = [p for p in files if ".pt.trace.json" in p.name]
    return profiler_named or files, skipped


def trace_files(directory: str | os.PathLike) -> list[Path]:
    """The trace files of a directory of per-rank traces (sorted), refusing escaping symlinks."""
    return trace_listing(directory)[0]
