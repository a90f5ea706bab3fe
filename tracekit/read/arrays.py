"""The array form of a trace document: the Chrome trace event format also allows a document
that is just the array of events, and that array without its closing ``]`` (an unterminated
array: a trace whose writer stopped before closing it; a trailing comma after its last event is
allowed). Such a document has no header: no distributedInfo, no devices. An array cut inside an
event is a truncated trace, an error as in the object form.

Needs: the document's text (or its head, the text before the first ``[``). Gives: whether it is
the array form, where its array ends, its events decoded (msgspec) or scanned (native) into the
same columns as the object form's (:mod:`tracekit.read.streaming` calls these).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from . import native
from .columns import _FrameBuilder
from .schema import _DECODER, _TEXT_TIME_DECODER, Event, TextTimeDoc, TextTimeEvent, TraceDoc

_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_TEXT_EVENTS_DECODER = msgspec.json.Decoder(list[TextTimeEvent])
_NONBLANK = re.compile(rb"[^ \t\r\n]")
_BLANK = b" \t\r\n"
_BOM = b"\xef\xbb\xbf"


def _clean_head(head: bytes) -> bytes:
    return head[3:] if head.startswith(_BOM) else head


def _is_array_head(head: bytes) -> bool:
    """Whether ``head`` (:func:`_head`) is that of the array form: nothing but blanks."""
    return not _clean_head(head).strip(_BLANK)


def _blank_from(text: bytes | bytearray, lo: int, hi: int) -> int:
    """Where the blanks that end ``text[lo:hi]`` start (``lo`` when it is all blank): read
    back from ``hi`` in growing pieces, so a long run of blanks costs linear time."""
    step = 64
    while hi > lo:
        a = max(lo, hi - step)
        kept = bytes(text[a:hi]).rstrip(_BLANK)
        if kept:
            return a + len(kept)
        hi, step = a, step * 2
    return lo


def array_end(text: bytes | bytearray, lo: int) -> tuple[int, bool]:
    """Where the event array whose elements start at ``lo`` (just past its ``[``) ends, and
    whether it is closed: ``(offset of its ']', True)`` when the text's last byte that is not
    blank is a ``]``; else ``(the end of its last event, False)``: before the blanks that end
    the text, and before a comma that follows an event's ``}``. (Whether that is really the
    array's end, or the text was cut inside an event, is the decoding's to tell.)"""
    end = _blank_from(text, lo, len(text))
    if end > lo and text[end - 1] == 0x5D:  # ']'
        return end - 1, True
    if end > lo and text[end - 1] == 0x2C:  # ','
        before = _blank_from(text, lo, end - 1)
        if before > lo and text[before - 1] == 0x7D:  # '}'
            return before, False
    return end, False


def _array_rest(
    text: bytes | bytearray, pos: int, builder: _FrameBuilder, text_times: bool
) -> TraceDoc | None:
    """:func:`decode_rest` of the array form: the events from ``pos`` to the array's end
    scanned natively; ``None`` (nothing added) when the scanner declines or something but
    blanks follows the closing ``]``."""
    end, closed = array_end(text, pos)
    scanned = native.scan(text, pos, None if closed else end, text_times)
    if scanned is None or scanned.end != end:
        return None
    scanned.add_to(builder)
    return TraceDoc(traceEvents=[])


def decode_document(text: bytes | bytearray, text_times: bool) -> TraceDoc:
    """The whole document ``text`` (no byte order mark) decoded by msgspec, in either form:
    an object with ``traceEvents``, or the event array itself, closed or unterminated (whose
    text cut inside an event raises msgspec's own error for it: truncated)."""
    first = _NONBLANK.search(text)
    if first is None or text[first.start()] != 0x5B:
        return (_TEXT_TIME_DECODER if text_times else _DECODER).decode(text)
    decoder = _TEXT_EVENTS_DECODER if text_times else _EVENTS_DECODER
    end, closed = array_end(text, first.start() + 1)
    events: Any  # list[Event] or list[TextTimeEvent], as text_times says
    if closed:
        events = decoder.decode(text)
    else:
        with memoryview(text) as mv:
            whole = b"".join((mv[:end], b"]"))
        try:
            events = decoder.decode(whole)
        except msgspec.DecodeError:
            decoder.decode(text)  # raises what is wrong with the text as it is (cut in an event)
            raise
    return TextTimeDoc(traceEvents=events) if text_times else TraceDoc(traceEvents=events)
