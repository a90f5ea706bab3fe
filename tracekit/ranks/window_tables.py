"""The per-step tables of a rank of several window files, computed one file at a time.

A rank whose files are successive profiling windows (:func:`tracekit.ranks.grouping.merge_windows`:
a profiler schedule with ``repeat``, or copies of one rank-0 file) holds its intervals as a
:class:`~tracekit.ranks.grouping.MergedIntervals` of its files' own, each read again when asked
for. Every table computed from intervals is per step, and a step lies in exactly one file, so
the rank's per-step table is its files' per-step tables concatenated in time order: the same
rows in the same order (tests/test_window_tables.py compares every table both ways). Computed
a file at a time, a rank of 600 windows holds one window's intervals, not 600.

Needs: the rank's :class:`MergedIntervals` and its merged windows. Adds: each named table's
per-step frame. Guarantees: each file's intervals are read once for all the tables, and let go
before the next file's are read.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .grouping import MergedIntervals

#: ``compute(name, intervals, windows)``: one table of one file's intervals and windows.
Compute = Callable[[str, pd.DataFrame, pd.DataFrame], pd.DataFrame]


def windowed(held: object) -> bool:
    """Whether ``held`` (a rank's intervals, or the handle of them) is a rank of several files."""
    return isinstance(held, MergedIntervals) and len(held.parts) > 1


def per_file_tables(held: MergedIntervals, windows: pd.DataFrame, names: list[str], compute: Compute) -> dict:
    """``{name: per-step frame}`` of the rank: each file's tables over its own steps' windows,
    concatenated in the files' (time) order."""
    got: dict[str, list[pd.DataFrame]] = {n: [] for n in names}
    for part, shift in held.parts:
        iv = part.load_intervals()
        iv = iv.assign(step=iv["step"] + shift)
        steps = set((part.steps["step"] + shift).tolist()) - held.cut if len(part.steps) else set()
        if held.cut:
            iv = iv[~iv["step"].isin(held.cut).to_numpy()].reset_index(drop=True)
        mine = windows[windows["step"].isin(steps).to_numpy()]
        for n in names:
            got[n].append(compute(n, iv, mine))
        del iv
    return {n: _joined(frames) for n, frames in got.items()}


def _joined(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """The files' frames in order; a file with no rows adds none, nor its empty columns'
    dtypes (an empty int column is float64 or object, and would turn the others' into it)."""
    rows = [f for f in frames if len(f)]
    return pd.concat(rows, ignore_index=True) if rows else frames[0]
