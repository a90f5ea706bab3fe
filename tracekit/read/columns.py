"""Decoded events to columns: the builder that turns msgspec's structs into the ``events`` frame.

Times become int64 nanoseconds (float microseconds keep their nanosecond decimals), ids wrap to
int64, names become categoricals; one builder collects the columns of every decoded slice.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..errors import TraceError
from .categoricals import _categorical, _raw_texts
from .memory_bound import notice, past_memory_bound
from .schema import (
    CPU_OP,
    KERNEL,
    MEMCPY,
    MEMORY,
    MEMSET,
    METADATA,
    RAW_FIELDS,
    UNKNOWN,
    Args,
    Event,
    TextTimeEvent,
    bytes_args,
    event_class,
    flow_phase,
)
from .timetext import number_floats, number_times, text_times

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
        out[i] = _one_int(v, none)
    return out


def _one_int(v: Any, none: int = -1) -> int:
    """One id as :func:`_int_column` stores it."""
    if v is None:
        return none
    if isinstance(v, float):
        v = int(v)
    elif isinstance(v, str):
        try:
            v = int(v)
        except ValueError:
            return none
    if v >= 1 << 63 or v < -(1 << 63):
        v = ((v + (1 << 63)) % (1 << 64)) - (1 << 63)
    return v


def _small_ints(values: list) -> np.ndarray:
    """int64 of the values that are ints within int64, -1 for the others (floats too)."""
    return np.array(
        [v if type(v) is int and -(1 << 63) <= v < 1 << 63 else -1 for v in values], dtype=np.int64
    )


def _fast_int_column(values: list, none: int = -1) -> np.ndarray:
    """Like :func:`_int_column` but vectorised for the common case (all small ints / None)."""
    try:
        arr = np.array([none if v is None else v for v in values], dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        return _int_column(values, none)
    return arr


class _Selection:
    """The events of a slice that tracekit keeps, their kinds, and what the others say: thread
    and process names (metadata events) and counts of unknown categories. Which is which is
    :func:`tracekit.read.schema.event_class`'s call, once per distinct (ph, cat, name)."""

    def __init__(self) -> None:
        self.unknown: dict[str, int] = {}
        self.thread_names: dict[tuple, str] = {}
        self.process_names: dict[Any, str] = {}
        self.kept: list = []
        self.kinds: list[int] = []
        self.device_categories: set[str] = set()  # of the kept device events (kernel, copy, set)

    @classmethod
    def of(cls, events: list[Event] | list[TextTimeEvent]) -> _Selection:
        sel = cls()
        unknown, keep_ev, kinds = sel.unknown, sel.kept, sel.kinds
        classes: dict[tuple, int] = {}
        for ev in events:
            key = (ev.ph, ev.cat, ev.name)
            c = classes.get(key)
            if c is None:
                c = classes[key] = event_class(*key)
            if c >= 0:
                keep_ev.append(ev)
                kinds.append(c)
            elif c == UNKNOWN:
                unknown[ev.cat] = unknown.get(ev.cat, 0) + 1  # type: ignore[index,arg-type]
            elif c == METADATA and ev.args is not None and ev.args.name is not None:
                sel.name(ev.name, ev.pid, ev.tid, ev.args.name)
        sel.device_categories.update(k[1] for k, c in classes.items() if c in (KERNEL, MEMCPY, MEMSET))
        return sel

    def name(self, event_name: str | None, pid: Any, tid: Any, value: str) -> None:
        """A metadata event named ``event_name`` whose ``args.name`` is ``value``."""
        if event_name == "thread_name":
            self.thread_names[(pid, tid)] = value
        elif event_name == "process_name":
            self.process_names[pid] = value


def _slice_times(kept: list) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(ts ns, dur ns, ts valid, dur valid) of the kept events; ``None`` when float64 times lost
    their nanoseconds (decode the slice's times as text)."""
    if isinstance(kept[0], TextTimeEvent):
        ts = text_times([bytes(e.ts) for e in kept])
        dur = text_times([bytes(e.dur) for e in kept], none_is_zero=True)
        if ts is None or dur is None:  # not numbers: the typed decode reports the error
            raise ValueError("a time that is not a number")
    else:
        ts = number_times([e.ts for e in kept])
        dur = number_times([0 if e.dur is None else e.dur for e in kept])
        if ts is None or dur is None:
            return None
    return ts[0], dur[0], ts[1], dur[1]


class _FrameBuilder:
    """Columns of the kept events, built one decoded slice at a time.

    Each slice's ``Event`` (or ``TextTimeEvent``) structs become small numpy/categorical columns,
    times included (int64 ns, exact: see :mod:`tracekit.read.timetext`), and are then dropped, so
    only one slice of structs is alive at once and every conversion is slice-independent.
    """

    def __init__(self) -> None:
        self.unknown: dict[str, int] = {}
        self.thread_names: dict[tuple, str] = {}
        self.process_names: dict[Any, str] = {}
        self.parts: list[dict] = []
        self.n_events = 0
        self.device_categories: set[str] = set()

    def add(self, events: list[Event] | list[TextTimeEvent]) -> bool:
        """Add one slice. ``False`` (and nothing added) when its float times are too large for
        float64 to keep their nanoseconds: decode the slice again as ``TextTimeEvent``."""
        sel = _Selection.of(events)
        keep_ev = sel.kept
        times = _slice_times(keep_ev) if keep_ev else None
        if keep_ev and times is None:
            return False
        if not keep_ev or times is None:
            self.add_part(len(events), sel, None)
            return True
        no_args = _NO_ARGS
        args = [e.args or no_args for e in keep_ev]
        part = {
            "kind": np.array(sel.kinds, dtype=np.int8),
            "name": _categorical([e.name or "" for e in keep_ev]),
            "pid": _int_column([e.pid for e in keep_ev]),
            "tid": _int_column([e.tid for e in keep_ev]),
            "ts": times[0],
            "dur": times[1],
            "ts_ok": times[2],
            "dur_ok": times[3],
            "flow_id": _int_column([e.id for e in keep_ev]),
            "flow_ph": _categorical([flow_phase(e.ph) for e in keep_ev]),
            "corr": _fast_int_column([a.correlation for a in args]),
            # a cuda_sync event's wait_on_* args (tracekit.read.schema.CUDA_SYNC)
            "seq": _fast_int_column([a.wait_corr if a.seq is None else a.seq for a in args]),
            "fwd_tid": _fast_int_column([a.wait_stream if a.fwd_tid is None else a.fwd_tid for a in args]),
            "stream": _fast_int_column([a.stream for a in args]),
            "collective": _categorical([a.collective or "" for a in args]),
            **{f: _raw_texts([getattr(a, f) for a in args]) for f in RAW_FIELDS},
            "device_type": _small_ints([a.device_type for a in args]),
            "device_id": _small_ints([a.device_id for a in args]),
            "addr": _int_column([a.addr for a in args]),
        }
        # a memory event's bytes are its args.Bytes, a copy's its args.size where args.bytes is
        # not a number (MTIA's DMA requests); numbers past float64's range in any of these drop
        # their events (one rule for odd numbers, tracekit.read.timetext)
        odds = []
        for col, values in (
            ("bytes", bytes_args(args, sel.kinds)),
            ("total_allocated", [a.total_allocated for a in args]),
            ("total_reserved", [a.total_reserved for a in args]),
        ):
            part[col], odd = number_floats(values)
            if odd is not None:
                odds.append(odd)
        if odds:
            part["odd"] = np.logical_or.reduce(odds)
        self.add_part(len(events), sel, part)
        return True

    def add_part(self, n_events: int, sel: _Selection, part: dict | None) -> None:
        """Add what one slice of ``n_events`` events gave: ``sel``'s names and unknown
        categories, and the columns of its kept events (``part``: every column but none)."""
        self.n_events += n_events
        for cat, k in sel.unknown.items():
            self.unknown[cat] = self.unknown.get(cat, 0) + k
        self.thread_names.update(sel.thread_names)
        self.process_names.update(sel.process_names)
        self.device_categories |= sel.device_categories
        if part is not None:
            mem = part["kind"] == MEMORY
            for c in MEMORY_ONLY:  # only memory events have them: kept for those rows alone
                if c in part:
                    part[c] = part[c][mem]
            self.parts.append(part)

    def absorb(self, other: _FrameBuilder) -> None:
        """Append what ``other`` collected from the events that follow this builder's (a later
        stretch of the same file, decoded elsewhere): as if its slices had been added here."""
        self.parts += other.parts
        self.n_events += other.n_events
        for cat, k in other.unknown.items():
            self.unknown[cat] = self.unknown.get(cat, 0) + k
        self.thread_names.update(other.thread_names)
        self.process_names.update(other.process_names)
        self.device_categories |= other.device_categories

    def _column(self, name: str):
        """One column of every part, joined; the parts' own copies are dropped as it is built,
        so the columns are never held twice over."""
        parts = [p.pop(name) for p in self.parts]
        if not parts:
            return empty_column(name)
        if isinstance(parts[0], pd.Categorical):
            if len(parts) == 1:
                return parts[0]
            return union_categoricals(parts, sort_categories=True)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _odd(self) -> np.ndarray | None:
        """The events with an odd number (:func:`tracekit.timetext.number_floats`), or None."""
        if not any("odd" in p for p in self.parts):
            return None
        return np.concatenate(
            [p.pop("odd") if "odd" in p else np.zeros(len(p["kind"]), bool) for p in self.parts]
        )

    def finish(
        self, path: str | os.PathLike, memory: bool = True
    ) -> tuple[pd.DataFrame, pd.DataFrame, list[str], dict]:
        """The events but MEMORY ones, the MEMORY events (none unless ``memory``), the warnings
        and what the reader learnt of processes and threads."""
        warnings: list[str] = []
        if self.unknown:
            listed = ", ".join(f"{k!r} ({v})" for k, v in sorted(self.unknown.items())[:5])
            warnings.append(f"ignored events of unknown categories: {listed}")
        odd = self._odd()
        past = past_memory_bound(self.parts) if memory else None  # the bound of memory_bound.py
        ts, dur = self._column("ts"), self._column("dur")
        ts_ok, dur_ok = self._column("ts_ok"), self._column("dur_ok")
        bad_ts = ~ts_ok
        if bad_ts.any():
            warnings.append(f"dropped {int(bad_ts.sum())} events with no valid timestamp")
        if odd is not None:
            warnings.append(
                f"dropped {int(odd.sum())} events with a number out of range (args.bytes, Bytes or Total)"
            )
            bad_ts |= odd
        neg = (dur < 0) & ts_ok
        if neg.any():
            warnings.append(f"{int(neg.sum())} events with negative duration were clamped to 0")
            dur = np.where(neg, 0, dur)
        # Over ~1 year, or past int64 nanoseconds: overflowing or garbage durations.
        huge = ((dur > (np.int64(1) << 55)) | ~dur_ok) & ts_ok
        if huge.any():
            warnings.append(f"{int(huge.sum())} events with overflowing durations were dropped")
        drop = bad_ts | huge
        got = {"ts": ts, "dur": dur, "kind": self._column("kind")}  # each column is built once
        is_mem = got["kind"] == MEMORY
        keep = ~(drop | is_mem) if (drop | is_mem).any() else None
        took = is_mem & ~drop if memory and is_mem.any() else None  # the memory rows, if asked for
        if past is not None and took is not None and (past & took).any():
            warnings.append(notice(int((past & took).sum())))
            took &= ~past
        took_of_mem = None if took is None else took[is_mem]  # the parts hold MEMORY_ONLY for those
        del ts_ok, dur_ok, bad_ts, huge, ts, dur, is_mem
        cols, mem_cols = {}, {}
        for c in _COLUMNS:  # one column at a time, each split as it is built: never held twice
            if c in MEMORY_ONLY and took is None:  # only memory events have it, and none is kept
                for p in self.parts:
                    p.pop(c, None)
                continue
            col = got.pop(c) if c in got else self._column(c)
            if took is not None and c in MEMORY_COLUMNS:
                mem_cols[c] = col[took_of_mem if c in MEMORY_ONLY else took]
            if c not in MEMORY_ONLY:
                col = col if keep is None else col[keep]
                if isinstance(col, np.ndarray) and not col.flags.writeable:  # one part, as scanned
                    col = col.copy()
                cols[c] = col
            del col
        self.parts = []
        frame = pd.DataFrame(cols, copy=False)  # its own columns already: not copied again
        mem = no_memory() if took is None else pd.DataFrame(mem_cols, copy=False)
        del cols, mem_cols
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
            "device_categories": sorted(self.device_categories),
        }
        return frame, mem, warnings, meta


_NO_ARGS = Args()
_EMPTY_DTYPES = {
    "bytes": np.float64,
    "total_allocated": np.float64,
    "total_reserved": np.float64,
    "kind": np.int8,
    "ts_ok": bool,
    "dur_ok": bool,
}
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
    "seq",
    "fwd_tid",
    "stream",
    "collective",
    "bytes",
    *RAW_FIELDS,
    "device_type",
    "device_id",
    "total_allocated",
    "total_reserved",
    "addr",
)
#: The event columns that are categoricals of strings ("" when absent).
CATEGORICAL_COLUMNS = ("name", "flow_ph", "collective", *RAW_FIELDS)
#: The allocator's fields, which only ``[memory]`` events have: the events' frame leaves them
#: out (on any other event they would be -1 or NaN, and no step reads them there).
MEMORY_ONLY = ("device_type", "device_id", "total_allocated", "total_reserved", "addr")
#: The columns of the memory events' frame: where and when each was (what places it in the op
#: stack, :mod:`tracekit.pipeline.memory`), and the allocator's fields; no launch, flow or
#: shape columns, which a memory event never has.
MEMORY_COLUMNS = ("kind", "name", "pid", "tid", "ts", "dur", "bytes", *MEMORY_ONLY)
#: The columns of the events' frame (every event but the memory events).
EVENT_COLUMNS = tuple(c for c in _COLUMNS if c not in MEMORY_ONLY)


def empty_column(name: str) -> Any:
    """An empty column ``name`` of its reader's type."""
    if name in CATEGORICAL_COLUMNS:
        return pd.Categorical([])
    return np.zeros(0, dtype=_EMPTY_DTYPES.get(name, np.int64))


def no_memory() -> pd.DataFrame:
    """The memory events' frame of a trace with none (:data:`MEMORY_COLUMNS`, no rows)."""
    return pd.DataFrame({c: empty_column(c) for c in MEMORY_COLUMNS})


#: Events decoded per chunk by the chunked reader.
