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
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np
import pandas as pd

from .errors import TraceError

#: Default bound on decompressed size; ``--max-bytes`` raises it.
DEFAULT_MAX_BYTES = 8 * 1024**3

Number = Union[int, float]
Ident = Union[int, str]


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys tracekit reads; all others are skipped by the decoder."""

    correlation: Union[Ident, None] = None
    external_id: Union[Ident, None] = msgspec.field(default=None, name="External id")
    seq: Union[Ident, None] = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Union[Ident, None] = msgspec.field(default=None, name="Fwd thread id")
    stream: Union[Ident, None] = None
    device: Union[Ident, None] = None
    py_id: Union[Ident, None] = msgspec.field(default=None, name="Python id")
    py_parent: Union[Ident, None] = msgspec.field(default=None, name="Python parent id")
    collective: Union[str, None] = msgspec.field(default=None, name="Collective name")
    bytes: Union[Number, str, None] = None
    name: Union[str, None] = None  # metadata events: process / thread names


class Event(msgspec.Struct, gc=False):
    ph: Union[str, None] = None
    cat: Union[str, None] = None
    name: Union[str, None] = None
    pid: Union[Ident, None] = None
    tid: Union[Ident, None] = None
    ts: Union[Number, None] = None
    dur: Union[Number, None] = None
    id: Union[Ident, None] = None
    args: Union[Args, None] = None


class TraceDoc(msgspec.Struct, gc=False):
    traceEvents: list[Event]
    distributedInfo: Union[dict[str, Any], None] = None
    deviceProperties: Union[list[Any], None] = None
    schemaVersion: Union[Ident, None] = None
    baseTimeNanoseconds: Union[int, None] = None


_DECODER = msgspec.json.Decoder(TraceDoc)


# Normalised event kinds. Values are small ints in the ``kind`` column.
KERNEL, MEMCPY, MEMSET, RUNTIME, CPU_OP, ANNOTATION, PYTHON, FLOW_LAUNCH, FLOW_FWDBWD = range(9)
KIND_NAMES = ["kernel", "memcpy", "memset", "runtime", "cpu_op", "annotation", "python",
              "flow_launch", "flow_fwdbwd"]

_CATEGORY_KIND = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "memcpy": MEMCPY,
    "gpu_memset": MEMSET, "memset": MEMSET,
    "cuda_runtime": RUNTIME, "runtime": RUNTIME, "cuda_driver": RUNTIME,
    "hip_runtime": RUNTIME, "mtia_runtime": RUNTIME, "privateuse1_runtime": RUNTIME,
    "cpu_op": CPU_OP, "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "ac2g": FLOW_LAUNCH, "async_cpu_to_gpu": FLOW_LAUNCH, "async_gpu": FLOW_LAUNCH,
    "fwdbwd": FLOW_FWDBWD,
}
#: Categories that exist in real traces and that tracekit deliberately does not use.
_KNOWN_UNUSED = {
    "trace", "gpu_user_annotation", "cuda_sync", "cpu_instant_event", "overhead",
    "python_function_other", "mtia_ccp_events", "cuda_profiler_range", "kineto", "",
}

#: python_function events kept: module frames and the rotary helper; the rest are dropped.
_PYTHON_KEEP_PREFIX = "nn.Module: "
_PYTHON_KEEP_SUBSTR = ("apply_rotary_pos_emb", "rotary")


@dataclass
class RawTrace:
    """Columnar events of one trace file (one rank)."""

    path: str
    events: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def read_bytes(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's JSON bytes, gunzipped when needed, refusing more than ``max_bytes``."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(2)
            f.seek(0)
            if head == b"\x1f\x8b":
                return _gunzip_bounded(f, max_bytes, p)
            data = f.read(max_bytes + 1)
    except IsADirectoryError:
        raise TraceError(p, "is a directory, expected a trace file") from None
    except FileNotFoundError:
        raise TraceError(p, "no such file") from None
    except PermissionError:
        raise TraceError(p, "permission denied") from None
    if len(data) > max_bytes:
        raise TraceError(p, f"larger than the {max_bytes:,}-byte limit (raise it with --max-bytes)")
    return data


def _gunzip_bounded(f: io.BufferedReader, max_bytes: int, p: Path) -> bytes:
    out = bytearray()
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            while chunk:
                if d.eof:  # concatenated gzip members: start the next one
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                out += d.decompress(chunk, max_bytes + 1 - len(out))
                if len(out) > max_bytes:
                    raise TraceError(
                        p, f"decompresses to more than the {max_bytes:,}-byte limit "
                           "(a gzip bomb? raise the limit with --max-bytes)")
                chunk = d.unused_data if d.eof else d.unconsumed_tail
        if not d.eof:
            raise TraceError(p, "truncated gzip stream (the file ends early)")
    except zlib.error as e:
        raise TraceError(p, f"corrupt gzip stream ({e})") from None
    return bytes(out)


def decode(data: bytes, path: str | os.PathLike) -> TraceDoc:
    """Typed decode of the JSON document; every failure becomes a one-line TraceError."""
    if not data.strip():
        raise TraceError(path, "empty file")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:3] == b"\xef\xbb\xbf":
        if data[:3] != b"\xef\xbb\xbf":
            raise TraceError(path, "UTF-16 text; traces are UTF-8 JSON")
        data = data[3:]
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError as e:
        msg = str(e)
        if "Expected `object`, got" in msg and "$" not in msg.split("-")[-1]:
            raise TraceError(path, f"not a trace: the top level must be a JSON object ({msg})") from None
        if "missing required field `traceEvents`" in msg:
            raise TraceError(path, "not a trace: no `traceEvents` list") from None
        raise TraceError(path, f"malformed trace: {msg}") from None
    except msgspec.DecodeError as e:
        msg = str(e)
        if "truncated" in msg.lower():
            raise TraceError(path, "truncated JSON (the file ends early)") from None
        raise TraceError(path, f"not valid JSON ({msg})") from None
    except RecursionError:
        raise TraceError(path, "JSON nested too deeply") from None


def _int_column(values: list, none: int = -1) -> np.ndarray:
    """Python ints/strs/None -> int64 (None/strings that are not ints -> ``none``).

    Ids above 2**63 wrap into the negative range: ids are only ever compared for equality.
    """
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


def _time_column(values: list) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond numbers -> (int64 ns, valid mask). Exact for ints; floats rounded to 1 ns."""
    valid = np.array([v is not None and v == v and v not in (float("inf"), float("-inf"))
                      for v in values], dtype=bool)
    if not valid.any():
        return np.zeros(len(values), dtype=np.int64), valid
    if all(isinstance(v, int) for v in values if v is not None):
        ns = np.array([0 if v is None else v for v in values], dtype=object)
        try:
            return (np.asarray(ns, dtype=np.int64) * 1000), valid
        except OverflowError:
            pass
    # Subtract an integer base first so float rounding happens on small numbers.
    base = int(min(v for v, ok in zip(values, valid) if ok))
    rel = np.array([(v - base) if ok else 0.0 for v, ok in zip(values, valid)], dtype=np.float64)
    return np.rint(rel * 1000.0).astype(np.int64) + np.int64(base) * 1000, valid


def events_to_frame(doc: TraceDoc, path: str | os.PathLike) -> tuple[pd.DataFrame, list[str], dict]:
    """Columns of the events tracekit uses, plus warnings and metadata from ``M`` events."""
    warnings: list[str] = []
    unknown: dict[str, int] = {}
    keep_ev: list[Event] = []
    kinds: list[int] = []
    thread_names: dict[tuple, str] = {}
    process_names: dict[Any, str] = {}
    for ev in doc.traceEvents:
        ph = ev.ph
        if ph == "M":
            if ev.args is not None and ev.args.name is not None:
                if ev.name == "thread_name":
                    thread_names[(ev.pid, ev.tid)] = ev.args.name
                elif ev.name == "process_name":
                    process_names[ev.pid] = ev.args.name
            continue
        cat = ev.cat
        if cat is None:
            continue
        kind = _CATEGORY_KIND.get(cat)
        if kind is None:
            kind = _CATEGORY_KIND.get(cat.lower())
            if kind is None:
                if cat.lower() not in _KNOWN_UNUSED:
                    unknown[cat] = unknown.get(cat, 0) + 1
                continue
        if kind <= CPU_OP or kind == ANNOTATION:
            if ph != "X":
                continue
        elif kind == PYTHON:
            name = ev.name or ""
            if not (name.startswith(_PYTHON_KEEP_PREFIX) or any(s in name for s in _PYTHON_KEEP_SUBSTR)):
                continue
        elif kind == FLOW_LAUNCH or ph not in ("s", "f", "t"):
            continue  # launches are linked by correlation id, not by flow events
        keep_ev.append(ev)
        kinds.append(kind)
    if unknown:
        listed = ", ".join(f"{k!r} ({v})" for k, v in sorted(unknown.items())[:5])
        warnings.append(f"ignored events of unknown categories: {listed}")

    n = len(keep_ev)
    args = [e.args for e in keep_ev]
    no_args = Args()
    args = [a if a is not None else no_args for a in args]
    ts, ts_ok = _time_column([e.ts for e in keep_ev])
    dur_raw = [e.dur for e in keep_ev]
    dur, dur_ok = _time_column([0 if d is None else d for d in dur_raw])
    kind_arr = np.array(kinds, dtype=np.int8)
    bad_ts = ~ts_ok
    if bad_ts.any():
        warnings.append(f"dropped {int(bad_ts.sum())} events with no valid timestamp")
    neg = (dur < 0) & ts_ok
    if neg.any():
        warnings.append(f"{int(neg.sum())} events with negative duration were clamped to 0")
        dur = np.where(neg, 0, dur)
    huge = dur > (np.int64(1) << 55)  # over ~1 year: overflowing or garbage durations
    if huge.any():
        warnings.append(f"{int(huge.sum())} events with overflowing durations were dropped")

    frame = pd.DataFrame({
        "kind": kind_arr,
        "name": pd.Categorical([e.name or "" for e in keep_ev]),
        "pid": _int_column([e.pid for e in keep_ev]),
        "tid": _int_column([e.tid for e in keep_ev]),
        "ts": ts,
        "dur": dur,
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
        "bytes": np.array([a.bytes if isinstance(a.bytes, (int, float)) else np.nan for a in args],
                          dtype=np.float64),
    })
    drop = bad_ts | huge
    if drop.any():
        frame = frame[~drop].reset_index(drop=True)
    meta = {"thread_names": {f"{k[0]}:{k[1]}": v for k, v in thread_names.items()},
            "process_names": {str(k): v for k, v in process_names.items()}}
    del n
    return frame, warnings, meta


def rank_of(doc: TraceDoc, path: str | os.PathLike) -> int | None:
    info = doc.distributedInfo or {}
    r = info.get("rank") if isinstance(info, dict) else None
    return r if isinstance(r, int) and r >= 0 else None


def device_names(doc: TraceDoc) -> list[str]:
    names = []
    for d in doc.deviceProperties or []:
        if isinstance(d, dict) and isinstance(d.get("name"), str):
            names.append(d["name"])
    return names


def read_trace(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> RawTrace:
    """Read one trace file into a :class:`RawTrace`."""
    data = read_bytes(path, max_bytes)
    doc = decode(data, path)
    del data
    frame, warnings, meta = events_to_frame(doc, path)
    meta.update({
        "rank": rank_of(doc, path),
        "world_size": (doc.distributedInfo or {}).get("world_size")
        if isinstance(doc.distributedInfo, dict) else None,
        "devices": device_names(doc),
        "schema_version": doc.schemaVersion,
        "events_in_file": len(doc.traceEvents),
    })
    return RawTrace(path=os.fspath(path), events=frame, meta=meta, warnings=warnings)


TRACE_SUFFIXES = (".json", ".json.gz")


def trace_files(directory: str | os.PathLike) -> list[Path]:
    """The trace files of a directory of per-rank traces (sorted), refusing escaping symlinks."""
    root = Path(directory).resolve()
    files = []
    for p in sorted(Path(directory).iterdir()):
        if not p.name.endswith(TRACE_SUFFIXES) or p.name == "manifest.json":
            continue
        real = p.resolve()
        if root not in real.parents:
            raise TraceError(p, "symlink points outside the trace directory; refused")
        if real.is_file():
            files.append(p)
    if not files:
        raise TraceError(directory, "no trace files (*.json, *.json.gz) in this directory")
    return files
