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

from .errors import TraceError
from .schema import (
    _CATEGORY_KIND,
    _KNOWN_UNUSED,
    _PYTHON_KEEP_ENGINE,
    _PYTHON_KEEP_PREFIX,
    ANNOTATION,
    CPU_OP,
    FLOW_LAUNCH,
    KERNEL,
    MEMCPY,
    MEMSET,
    PYTHON,
    Args,
    Event,
)

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
                "seq": _fast_int_column([a.seq for a in args]),
                "fwd_tid": _fast_int_column([a.fwd_tid for a in args]),
                "stream": _fast_int_column([a.stream for a in args]),
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
    "seq",
    "fwd_tid",
    "stream",
    "collective",
    "bytes",
)


#: Events decoded per chunk by the chunked reader.
