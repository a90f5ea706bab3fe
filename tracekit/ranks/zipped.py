"""A rank's memory rows, compressed by the worker that analysed it and kept so by the process
that gathers the ranks (:func:`~tracekit.ranks.perfile.tabulate_packed`).

A small rank with memory events sends the parent about 126 KB, and 53 KB of it is its memory rows
(``Attributed.memory``), which the report never reads there: the workers computed the memory
tables. Kept as columns in :class:`~tracekit.ranks.gathered.RankTables` they were 60 KB a rank;
as an Arrow IPC stream of their packed columns (:mod:`tracekit.ranks.packed_ipc`: no pickle),
zlib-compressed, 8 KB (docs/performance.md). They are read back, exactly, only when a view
computes a memory table in the parent (``--per-step``, filters, window files merged into one
rank).

:func:`zipped`: Needs: a worker's ``(Attributed, tables)`` (the memory rows packed,
:func:`~tracekit.ranks.gathered.pack_tables`). Adds: its ``memory`` held as a :class:`Zipped`
when it has rows and packs exactly. Guarantees: ``att.memory`` reads back the same frame.
"""

from __future__ import annotations

import zlib
from typing import Any

import pandas as pd

from .gathered import Packed
from .packed_ipc import decode, encode


def zipped(result: tuple[Any, dict]) -> tuple[Any, dict]:
    """A worker's ``(Attributed, tables)`` with the memory rows compressed (see the module);
    as it is when they are none."""
    att, tables = result
    got = Zipped.of(att.__dict__["_memory"])
    if got is not None:
        att.memory = got
    return att, tables


class Zipped:
    """One rank's memory events, as the gathering parent keeps them: their packed columns as
    an Arrow IPC stream (:mod:`tracekit.ranks.packed_ipc`: no pickle), zlib-compressed. A rank's
    memory rows are 60 KB packed and 8 KB so: half of what a small rank with memory events cost
    the parent (docs/performance.md). Read only when a view computes a memory table here
    (``--per-step``, filters, window files merged into one rank): the report's memory tables
    come computed by the workers."""

    __slots__ = ("blob", "descs", "size")

    def __init__(self, descs: list[dict], stream: bytes):
        self.descs, self.size, self.blob = descs, len(stream), zlib.compress(stream, 1)

    @classmethod
    def of(cls, frame: Any) -> Zipped | None:
        """``frame`` (packed) compressed; None when it has no rows or is not packed exactly."""
        if not isinstance(frame, Packed) or not frame.arrays or not len(frame.arrays[0]):
            return None
        try:
            return cls(*encode({"memory": frame}))
        except ValueError:
            return None

    def load(self) -> pd.DataFrame:
        got = decode(self.descs, zlib.decompress(self.blob), 4 * self.size + (1 << 16))
        if got is None:  # never: these bytes were written by encode in this process
            raise RuntimeError("a gathered rank's memory rows did not read back")
        return got["memory"].load()
