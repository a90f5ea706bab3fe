"""Decode a trace as its text arrives: slices of ``traceEvents``, never the whole text at once.

The text comes in pieces (:func:`tracekit.read.files.iter_text`: read, or inflated from gzip, a few
MiB at a time). The ``traceEvents`` array is cut at ``}`` ``,`` ``{`` gaps near every
``chunk_bytes``; each slice is decoded on its own as a JSON array of typed events, becomes
columns in the :class:`~tracekit.read.columns._FrameBuilder`, and its text is dropped. A cut that
falls inside a string leaves an unbalanced slice, which cannot decode, so the cut moves to the
next gap: when every piece decodes, the pieces are exactly the document. At the end of the text,
the rest of the array and whatever follows it (``distributedInfo``, ``deviceProperties``...) is
decoded with the document's head as one small document.

So memory holds about two slices of text plus the columns, whatever the file's size.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator

import msgspec

from . import native
from .arrays import (
    _BOM,
    _EVENTS_DECODER,
    _NONBLANK,
    _TEXT_EVENTS_DECODER,
    _array_rest,
    _clean_head,
    _is_array_head,
    decode_document,
)
from .blanks import Blanks
from .columns import _FrameBuilder
from .files import PlainText
from .schema import _DECODER, TraceDoc

_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")
#: Stands for the scanned event array in the rest of the document, to see that it is the one
#: msgspec takes as ``traceEvents`` (no text can guess the name).
_SENTINEL_NAME = f"tracekit-native-{os.urandom(8).hex()}"
_SENTINEL = b'[{"name": "%s"}]' % _SENTINEL_NAME.encode()
#: Text read past where a slice's cut is looked for (its ``}`` ``,`` ``{`` gap is in it, unless
#: an event is longer): reading no further leaves little text to move after the cut. (At most
#: a sixteenth of a slice.)
_CUT_MARGIN = 1 << 16
#: Cuts that fell inside strings, per file, before giving up on slicing it.
_MAX_MISSES = 256


class _Slicer:
    """The text buffered so far (``buf[:n]``), and the slices of it decoded into ``builder``.

    ``buf`` keeps its size: decoded text is dropped by moving the rest to its front
    (:meth:`drop`) and pieces are copied in after it, so the same memory holds every slice. (A
    bytearray whose front is deleted is copied into new memory at its next append, and the
    kernel faults in every new page: 1.4 times the text's size in page faults, every read.)"""

    def __init__(
        self,
        pieces: Iterable[bytes] | PlainText,
        builder: _FrameBuilder,
        chunk_bytes: int,
        blanks: Blanks | None = None,
    ) -> None:
        #: Long runs of whitespace are squeezed out as the text arrives (None: kept).
        self.blanks = blanks
        self.pieces: Iterator[bytes] | PlainText = pieces if isinstance(pieces, PlainText) else iter(pieces)
        self.buf = bytearray()
        self.n = 0
        self.eof = False
        self.builder = builder
        self.chunk = chunk_bytes
        self.text = False  # times read from their text (float64 lost nanoseconds before)
        self.misses = 0
        self.peak = 0
        self.slices = 0
        #: Where the next cut will be looked for, plus a margin (None: not known): a read stops
        #: there, so that little text is left after the cut for :meth:`drop` to move.
        self.target: int | None = None
        self.margin = max(1, min(_CUT_MARGIN, chunk_bytes >> 4))

    def more(self) -> bool:
        if isinstance(self.pieces, PlainText):
            return self.read_into(self.pieces)
        piece = next(self.pieces, None)
        if piece is None:
            self.eof = True
            return False
        end = self.n + len(piece)
        self.buf[self.n : end] = piece  # in place; grows the buffer only past its size
        self.n = end if self.blanks is None else self.blanks.squeeze(self.buf, self.n, end)
        self.peak = max(self.peak, end)
        return True

    def read_into(self, text: PlainText) -> bool:
        """A piece of ``text`` read straight into the buffer after its text; a read stops at
        :attr:`target` (whole pieces past it: a cut not found there, in an event longer than
        the margin, is looked for again after each piece, as for any reader). The buffer is
        first made for all that is left when that is read whole (about two slices), else for a
        slice and a few margins (reads stop there); it grows in place by an eighth or more
        (as a bytearray does) only for longer events; with all that was expected in, a small
        read says whether the file grew, so a buffer that fits is never outgrown. (Every page
        of the buffer is faulted in once: it is kept small.)"""
        size = text.piece
        if self.target is not None and self.n < self.target:
            size = min(size, max(self.target - self.n, self.margin))
        want = min(size, text.left)
        if len(self.buf) - self.n < want:
            if not self.buf:
                need = text.left
                self.buf = bytearray(
                    max(want, need if need <= 2 * self.chunk + self.margin else self.chunk + 4 * self.margin)
                )
            else:  # in place (realloc): the text is not copied
                self.buf += bytes(max(self.n + want, len(self.buf) + (len(self.buf) >> 3)) - len(self.buf))
        room = min(len(self.buf) - self.n, size)
        if room:
            with memoryview(self.buf) as mv, mv[self.n : self.n + room] as part:
                got = text.readinto(part)
        else:
            more = bytearray(1 << 16)
            with memoryview(more) as mv:
                got = text.readinto(mv)
            self.buf[self.n :] = more[:got]
        if not got:
            self.eof = True
            return False
        self.n = self.n + got if self.blanks is None else self.blanks.squeeze(self.buf, self.n, self.n + got)
        self.peak = max(self.peak, self.n)
        return True

    def drop(self, upto: int) -> None:
        """Forget the text before ``upto``: the rest moves to the front (memmove, no new memory)."""
        rest = self.n - upto
        with memoryview(self.buf) as mv:
            mv[:rest] = mv[upto : self.n]
        self.n = rest
        if self.blanks is not None:
            self.blanks.dropped(upto)

    def held(self) -> bytearray:
        """The buffer cut to the text it holds (its spare size given back)."""
        del self.buf[self.n :]
        return self.buf

    def cut_slices(self, pos: int) -> int:
        """Decode every whole slice that the buffer holds from ``pos`` (the first byte of an
        event); returns where the rest starts."""
        buf, chunk = self.buf, self.chunk
        search_from = pos + chunk
        while self.n - pos > chunk:
            g = _EVENT_GAP.search(buf, search_from, self.n)
            if g is None:
                return pos  # no gap yet: more text first
            cut = g.start() + 1  # just after the '}'
            try:
                self.add(pos, cut)
            except msgspec.DecodeError:
                # A gap inside a string ("}, {" in a name): cut at the next one instead.
                self.misses += 1
                if self.misses > _MAX_MISSES:
                    raise
                search_from = cut + 1
                continue
            self.slices += 1
            pos = buf.index(b",", cut, self.n) + 1
            search_from = pos + chunk
        return pos

    def add(self, pos: int, cut: int) -> None:
        """The events between ``pos`` and ``cut`` into the builder: scanned by the native
        reader, or else decoded by msgspec (which raises when the text does not decode)."""
        scanned = native.scan(self.buf, pos, cut, self.text)
        if scanned is not None:
            self.text = scanned.text
            scanned.add_to(self.builder)
            return
        events = self.decode(pos, cut, self.decoder)
        if not self.builder.add(events):  # epoch-scale float times: from now on, as text
            self.text = True
            self.builder.add(self.decode(pos, cut, self.decoder))

    @property
    def decoder(self) -> msgspec.json.Decoder:
        return _TEXT_EVENTS_DECODER if self.text else _EVENTS_DECODER

    def decode(self, pos: int, cut: int, decoder: msgspec.json.Decoder) -> list:
        """The events between ``pos`` and ``cut`` decoded as a JSON array: the byte before
        ``pos`` (the ``,`` or ``[`` before the first event) and the one at ``cut`` (after the
        last event's ``}``) are made ``[`` and ``]`` meanwhile. Decoded from a copy of the
        slice: the events' ``msgspec.Raw`` values (the shapes, text times) point into what they
        were decoded from, and would pin the buffer. (The native scanner, which reads most
        slices, copies nothing.)"""
        buf = self.buf
        before, after = buf[pos - 1], buf[cut]
        buf[pos - 1], buf[cut] = 0x5B, 0x5D  # '[' and ']'
        try:
            with memoryview(buf) as mv, mv[pos - 1 : cut + 1] as text:
                return decoder.decode(bytes(text))
        finally:
            buf[pos - 1], buf[cut] = before, after

    def finish(self, head: bytes, pos: int) -> TraceDoc:
        """The rest of the array and the document's tail, decoded with the head."""
        text = self.held()
        self.buf, self.n = bytearray(), 0
        doc = decode_rest(text, pos, head, self.builder, self.text)
        if doc is not None:
            return doc
        text[:pos] = head + b"["  # in place: the rest of the text is not copied
        doc = decode_document(text, self.text)
        if not self.builder.add(doc.traceEvents):
            doc = decode_document(text, True)
            self.builder.add(doc.traceEvents)
        doc.traceEvents = []
        return doc


def stream_decode(
    pieces: Iterable[bytes] | PlainText,
    builder: _FrameBuilder,
    chunk_bytes: int,
    stats: dict | None = None,
    blanks: Blanks | None = None,
) -> TraceDoc | bytearray | None:
    """Decode the text of ``pieces`` into ``builder``, one slice of ``traceEvents`` at a time.

    Returns the document (its ``traceEvents`` empty: they are in ``builder``); or the whole text
    when it is shorter than about two slices or not shaped like a trace near its start (decode it
    whole); or ``None`` when a slice or the end did not decode (the file is broken or unusual:
    read it again whole, for the decoder's own error message). ``stats`` receives the largest
    text buffered (``peak_buffer``) and the number of slices. ``blanks``: squeeze long runs of
    whitespace out of the text as it arrives (:mod:`tracekit.blanks`; the text returned is the
    squeezed one, ``blanks`` maps its offsets back).
    """
    s = _Slicer(pieces, builder, chunk_bytes, blanks)
    if isinstance(pieces, PlainText):  # all of a short text, else to just past the first cut
        short = pieces.left <= 2 * chunk_bytes + s.margin
        s.target = 2 * chunk_bytes + s.margin if short else chunk_bytes + 2 * s.margin
    while s.n < (s.target or 2 * chunk_bytes) and s.more():
        pass
    with memoryview(s.buf) as mv, mv[: s.n] as text:  # not held(): the buffer keeps its size
        head = _head(text)
    if s.eof or head is None:
        s.target = None  # whole pieces from here
        while s.more():  # small, or not a trace's shape: the caller decodes it whole
            pass
        _stats(stats, s)
        return s.held()
    pos = len(head) + 1  # the first byte inside the array
    try:
        while True:
            pos = s.cut_slices(pos)
            if pos > 1:  # drop the text already decoded (but the byte before the next event)
                s.drop(pos - 1)
                pos = 1
            s.target = pos + chunk_bytes + s.margin
            if not s.more():
                break
        doc = s.finish(_clean_head(head), pos)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError):
        return None
    finally:
        _stats(stats, s)
    return doc


def decode_events(pieces: Iterable[bytes] | PlainText, builder: _FrameBuilder, chunk_bytes: int) -> int:
    """Decode the text of ``pieces``: a run of whole events cut out of ``traceEvents`` (from the
    ``{`` of one event to the ``}`` of another, the ``,`` between them included), slice by slice
    into ``builder``. Returns the largest text buffered; raises ``msgspec.DecodeError`` /
    ``ValidationError`` when the run does not decode (a cut that fell inside a string)."""
    if isinstance(pieces, PlainText):
        pieces.prefix, pieces.suffix = b"[" + pieces.prefix, b"]"
    else:
        pieces = itertools.chain((b"[",), pieces, (b"]",))
    s = _Slicer(pieces, builder, chunk_bytes)
    pos = 1
    s.target = pos + chunk_bytes + s.margin
    while s.more():
        pos = s.cut_slices(pos)
        if pos > 1:
            s.drop(pos - 1)
            pos = 1
        s.target = pos + chunk_bytes + s.margin
    s.add(pos, s.n - 1)  # up to the closing ']'
    return s.peak


def decode_rest(text: bytes | bytearray, pos: int, head: bytes, builder: _FrameBuilder, text_times: bool):
    """The document whose event array's rest starts at ``text[pos]``, ``head`` (before the
    array's ``[``) being its start: the events up to the array's close scanned natively into
    ``builder``, the small rest of the document (``head``, and what follows the array) decoded
    by msgspec, its ``traceEvents`` emptied. ``None`` (nothing added) when the scanner declines,
    the document does not decode, or the array is not the one msgspec takes as ``traceEvents``
    (another one follows it): decode it all with msgspec then. A document that is the event
    array itself (``head`` is blank) has nothing but its events (:func:`_array_rest`)."""
    if _is_array_head(head):
        return _array_rest(text, pos, builder, text_times)
    scanned = native.scan(text, pos, None, text_times)
    if scanned is None:
        return None
    with memoryview(text) as mv:
        doc_text = b"".join((head, _SENTINEL, mv[scanned.end + 1 :]))
    try:
        doc = _DECODER.decode(doc_text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None  # msgspec decodes it all again, for its own error
    if len(doc.traceEvents) != 1 or doc.traceEvents[0].name != _SENTINEL_NAME:
        return None
    scanned.add_to(builder)
    doc.traceEvents = []
    return doc


def _head(buf: bytearray | memoryview) -> bytes | None:
    """The text before the ``[`` of a top-level ``traceEvents`` in the first MiB, or before
    the ``[`` of a document that is the event array itself (blanks, and a byte order mark);
    else None."""
    first = _NONBLANK.search(buf, 3 if buf[:3] == _BOM else 0, 1 << 20)
    if first is not None and buf[first.start()] == 0x5B:  # '['
        return bytes(buf[: first.start()])
    m = _TRACE_EVENTS_KEY.search(buf, 0, 1 << 20)
    if m is None:
        return None
    head = bytes(buf[: m.end() - 1])
    try:  # "traceEvents" is a key of the top-level object: the head closes with one brace
        _DECODER.decode(_clean_head(head) + b"[]}")
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError):
        return None
    return head


def _stats(stats: dict | None, s: _Slicer) -> None:
    if stats is not None:
        stats.update(peak_buffer=s.peak, slices=s.slices)
