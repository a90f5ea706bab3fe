"""Read a Kineto (PyTorch profiler) Chrome trace into columnar events.

One typed ``msgspec`` decode keeps only the fields that the link and attribute steps use (every
other key of every event is skipped by the decoder, never materialised), then the events become
columns. Times become int64 nanoseconds. Every vintage of Kineto's JSON is accepted:

* categories in any case (``Kernel``/``kernel``, ``Runtime``/``cuda_runtime``, ...), CUDA and
  ROCm runtime calls, ``cuda_driver`` launches (Triton's ``cuLaunchKernel``);
* ``ts``/``dur`` as integer or float microseconds (nanosecond decimals kept);
* 64-bit ids, also above 2**63 (stored wrapped to int64: equality is all that is used);
* events in any order; no CPU side, no GPU side, no ProfilerStep, no distributedInfo.

The pieces: :mod:`tracekit.files` (finding trace files, bounded reading and gunzip),
:mod:`tracekit.schema` (the decoded fields and the event kinds), :mod:`tracekit.columns`
(structs to columns); this module decodes the event array in slices and ties them together.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pandas as pd

from . import progress
from .columns import _COLUMNS, _FrameBuilder
from .errors import TraceError
from .files import DEFAULT_MAX_BYTES, TRACE_SUFFIXES, read_bytes, trace_files, trace_listing
from .schema import (
    _CATEGORY_KIND,
    _DECODER,
    _PYTHON_KEEP_PREFIX,
    _PYTHON_KEEP_SUBSTR,
    _TEXT_TIME_DECODER,
    ANNOTATION,
    CPU_OP,
    FLOW_FWDBWD,
    FLOW_LAUNCH,
    KERNEL,
    KIND_NAMES,
    MEMCPY,
    MEMSET,
    PYTHON,
    RUNTIME,
    Event,
    TextTimeEvent,
    TraceDoc,
)
from .timetext import MAX_US as _MAX_US

#: Re-exported: the rest of tracekit imports the event kinds and the file helpers from here.
__all__ = [
    "ANNOTATION",
    "CPU_OP",
    "DEFAULT_MAX_BYTES",
    "FLOW_FWDBWD",
    "FLOW_LAUNCH",
    "KERNEL",
    "KIND_NAMES",
    "MEMCPY",
    "MEMSET",
    "PYTHON",
    "RUNTIME",
    "TRACE_SUFFIXES",
    "_CATEGORY_KIND",
    "_COLUMNS",
    "_MAX_US",
    "_PYTHON_KEEP_PREFIX",
    "_PYTHON_KEEP_SUBSTR",
    "RawTrace",
    "decode",
    "read_bytes",
    "read_trace",
    "trace_files",
    "trace_listing",
]


@dataclass
class RawTrace:
    """Columnar events of one trace file (one rank)."""

    path: str
    events: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_NONBLANK = re.compile(rb"[^ \t\r\n]")


def decode(data: bytes, path: str | os.PathLike, text_times: bool = False) -> TraceDoc:
    """Typed decode of the JSON document; every failure becomes a one-line TraceError.

    ``text_times``: keep ``ts``/``dur`` as their JSON text (:class:`TextTimeEvent`)."""
    if not _NONBLANK.search(data):  # stops at the first byte that is not blank; no copy
        raise TraceError(path, "empty file")
    if data[:3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark: harmless
        data = data[3:]
    _check_text(data, path)
    try:
        return (_TEXT_TIME_DECODER if text_times else _DECODER).decode(data)
    except UnicodeDecodeError as e:  # msgspec passes the codec's error through
        raise TraceError(
            path, f"not UTF-8 text: a JSON string holds the invalid byte 0x{e.object[e.start]:02x}"
        ) from None
    except msgspec.ValidationError as e:
        msg = str(e)
        if "Expected `object`, got" in msg and "$" not in msg.rsplit("-", maxsplit=1)[-1]:
            raise TraceError(path, f"not a trace: the top level must be a JSON object ({msg})") from None
        if "missing required field `traceEvents`" in msg:
            raise TraceError(path, "not a trace: no `traceEvents` list") from None
        raise TraceError(path, f"malformed trace: {msg}") from None
    except msgspec.DecodeError as e:
        msg = str(e)
        if "truncated" in msg.lower():
            raise TraceError(path, "truncated JSON (the file ends early)") from None
        at = re.search(r"\(byte (\d+)\)", msg)
        if at and re.match(rb"-?(NaN|Infinity|nan|inf)", data[int(at.group(1)) : int(at.group(1)) + 9]):
            raise TraceError(
                path,
                f"NaN or Infinity at byte {at.group(1)}: not valid JSON (a trace written with allow_nan?)",
            ) from None
        raise TraceError(path, f"not valid JSON ({msg})") from None
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply") from None


def _check_text(data: bytes, path: str | os.PathLike) -> None:
    """Refuse UTF-16/UTF-32 text (with or without a byte order mark) and binary files."""
    head = data[:4096]
    if head[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        raise TraceError(path, "UTF-32 text; traces are UTF-8 JSON (convert with iconv)")
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise TraceError(path, "UTF-16 text; traces are UTF-8 JSON (convert with iconv)")
    if b"\x00" not in head:
        return
    # BOM-less UTF-16: JSON is ASCII punctuation, so every other byte is NUL.
    even, odd = head[0::2], head[1::2]
    if len(head) >= 4 and (even.count(0) >= 0.9 * len(even) or odd.count(0) >= 0.9 * len(odd)):
        raise TraceError(
            path, "UTF-16 text without a byte order mark; traces are UTF-8 JSON (convert with iconv)"
        )
    raise TraceError(path, "binary file (NUL bytes), not a JSON trace")


CHUNK_EVENTS = 100_000
#: Bytes of JSON per chunk (the split points are found near multiples of this).
CHUNK_BYTES = 32 << 20
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
_TEXT_EVENTS_DECODER = msgspec.json.Decoder(list[TextTimeEvent])
_TRACE_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_EVENT_GAP = re.compile(rb"\}\s*,\s*\{")


_BLANK = b" \t\r\n"


def _last_nonblank(data: bytes | bytearray, end: int) -> int:
    """Index of the last byte before ``end`` that is not JSON whitespace (-1 if none).

    Walks back in doubling windows (at most 16 MiB) stripped in C: linear in the whitespace
    skipped, with no per-byte Python loop and no large copy."""
    width = 64
    hi = end
    while hi > 0:
        lo = max(0, hi - width)
        kept = len(data[lo:hi].rstrip(_BLANK))
        if kept:
            return lo + kept - 1
        hi, width = lo, min(width * 2, 1 << 24)
    return -1


def _content(data: bytes | bytearray, lo: int, hi: int) -> tuple[int, int]:
    """``lo, hi`` narrowed past the JSON whitespace at both ends (between events it means
    nothing), found in C."""
    m = _NONBLANK.search(data, lo, hi)
    if m is None:
        return lo, lo
    return m.start(), _last_nonblank(data, hi) + 1


def _decode_chunked(data: bytes | bytearray, builder: _FrameBuilder) -> TraceDoc | None:
    """Decode ``data`` one slice of ``traceEvents`` at a time into ``builder``.

    The ``traceEvents`` array is cut at ``}`` ``,`` ``{`` gaps near every ``CHUNK_BYTES``; each
    slice is decoded on its own as a JSON array, and the document around the array (with an
    empty array in its place) is decoded as the :class:`TraceDoc` head. A cut that does not fall
    between two events leaves an unbalanced slice, which cannot decode: so when every piece
    decodes, the pieces are exactly the document. Returns the head (its ``traceEvents`` empty),
    or ``None`` when the file does not have this shape (then the caller decodes it whole and
    reports errors as usual).
    """
    if len(data) < 2 * CHUNK_BYTES:
        return None
    m = _TRACE_EVENTS_KEY.search(data, 0, 1 << 20)
    if m is None:
        return None
    start = m.end() - 1  # the '['
    # The array's closing ']': the last ']' whose tail makes the skeleton decode.
    head_doc = None
    end = len(data)
    floor = max(start + 1, len(data) - (16 << 20))  # the tail after the array is small
    tries = 0
    while True:
        end = data.rfind(b"]", floor, end)
        if end < 0:
            return None
        j = _last_nonblank(data, end)
        if j < 0 or data[j] not in b"}[":  # the array ends after an event (or is empty)
            continue
        tries += 1  # skeleton decodes are bounded: a tail of "}]}]..." would never end
        if tries > 64:
            return None
        try:
            head_doc = _DECODER.decode(data[:start] + b"[]" + data[end + 1 :])
            break
        except (msgspec.DecodeError, RecursionError):
            continue
    if head_doc is None:
        return None
    mv = memoryview(data)
    pos = start + 1  # first byte inside the array
    decoder: msgspec.json.Decoder = _EVENTS_DECODER
    try:
        misses = 0
        while pos < end:
            cut = end
            if end - pos > CHUNK_BYTES * 3 // 2:
                g = _EVENT_GAP.search(data, pos + CHUNK_BYTES, end)
                if g is not None:
                    cut = g.start() + 1  # just after the '}'
            while True:
                try:
                    lo, hi = _content(data, pos, cut)  # blank runs are not copied
                    text = b"".join((b"[", mv[lo:hi], b"]"))
                    events = decoder.decode(text)
                    break
                except msgspec.DecodeError:
                    # A gap inside a string ("}, {" in a name): cut at the next one instead.
                    misses += 1
                    g = _EVENT_GAP.search(data, cut + 1, end) if cut < end and misses < 256 else None
                    if g is None:
                        return None
                    cut = g.start() + 1
            if not builder.add(events):  # epoch-scale float times: from now on, as text
                decoder = _TEXT_EVENTS_DECODER
                builder.add(decoder.decode(text))
            del events, text
            progress.fraction(
                progress.READ + (progress.DECODED - progress.READ) * (cut - start) / max(end - start, 1)
            )
            if cut == end:
                break
            pos = data.index(b",", cut) + 1
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, ValueError):
        return None
    return head_doc


def rank_of(doc: TraceDoc, path: str | os.PathLike) -> int | None:
    info = doc.distributedInfo or {}
    r = info.get("rank") if isinstance(info, dict) else None
    return _int_or_none(r)


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31 else None


def device_names(doc: TraceDoc) -> list[str]:
    names = []
    for d in doc.deviceProperties or []:
        if isinstance(d, dict) and isinstance(d.get("name"), str):
            names.append(d["name"])
    return names


def read_trace(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> RawTrace:
    """Read one trace file into a :class:`RawTrace`."""
    data = read_bytes(path, max_bytes)
    builder = _FrameBuilder()
    doc = _decode_chunked(data, builder)
    if doc is None:  # small, unusual or broken: one whole decode, with its error messages
        builder = _FrameBuilder()
        doc = decode(bytes(data), path)
        if not builder.add(doc.traceEvents):  # epoch-scale float times: decode them as text
            doc = decode(bytes(data), path, text_times=True)
            builder.add(doc.traceEvents)
        del data
        doc.traceEvents = []
    else:
        del data
    frame, warnings, meta = builder.finish(path)
    meta.update(
        {
            "rank": rank_of(doc, path),
            "world_size": _int_or_none((doc.distributedInfo or {}).get("world_size"))
            if isinstance(doc.distributedInfo, dict)
            else None,
            "devices": device_names(doc),
            "schema_version": doc.schemaVersion,
            "events_in_file": builder.n_events,
            "host_name": doc.host_name,
        }
    )
    return RawTrace(path=os.fspath(path), events=frame, meta=meta, warnings=warnings)
