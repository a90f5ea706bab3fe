"""Read a Kineto (PyTorch profiler) Chrome trace into columnar events.

One typed ``msgspec`` decode keeps only the fields that the link and attribute steps use (every
other key of every event is skipped by the decoder, never materialised), then the events become
columns. Times become int64 nanoseconds. Every vintage of Kineto's JSON is accepted:

* categories in any case (``Kernel``/``kernel``, ``Runtime``/``cuda_runtime``, ...), CUDA and
  ROCm runtime calls, ``cuda_driver`` launches (Triton's ``cuLaunchKernel``);
* ``ts``/``dur`` as integer or float microseconds (nanosecond decimals kept);
* 64-bit ids, also above 2**63 (stored wrapped to int64: equality is all that is used);
* events in any order; no CPU side, no GPU side, no ProfilerStep, no distributedInfo;
* the document as an object with ``traceEvents``, or as the bare event array, closed or not
  (the Chrome trace event format's other form: :mod:`tracekit.streaming`);
* ``[memory]`` allocator events (kind MEMORY), the shapes of ops (``input_dims``...) as text.

The pieces: :mod:`tracekit.read.files` (finding trace files, bounded reading and gunzip),
:mod:`tracekit.read.streaming` (decoding the event array slice by slice as the text arrives),
:mod:`tracekit.read.schema` (the decoded fields and the event kinds), :mod:`tracekit.read.columns`
(structs to columns), :mod:`tracekit.read.timetext` (exact times); this module ties them together
and decodes small or broken files whole, with one-line errors.
"""

from __future__ import annotations

import codecs
import os
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pandas as pd

from ..errors import TraceError
from ..render.safetext import cut
from . import native
from .blanks import Blanks
from .columns import _COLUMNS, MEMORY_COLUMNS, MEMORY_ONLY, _FrameBuilder, no_memory
from .files import DEFAULT_MAX_BYTES, TRACE_SUFFIXES, open_text, read_bytes, trace_files, trace_listing
from .parallel import read_parallel
from .schema import (
    _CATEGORY_KIND,
    _PYTHON_KEEP_PREFIX,
    _PYTHON_KEEP_SUBSTR,
    ANNOTATION,
    CPU_OP,
    CUDA_SYNC,
    FLOW_FWDBWD,
    FLOW_LAUNCH,
    KERNEL,
    KIND_NAMES,
    MEMCPY,
    MEMORY,
    MEMSET,
    PYTHON,
    RUNTIME,
    TraceDoc,
)
from .streaming import _head, decode_document, decode_rest, stream_decode
from .timetext import MAX_US as _MAX_US

#: Re-exported: the rest of tracekit imports the event kinds and the file helpers from here.
__all__ = [
    "ANNOTATION",
    "CPU_OP",
    "CUDA_SYNC",
    "DEFAULT_MAX_BYTES",
    "FLOW_FWDBWD",
    "FLOW_LAUNCH",
    "KERNEL",
    "KIND_NAMES",
    "MEMCPY",
    "MEMORY",
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
    "split_memory",
    "trace_files",
    "trace_listing",
]


@dataclass
class RawTrace:
    """Columnar events of one trace file (one rank): ``events``, and the allocator's
    ``[memory]`` events split off as they are read (``memory``; None: still in ``events``,
    for :func:`split_memory`)."""

    path: str
    events: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    memory: pd.DataFrame | None = None

    def split(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The events without MEMORY rows, and the MEMORY rows (:func:`split_memory`)."""
        return split_memory(self.events) if self.memory is None else (self.events, self.memory)


def split_memory(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``events`` without its MEMORY rows (the allocator's ``[memory]`` events, which only
    memory analyses read) and without the allocator's columns (:data:`MEMORY_ONLY`), and those
    rows with theirs (:data:`MEMORY_COLUMNS`): the frames :func:`read_trace` gives."""
    mem = events["kind"].to_numpy() == MEMORY
    event_columns = [c for c in events.columns if c not in MEMORY_ONLY]
    if not mem.any():
        return (events if len(event_columns) == events.shape[1] else events[event_columns]), no_memory()
    memory_columns = [c for c in MEMORY_COLUMNS if c in events.columns]
    return (
        events.loc[~mem, event_columns].reset_index(drop=True),
        events.loc[mem, memory_columns].reset_index(drop=True),
    )


_NONBLANK = re.compile(rb"[^ \t\r\n]")


def decode(
    data: bytes, path: str | os.PathLike, text_times: bool = False, blanks: Blanks | None = None
) -> TraceDoc:
    """Typed decode of the JSON document; every failure becomes a one-line TraceError.

    ``text_times``: keep ``ts``/``dur`` as their JSON text (:class:`TextTimeEvent`).
    ``blanks``: ``data`` had long runs of whitespace squeezed out; byte offsets in messages
    are the file's."""
    if not _NONBLANK.search(data):  # stops at the first byte that is not blank; no copy
        raise TraceError(path, "empty file")
    if data[:3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark: harmless
        data = data[3:]
    _check_text(data, path)
    try:
        return decode_document(data, text_times)
    except UnicodeDecodeError as e:  # msgspec < 0.23 passes the codec's error through
        raise TraceError(
            path, f"not UTF-8 text: a JSON string holds the invalid byte 0x{e.object[e.start]:02x}"
        ) from None
    except msgspec.ValidationError as e:
        msg = str(e)
        if "Expected `object`, got" in msg and "$" not in msg.rsplit("-", maxsplit=1)[-1]:
            raise TraceError(
                path, f"not a trace: the top level must be a JSON object or array ({msg})"
            ) from None
        if "missing required field `traceEvents`" in msg:
            raise TraceError(path, "not a trace: no `traceEvents` list") from None
        raise TraceError(path, f"malformed trace: {msg}") from None
    except msgspec.DecodeError as e:
        msg = str(e)
        if "invalid utf-8" in msg.lower():  # msgspec >= 0.23 names no byte: find it
            raise TraceError(path, _not_utf8(data, blanks)) from None
        if "truncated" in msg.lower():
            raise TraceError(path, "truncated JSON (the file ends early)") from None
        at = re.search(r"\(byte (\d+)\)", msg)
        byte = int(at.group(1)) if at else 0
        in_file = byte if blanks is None else blanks.original(byte)
        if at and re.match(rb"-?(NaN|Infinity|nan|inf)", data[byte : byte + 9]):
            raise TraceError(
                path,
                f"NaN or Infinity at byte {in_file}: not valid JSON (a trace written with allow_nan?)",
            ) from None
        if at:
            msg = msg.replace(at.group(0), f"(byte {in_file})")
        raise TraceError(path, f"not valid JSON ({msg})") from None
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply") from None


def _not_utf8(data: bytes, blanks: Blanks | None) -> str:
    """The message for text that is not UTF-8: its first invalid byte and where it is (found
    slice by slice, on this error path only, so a large file is never copied whole)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    step = 1 << 20
    for start in range(0, len(data), step):
        try:
            decoder.decode(data[start : start + step], final=start + step >= len(data))
        except UnicodeDecodeError as e:
            at = max(start + e.start - len(e.object) + len(data[start : start + step]), 0)
            where = at if blanks is None else blanks.original(at)
            return f"not UTF-8 text: a JSON string holds the invalid byte 0x{data[at]:02x} (byte {where})"
    return "not UTF-8 text: a JSON string holds an invalid byte sequence"


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


#: Bytes of JSON per slice of ``traceEvents`` (the cuts are found near multiples of this).
CHUNK_BYTES = 32 << 20


def _decode_whole(
    data: bytes | bytearray, path: str | os.PathLike, builder: _FrameBuilder, blanks: Blanks | None = None
) -> TraceDoc:
    """The document of ``data``, its events added to ``builder`` (its ``traceEvents`` emptied):
    scanned natively when it is a well-formed trace, else decoded by msgspec (with its errors;
    ``blanks``: how ``data`` was squeezed, for the byte offsets they name)."""
    if native.enabled():
        got = _native_whole(data, path, builder)
        if got is not None:
            return got
    doc = decode(bytes(data), path, blanks=blanks)
    if not builder.add(doc.traceEvents):  # epoch-scale float times: decode them as text
        doc = decode(bytes(data), path, text_times=True, blanks=blanks)
        builder.add(doc.traceEvents)
    doc.traceEvents = []
    return doc


def _native_whole(
    data: bytes | bytearray, path: str | os.PathLike, builder: _FrameBuilder
) -> TraceDoc | None:
    """:func:`_decode_whole` by the native scanner; ``None`` (nothing added) when it declines."""
    start = 3 if data[:3] == b"\xef\xbb\xbf" else 0
    try:
        _check_text(bytes(data[start : start + 4096]), path)
    except TraceError:
        return None
    with memoryview(data) as mv:
        head = _head(mv[start:])
    if head is None:
        return None
    return decode_rest(data, start + len(head) + 1, head, builder, False)


def rank_of(doc: TraceDoc, path: str | os.PathLike) -> int | None:
    info = doc.distributedInfo or {}
    r = info.get("rank") if isinstance(info, dict) else None
    return _int_or_none(r)


def group_sizes(info: Any) -> list[int]:
    """The distinct sizes of the process groups ``distributedInfo.pg_config`` lists ([] none)."""
    config = info.get("pg_config") if isinstance(info, dict) else None
    if not isinstance(config, list):
        return []
    sizes = {_int_or_none(g.get("pg_size")) for g in config if isinstance(g, dict)}
    return sorted(s for s in sizes if s is not None and s > 0)


def group_ranks(info: Any) -> dict[str, list[int]]:
    """Each process group's global ranks by its ``pg_name`` (``distributedInfo.pg_config``), {}
    none; a group whose ranks are not a list of ints is left out."""
    config = info.get("pg_config") if isinstance(info, dict) else None
    out: dict[str, list[int]] = {}
    for g in config if isinstance(config, list) else []:
        ranks = g.get("ranks") if isinstance(g, dict) else None
        if isinstance(g, dict) and isinstance(ranks, list) and isinstance(g.get("pg_name"), str):
            got = [_int_or_none(r) for r in ranks]
            if all(r is not None for r in got):
                out[g["pg_name"]] = [int(r) for r in got if r is not None]
    return out


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31 else None


#: Distinct ``deviceProperties`` names kept (a node has at most a few dozen devices).
MAX_DEVICE_NAMES = 64


def device_names(doc: TraceDoc) -> list[str]:
    """The distinct device names of ``deviceProperties`` in order, each bounded as every name
    shown is (:data:`~tracekit.render.safetext.TERMINAL_NAME_CHARS`, an ellipsis marking a cut),
    at most :data:`MAX_DEVICE_NAMES` of them (then one entry says how many more): 200,000
    names, or one of 3.6 MB, were printed whole and wrapped in super-linear time."""
    names: dict[str, None] = {}
    more = 0
    for d in doc.deviceProperties or []:
        if isinstance(d, dict) and isinstance(d.get("name"), str):
            name = cut(d["name"])
            if name in names or len(names) < MAX_DEVICE_NAMES:
                names[name] = None
            else:
                more += 1
    return list(names) + ([f"\u2026 and {more} more device entries"] if more else [])


def read_trace(
    path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES, jobs: int = 1, memory: bool = True
) -> RawTrace:
    """Read one trace file into a :class:`RawTrace`: streamed slice by slice when it is big
    (:mod:`tracekit.read.streaming`), by ``jobs`` processes when it is big and plain
    (:mod:`tracekit.read.parallel`), decoded whole when it is small, broken or unusual.
    Without ``memory`` the allocator's ``[memory]`` events are left out (a run that needs no
    memory table)."""
    got: tuple[_FrameBuilder, TraceDoc | bytearray | None] | None = None
    if jobs > 1 and os.path.isfile(path) and os.path.getsize(path) <= max_bytes:
        got = read_parallel(path, jobs, CHUNK_BYTES)
    blanks = Blanks()  # long runs of whitespace squeezed out as the text arrives
    if got is None:
        builder = _FrameBuilder()
        pieces = open_text(path, max_bytes)
        try:
            got = builder, stream_decode(pieces, builder, CHUNK_BYTES, blanks=blanks)
        finally:
            pieces.close()
    builder, got_doc = got
    del got
    if isinstance(got_doc, TraceDoc):
        doc = got_doc
    elif got_doc is None:  # broken or unusual: read again whole, for the decoder's own error message
        builder, blanks = _FrameBuilder(), Blanks()
        doc = _decode_whole(read_bytes(path, max_bytes, blanks), path, builder, blanks)
    else:  # a short text: one whole decode, after what was streamed
        doc = _decode_whole(got_doc, path, builder, blanks)
    del got_doc
    frame, mem, warnings, meta = builder.finish(path, memory)
    meta.update(
        {
            "rank": rank_of(doc, path),
            "world_size": _int_or_none((doc.distributedInfo or {}).get("world_size"))
            if isinstance(doc.distributedInfo, dict)
            else None,
            "group_sizes": group_sizes(doc.distributedInfo),
            "group_ranks": group_ranks(doc.distributedInfo),
            "devices": device_names(doc),
            "schema_version": doc.schemaVersion,
            "events_in_file": builder.n_events,
            "host_name": doc.host_name,
        }
    )
    return RawTrace(path=os.fspath(path), events=frame, meta=meta, warnings=warnings, memory=mem)
