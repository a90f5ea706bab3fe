"""Read a Kineto (PyTorch profiler) Chrome trace into columnar events.

One typed ``msgspec`` decode keeps only the fields that the link and attribute steps use (every
other key of every event is skipped by the decoder, never materialised), then the events become
columns. Times become int64 nanoseconds. Every vintage of Kineto's JSON is accepted:

* categories in any case (``Kernel``/``kernel``, ``Runtime``/``cuda_runtime``, ...), CUDA and
  ROCm runtime calls, ``cuda_driver`` launches (Triton's ``cuLaunchKernel``);
* ``ts``/``dur`` as integer or float microseconds (nanosecond decimals kept);
* 64-bit ids, also above 2**63 (stored wrapped to int64: equality is all that is used);
* events in any order; no CPU side, no GPU side, no ProfilerStep, no distributedInfo.
"""

from __future__ import annotations

import io
import os
import re
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from . import progress
from .errors import TraceError

#: Default bound on decompressed size; ``--max-bytes`` raises it.
DEFAULT_MAX_BYTES = 8 * 1024**3

Number = int | float
Ident = int | str


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys tracekit reads; all others are skipped by the decoder."""

    correlation: Ident | None = None
    external_id: Ident | None = msgspec.field(default=None, name="External id")
    seq: Ident | None = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Ident | None = msgspec.field(default=None, name="Fwd thread id")
    stream: Ident | None = None
    device: Ident | None = None
    py_id: Ident | None = msgspec.field(default=None, name="Python id")
    py_parent: Ident | None = msgspec.field(default=None, name="Python parent id")
    collective: str | None = msgspec.field(default=None, name="Collective name")
    bytes: Number | str | None = None
    name: str | None = None  # metadata events: process / thread names


class Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: Ident | None = None
    tid: Ident | None = None
    ts: Number | None = None
    dur: Number | None = None
    id: Ident | None = None
    args: Args | None = None


class TraceDoc(msgspec.Struct, gc=False):
    traceEvents: list[Event]
    distributedInfo: dict[str, Any] | None = None
    deviceProperties: list[Any] | None = None
    schemaVersion: Ident | None = None
    baseTimeNanoseconds: int | None = None
    host_name: str | None = None


_DECODER = msgspec.json.Decoder(TraceDoc)


# Normalised event kinds. Values are small ints in the ``kind`` column.
KERNEL, MEMCPY, MEMSET, RUNTIME, CPU_OP, ANNOTATION, PYTHON, FLOW_LAUNCH, FLOW_FWDBWD = range(9)
KIND_NAMES = [
    "kernel",
    "memcpy",
    "memset",
    "runtime",
    "cpu_op",
    "annotation",
    "python",
    "flow_launch",
    "flow_fwdbwd",
]

_CATEGORY_KIND = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "cuda_runtime": RUNTIME,
    "runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "hip_runtime": RUNTIME,
    "mtia_runtime": RUNTIME,
    "privateuse1_runtime": RUNTIME,
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "ac2g": FLOW_LAUNCH,
    "async_cpu_to_gpu": FLOW_LAUNCH,
    "async_gpu": FLOW_LAUNCH,
    "fwdbwd": FLOW_FWDBWD,
}
#: Categories that exist in real traces and that tracekit deliberately does not use.
_KNOWN_UNUSED = {
    "trace",
    "gpu_user_annotation",
    "cuda_sync",
    "cpu_instant_event",
    "overhead",
    "python_function_other",
    "mtia_ccp_events",
    "cuda_profiler_range",
    "kineto",
    "",
}

#: python_function events kept: module frames and the rotary helper; the rest are dropped.
_PYTHON_KEEP_PREFIX = "nn.Module: "
_PYTHON_KEEP_SUBSTR = ("apply_rotary_pos_emb", "rotary")
#: DeepSpeed engine frames: engine.backward / engine.step are phase evidence (pipeline/evidence).
_PYTHON_KEEP_ENGINE = "deepspeed/runtime/engine.py("


@dataclass
class RawTrace:
    """Columnar events of one trace file (one rank)."""

    path: str
    events: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_bytes(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes | bytearray:
    """The file's JSON bytes, gunzipped when needed, refusing more than ``max_bytes``.

    A gunzipped file comes back as the ``bytearray`` it was inflated into (never copied: a
    2 GiB inflation must not need 4 GiB)."""
    p = Path(path)
    try:
        # A FIFO or device would block or never end: only regular files are read.
        if p.exists() and not p.is_dir() and not stat.S_ISREG(p.stat().st_mode):
            raise TraceError(p, "not a regular file (a pipe, socket or device?); refused")
        with open(p, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                return _gunzip_bounded(f, max_bytes, p)
            data = _read_bounded(f, max_bytes)
    except IsADirectoryError:
        raise TraceError(p, "is a directory, expected a trace file") from None
    except FileNotFoundError:
        raise TraceError(p, "no such file") from None
    except PermissionError:
        raise TraceError(p, "permission denied") from None
    except OSError as e:  # symlink loops, names too long, I/O errors: one line, not a traceback
        raise TraceError(p, f"cannot read: {e.strerror or e}") from None
    if len(data) > max_bytes:
        raise TraceError(p, f"larger than the {max_bytes:,}-byte limit (raise it with --max-bytes)")
    return data


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


_INFLATE_STEP = 1 << 24


def _gunzip_bounded(f: io.BufferedReader, max_bytes: int, p: Path) -> bytearray:
    out = bytearray()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = max(os.fstat(f.fileno()).st_size, 1)
    try:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            progress.fraction(progress.READ * f.tell() / size)
            while True:  # at most 16 MiB of output per call: no bomb-sized temporaries
                if d.eof and chunk:  # concatenated gzip members: start the next one
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                cap = min(_INFLATE_STEP, max_bytes + 1 - len(out))
                piece = d.decompress(chunk, cap)
                out += piece
                if len(out) > max_bytes:
                    raise TraceError(
                        p,
                        f"decompresses to more than the {max_bytes:,}-byte limit "
                        "(a gzip bomb? raise the limit with --max-bytes)",
                    )
                chunk = d.unused_data if d.eof else d.unconsumed_tail
                if not chunk and (d.eof or len(piece) < cap):
                    break  # input used up and no output pending
        if not d.eof:
            raise TraceError(p, "truncated gzip stream (the file ends early)")
    except zlib.error as e:
        raise TraceError(p, f"corrupt gzip stream ({e})") from None
    return out


_NONBLANK = re.compile(rb"[^ \t\r\n]")


def decode(data: bytes, path: str | os.PathLike) -> TraceDoc:
    """Typed decode of the JSON document; every failure becomes a one-line TraceError."""
    if not _NONBLANK.search(data):  # stops at the first byte that is not blank; no copy
        raise TraceError(path, "empty file")
    if data[:3] == b"\xef\xbb\xbf":  # UTF-8 byte order mark: harmless
        data = data[3:]
    _check_text(data, path)
    try:
        return _DECODER.decode(data)
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


_INT_OR_NONE = {int, type(None)}


def _int_column(values: list, none: int = -1) -> np.ndarray:
    """Python ints/strs/None -> int64 (None/strings that are not ints -> ``none``).

    Ids above 2**63 wrap into the negative range: ids are only ever compared for equality.
    """
    types = set(map(type, values))
    if types <= _INT_OR_NONE:  # the common case, vectorised; big ids fall through to the loop
        try:
            return np.array(
                [none if v is None else v for v in values] if type(None) in types else values, dtype=np.int64
            )
        except OverflowError:
            pass
    out = np.full(len(values), none, dtype=np.int64)
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, float):
            v = int(v)
        elif isinstance(v, str):
            try:
                v = int(v)
            except ValueError:
                continue
        if v >= 1 << 63 or v < -(1 << 63):
            v = ((v + (1 << 63)) % (1 << 64)) - (1 << 63)
        out[i] = v
    return out


def _fast_int_column(values: list, none: int = -1) -> np.ndarray:
    """Like :func:`_int_column` but vectorised for the common case (all small ints / None)."""
    try:
        arr = np.array([none if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return _int_column(values, none)
    return arr


#: Times at or beyond this many microseconds (~126 years) are refused as overflowing: twice it in
#: nanoseconds still fits int64, so no arithmetic on valid times can wrap.
_MAX_US = 4_000_000_000_000_000


def _time_column(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond numbers -> (int64 ns, valid mask). Exact for ints; floats rounded to 1 ns."""
    # Out of range (overflowing int64 ns, or garbage), NaN and infinities are not valid.
    types = set(map(type, values))
    if types <= _INT_OR_NONE and len(values):
        if type(None) not in types:
            try:
                raw = np.array(values, dtype=np.int64)
            except OverflowError:
                raw = None
            if raw is not None and ((raw > -_MAX_US) & (raw < _MAX_US)).all():  # all valid: exact ints
                return raw * 1000, np.ones(len(values), dtype=bool)
    elif types <= {float, int} and len(values):  # floats (and ints, all < 2**53: exact)
        f = np.array(values, dtype=np.float64)
        valid = (f > -_MAX_US) & (f < _MAX_US)
        if valid.any():
            base = int(f[valid].min())
            rel = np.where(valid, f - np.float64(base), 0.0)
            return np.rint(rel * 1000.0).astype(np.int64) + np.int64(base) * 1000, valid
        return np.zeros(len(values), dtype=np.int64), valid
    valid = np.array([v is not None and -_MAX_US < v < _MAX_US for v in values], dtype=bool)
    if not valid.any():
        return np.zeros(len(values), dtype=np.int64), valid
    if all(isinstance(v, int) for v in values if v is not None):
        ns = values if valid.all() else [v if ok else 0 for v, ok in zip(values, valid)]
        return np.array(ns, dtype=np.int64) * 1000, valid
    # Subtract an integer base first so float rounding happens on small numbers.
    base = int(min(v for v, ok in zip(values, valid) if ok))
    rel = np.array([(v - base) if ok else 0.0 for v, ok in zip(values, valid)], dtype=np.float64)
    return np.rint(rel * 1000.0).astype(np.int64) + np.int64(base) * 1000, valid


class _FrameBuilder:
    """Columns of the kept events, built one decoded chunk at a time.

    Each chunk's ``Event`` structs become small numpy/categorical columns and are then dropped,
    so only one chunk of structs is alive at once. Per-value conversions are chunk-independent;
    ``ts``/``dur`` keep their raw numbers until :meth:`finish` because their float rounding uses
    one base for the whole file.
    """

    def __init__(self) -> None:
        self.unknown: dict[str, int] = {}
        self.thread_names: dict[tuple, str] = {}
        self.process_names: dict[Any, str] = {}
        self.parts: list[dict] = []
        self.ts_raw: list = []
        self.dur_raw: list = []
        self.n_events = 0

    def add(self, events: list[Event]) -> None:
        self.n_events += len(events)
        unknown = self.unknown
        keep_ev: list[Event] = []
        kinds: list[int] = []
        cat_kind = _CATEGORY_KIND
        for ev in events:
            ph = ev.ph
            if ph == "M":
                if ev.args is not None and ev.args.name is not None:
                    if ev.name == "thread_name":
                        self.thread_names[(ev.pid, ev.tid)] = ev.args.name
                    elif ev.name == "process_name":
                        self.process_names[ev.pid] = ev.args.name
                continue
            cat = ev.cat
            if cat is None:
                continue
            kind = cat_kind.get(cat)
            if kind is None:
                kind = cat_kind.get(cat.lower())
                if kind is None:
                    if cat.lower() not in _KNOWN_UNUSED:
                        unknown[cat] = unknown.get(cat, 0) + 1
                    continue
            if kind == PYTHON:
                name = ev.name or ""
                if not (name.startswith((_PYTHON_KEEP_PREFIX, _PYTHON_KEEP_ENGINE)) or "rotary" in name):
                    continue  # ("apply_rotary_pos_emb" contains "rotary": _PYTHON_KEEP_SUBSTR)
            elif kind <= CPU_OP or kind == ANNOTATION:
                if ph != "X":
                    continue
            elif kind == FLOW_LAUNCH or ph not in ("s", "f", "t"):
                continue  # launches are linked by correlation id, not by flow events
            keep_ev.append(ev)
            kinds.append(kind)
        if not keep_ev:
            return
        no_args = _NO_ARGS
        args = [e.args or no_args for e in keep_ev]
        self.ts_raw += [e.ts for e in keep_ev]
        self.dur_raw += [0 if e.dur is None else e.dur for e in keep_ev]
        self.parts.append(
            {
                "kind": np.array(kinds, dtype=np.int8),
                "name": pd.Categorical([e.name or "" for e in keep_ev]),
                "pid": _int_column([e.pid for e in keep_ev]),
                "tid": _int_column([e.tid for e in keep_ev]),
                "flow_id": _int_column([e.id for e in keep_ev]),
                "flow_ph": pd.Categorical([e.ph if e.ph in ("s", "f", "t") else "" for e in keep_ev]),
                "corr": _fast_int_column([a.correlation for a in args]),
                "ext_id": _fast_int_column([a.external_id for a in args]),
                "seq": _fast_int_column([a.seq for a in args]),
                "fwd_tid": _fast_int_column([a.fwd_tid for a in args]),
                "stream": _fast_int_column([a.stream for a in args]),
                "device": _fast_int_column([a.device for a in args]),
                "py_id": _int_column([a.py_id for a in args]),
                "py_parent": _int_column([a.py_parent for a in args]),
                "collective": pd.Categorical([a.collective or "" for a in args]),
                "bytes": np.array(
                    [b if isinstance(b := a.bytes, (int, float)) else np.nan for a in args], dtype=np.float64
                ),
            }
        )

    def _column(self, name: str):
        parts = [p[name] for p in self.parts]
        if not parts:
            if name in ("name", "flow_ph", "collective"):
                return pd.Categorical([])
            return np.zeros(
                0, dtype=np.float64 if name == "bytes" else np.int8 if name == "kind" else np.int64
            )
        if isinstance(parts[0], pd.Categorical):
            if len(parts) == 1:
                return parts[0]
            return union_categoricals(parts, sort_categories=True)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def finish(self, path: str | os.PathLike) -> tuple[pd.DataFrame, list[str], dict]:
        warnings: list[str] = []
        if self.unknown:
            listed = ", ".join(f"{k!r} ({v})" for k, v in sorted(self.unknown.items())[:5])
            warnings.append(f"ignored events of unknown categories: {listed}")
        ts, ts_ok = _time_column(self.ts_raw)
        dur, dur_ok = _time_column(self.dur_raw)
        self.ts_raw = self.dur_raw = []
        bad_ts = ~ts_ok
        if bad_ts.any():
            warnings.append(f"dropped {int(bad_ts.sum())} events with no valid timestamp")
        neg = (dur < 0) & ts_ok
        if neg.any():
            warnings.append(f"{int(neg.sum())} events with negative duration were clamped to 0")
            dur = np.where(neg, 0, dur)
        # Over ~1 year, or past int64 nanoseconds: overflowing or garbage durations.
        huge = ((dur > (np.int64(1) << 55)) | ~dur_ok) & ts_ok
        if huge.any():
            warnings.append(f"{int(huge.sum())} events with overflowing durations were dropped")
        cols = {}
        for c in _COLUMNS:
            cols[c] = ts if c == "ts" else dur if c == "dur" else self._column(c)
        self.parts = []
        frame = pd.DataFrame(cols)
        drop = bad_ts | huge
        if drop.any():
            frame = frame[~drop].reset_index(drop=True)
        if not np.isin(frame["kind"].to_numpy(), (KERNEL, MEMCPY, MEMSET, CPU_OP)).any():
            dropped = f" ({int(drop.sum()):,} dropped for invalid times)" if drop.any() else ""
            raise TraceError(
                path,
                f"nothing to analyse: none of its {self.n_events:,} events is "
                f"a kernel, memcpy, memset or CPU op with a valid time{dropped}",
            )
        meta = {
            "thread_names": {f"{k[0]}:{k[1]}": v for k, v in self.thread_names.items()},
            "process_names": {str(k): v for k, v in self.process_names.items()},
        }
        return frame, warnings, meta


_NO_ARGS = Args()
#: The event columns, in order.
_COLUMNS = (
    "kind",
    "name",
    "pid",
    "tid",
    "ts",
    "dur",
    "flow_id",
    "flow_ph",
    "corr",
    "ext_id",
    "seq",
    "fwd_tid",
    "stream",
    "device",
    "py_id",
    "py_parent",
    "collective",
    "bytes",
)


#: Events decoded per chunk by the chunked reader.
CHUNK_EVENTS = 100_000
#: Bytes of JSON per chunk (the split points are found near multiples of this).
CHUNK_BYTES = 32 << 20
_EVENTS_DECODER = msgspec.json.Decoder(list[Event])
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
                    events = _EVENTS_DECODER.decode(b"".join((b"[", mv[lo:hi], b"]")))
                    break
                except msgspec.DecodeError:
                    # A gap inside a string ("}, {" in a name): cut at the next one instead.
                    misses += 1
                    g = _EVENT_GAP.search(data, cut + 1, end) if cut < end and misses < 256 else None
                    if g is None:
                        return None
                    cut = g.start() + 1
            builder.add(events)
            del events
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
        del data
        builder.add(doc.traceEvents)
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
