"""The reader's fast path: event text straight to columns by the C scanner ``tracekit.read._kineto``.

:func:`scan` hands a byte range of ``traceEvents`` to the scanner, which reads the JSON once and
returns flat columns of the events tracekit keeps (which ones, and as what kind, is
:func:`tracekit.read.schema.event_class`'s call, made by the scanner once per distinct (ph, cat,
name)), one entry per kept event, strings as codes of one Python ``str`` per distinct value: no
Python object per event, and no selection of the kept ones afterwards. This module applies the
reader's other rules to them, per distinct value: process and thread names, unknown categories,
string ids (:func:`tracekit.read.columns._one_int`), and, as :func:`tracekit.read.columns._slice_times`
does, whether the slice's float times must be read from their text. The result is added to a
:class:`~tracekit.read.columns._FrameBuilder` exactly as the msgspec reader would add the same events.

The scanner handles the common, valid shapes only; for anything else (broken or odd JSON, values
of unexpected types, see ``_kineto.c``) it declines, :func:`scan` returns ``None`` and the caller
decodes that range with msgspec, for today's results, errors and warnings. Without the compiled
extension, or with ``TRACEKIT_NATIVE=0``, :func:`enabled` is false and msgspec reads everything.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from .categoricals import _categorical_codes
from .columns import _FrameBuilder, _one_int, _Selection
from .schema import KERNEL, MEMCPY, MEMSET, RAW_FIELDS, UNKNOWN, event_class, flow_phase

try:
    from . import _kineto  # type: ignore[attr-defined]
except ImportError:  # not compiled here: msgspec reads everything
    _kineto = None

_ID_COLUMNS = ("pid", "tid", "flow_id", "corr", "seq", "fwd_tid", "stream", "addr")


def enabled() -> bool:
    """Whether the C scanner is there and not turned off (``TRACEKIT_NATIVE=0``)."""
    return _kineto is not None and os.environ.get("TRACEKIT_NATIVE", "1") != "0"


class Scanned:
    """One range's events, scanned and classified, not yet added to a builder.

    The scanner keeps only the events :func:`tracekit.read.schema.event_class` keeps (it calls it per
    distinct triple), so the columns hold those alone, in file order. ``n``: the events scanned;
    ``end``: where the scan stopped (the array's ``]`` for a scan to the close); ``text``:
    whether the times were read from their text; ``need_text``: a number scan whose kept
    float times lost their nanoseconds in float64 (scan again with ``text_times``)."""

    def __init__(self, got: dict, text: bool) -> None:
        self.got, self.text, self.end, self.n, self.kept = got, text, got["end"], got["n"], got["kept"]
        self.strings: list[str] = got["strings"]
        self.triples = np.frombuffer(got["triples"], dtype=np.int32).reshape(-1, 3)
        self.classes = np.frombuffer(got["classes"], dtype=np.int8)
        self.tflags = np.frombuffer(got["tflags"], dtype=np.uint8)
        self.need_text = not text and (self._lost("TS") or self._lost("DUR"))

    def string(self, code: int) -> str | None:
        return None if code < 0 else self.strings[code]

    def _lost(self, which: str) -> bool:
        """Whether float64 lost the nanoseconds of this time column (``timetext.number_times``
        gives up on a column with a float where a valid value reaches 2**43 us)."""
        f = self.tflags
        is_float, big = getattr(_kineto, which + "_FLOAT"), getattr(_kineto, which + "_BIG")
        return bool((f & is_float).any() and (f & big).any())

    def selection(self) -> _Selection:
        """Unknown categories and process and thread names, as :class:`_Selection` finds them."""
        sel = _Selection()
        counts = np.frombuffer(self.got["counts"], dtype=np.int64)
        for t in np.flatnonzero(self.classes == UNKNOWN).tolist():
            cat = self.strings[self.triples[t, 1]]
            sel.unknown[cat] = sel.unknown.get(cat, 0) + int(counts[t])
        kept = np.flatnonzero(np.isin(self.classes, (KERNEL, MEMCPY, MEMSET)) & (counts > 0)).tolist()
        sel.device_categories.update(self.strings[self.triples[t, 1]] for t in kept)
        for t, pid, tid, value in self.got["meta"]:  # events of class METADATA only
            sel.name(self.string(int(self.triples[t, 2])), pid, tid, value)
        return sel

    def add_to(self, builder: _FrameBuilder) -> None:
        """Add these events to ``builder``, as ``builder.add`` adds the same events decoded."""
        sel = self.selection()
        if not self.kept:
            builder.add_part(self.n, sel, None)
            return
        builder.add_part(self.n, sel, self._columns())
        self.got = {}

    def _column(self, name: str, dtype: Any) -> np.ndarray:
        return np.frombuffer(self.got[name], dtype=dtype)

    def _columns(self) -> dict:
        s = self.string
        triple = self._column("triple", np.int32)
        ph, name = (self.triples[:, i][triple] for i in (0, 2))
        flags = self.tflags
        part = {
            "kind": self._column("kind", np.int8),
            "name": _categorical_codes(name + 1, lambda c: s(c - 1) or ""),
            **{c: self._ids(c) for c in ("pid", "tid")},
            "ts": self._column("ts", np.int64),
            "dur": self._column("dur", np.int64),
            "ts_ok": (flags & _kineto.TS_OK) != 0,
            "dur_ok": (flags & _kineto.DUR_OK) != 0,
            "flow_id": self._ids("flow_id"),
            "flow_ph": _categorical_codes(ph + 1, lambda c: flow_phase(s(c - 1))),
            **{c: self._ids(c) for c in ("corr", "seq", "fwd_tid", "stream")},
            "collective": self._strings("collective"),
            "bytes": self._column("bytes", np.float64),
            **{f: self._strings(f) for f in RAW_FIELDS},
            "device_type": self._column("device_type", np.int64),
            "device_id": self._column("device_id", np.int64),
            "total_allocated": self._column("total_allocated", np.float64),
            "total_reserved": self._column("total_reserved", np.float64),
            "addr": self._ids("addr"),
        }
        return part

    def _strings(self, name: str) -> Any:
        """A column of string codes (-1: absent or null) as a categorical ("" when absent)."""
        s = self.string
        return _categorical_codes(self._column(name, np.int32) + 1, lambda c: s(c - 1) or "")

    def _ids(self, name: str) -> np.ndarray:
        """An id column: ints as scanned, strings (codes) converted as ``_int_column`` does."""
        ids = self._column(name, np.int64)
        bit = 1 << _ID_COLUMNS.index(name)
        is_str = (np.frombuffer(self.got["idstr"], dtype=np.uint8) & bit) != 0
        if is_str.any():
            ids = ids.copy()
            codes = ids[is_str]
            distinct = np.unique(codes)
            values = np.array([_one_int(self.strings[c]) for c in distinct.tolist()], dtype=np.int64)
            ids[is_str] = values[np.searchsorted(distinct, codes)]
        return ids


def scan(text: Any, start: int, end: int | None, text_times: bool) -> Scanned | None:
    """The events of ``text[start:end]`` (``end=None``: up to the ``]`` that closes the array)
    scanned, their times read as text when ``text_times`` or when float64 would lose their
    nanoseconds (``.text`` says which); ``None`` when the scanner declines (decode the range
    with msgspec) or is off."""
    if not enabled():
        return None
    got = _kineto.scan(text, start, end, text_times, event_class)
    if got is None:
        return None
    scanned = Scanned(got, text_times)
    if scanned.need_text:
        got = _kineto.scan(text, start, end, True, event_class)
        return None if got is None else Scanned(got, True)
    return scanned
