"""Memory over time, per step and device: the points of the HTML report's memory chart.

Per step and device, the allocation after each memory event (docs/metrics.md, "Memory"):

* ``t_ms``: time since the step's ProfilerStep range began (no markers: since the first
  memory event);
* ``allocated_mb``: ``Total Allocated`` (empty where the trace does not record it);
* ``growth_mb``: the rise above the allocation at the step's start (the level of
  :func:`tracekit.analyses.memory.level` minus its value before the step's first event);
* ``phase``: the event's phase.

Sized for a chart, not for every event: each device's curve keeps at most :data:`POINTS`
points over the run's steps (at least 2 per step). A step gets an equal share, ``runs =
max(1, POINTS // (2 x steps of the device))``; a step and device with more than ``2 x runs``
events is cut into ``runs`` runs of equal count, and each run keeps its lowest and highest
point, so the curve keeps its shape and every step's peak is exact. ``points=None`` (the
CLI's ``--full-series``) keeps every event. Only per step (no mean over steps); the terminal
and Markdown leave it out (the files keep it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import distinct_rows
from tracekit.pipeline.windows import Windows

from ._registry import MB, MEMORY_EVENTS, MS, PER_STEP, register
from .memory import MB_BYTES, complete, complete_levels

#: Points per device over the run (a chart is a few hundred pixels wide).
POINTS = 400
VALUES = {"t_ms": MS, "allocated_mb": MB, "growth_mb": MB}
COLUMNS = ["step", "device", "phase", *VALUES]


def thinned(key: np.ndarray, lvl: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Which points to keep: all of a key with at most ``2 x runs`` points, else the lowest
    and highest of each of its ``runs`` runs of equal count (``key``: per point its curve,
    numbered from 0; ``runs``: per key)."""
    n = len(key)
    size = np.bincount(key)[key]
    slices = runs[key]
    keep = size <= 2 * slices
    if keep.all():
        return keep
    order = np.argsort(key, kind="stable")  # each key's points, in order
    count = np.bincount(key)
    rank = np.empty(n, np.int64)  # a point's place among its key's (a group-by's cumcount)
    rank[order] = np.arange(n) - np.repeat(np.cumsum(count) - count, count)
    first = np.concatenate(([0], np.cumsum(runs)[:-1]))  # each key's first run number
    run = first[key] + rank * slices // size
    if np.isnan(lvl).any():  # a group-by's idxmin and idxmax skip NaN (and fail on all-NaN)
        s = pd.Series(lvl)
        keep[s.groupby(run).idxmin().to_numpy()] = True
        keep[s.groupby(run).idxmax().to_numpy()] = True
        return keep
    keep[_first_at(run, lvl, np.minimum)] = True
    keep[_first_at(run, lvl, np.maximum)] = True
    return keep


def _first_at(run: np.ndarray, values: np.ndarray, most: np.ufunc) -> np.ndarray:
    """Per run, the first point where ``values`` (no NaN) is at its ``most`` (np.minimum or
    np.maximum) over the run: ``pd.Series(values).groupby(run).idxmin()`` (``idxmax``)."""
    order = np.argsort(run, kind="stable")  # each run's points, in order
    r, v = run[order], values[order]
    starts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    at = np.flatnonzero(v == np.repeat(most.reduceat(v, starts), np.diff(np.r_[starts, len(v)])))
    return order[at[np.searchsorted(at, starts)]]


@register(
    "memory_timeline",
    title="Memory over time",
    keys=("device", "phase"),
    values=VALUES,
    reads=MEMORY_EVENTS,
    aggregate=PER_STEP,
    chart="memory",
    shown=False,
    series=True,
)
def table(memory: pd.DataFrame, windows: Windows, points: int | None = POINTS) -> pd.DataFrame:
    m = complete(memory, windows).reset_index(drop=True)
    if m.empty:
        return pd.DataFrame(columns=COLUMNS)
    lvl = complete_levels(memory, windows)[1]
    device = m["device"].array.codes.astype(np.int64) + 1  # 0: none
    key, first = distinct_rows(m["step"].to_numpy(), device)
    before = lvl - m["bytes"].to_numpy(np.float64)
    base = before[first][key]  # each step and device's level before its first event
    if points is None:
        rows = np.arange(len(m))
    else:  # only the points shown are built
        rows = np.flatnonzero(thinned(key, lvl, _runs(device[first], points)))
    m = m.iloc[rows]
    return pd.DataFrame(
        {
            "step": m["step"].to_numpy(),
            "device": m["device"].to_numpy(dtype=object),
            "phase": m["phase"].to_numpy(dtype=object),
            "t_ms": m["t_ns"].to_numpy() / 1e6,
            "allocated_mb": m["total_allocated"].to_numpy(np.float64) / MB_BYTES,
            "growth_mb": (lvl - base)[rows] / MB_BYTES,
        }
    )


def _runs(dev: np.ndarray, points: int) -> np.ndarray:
    """Per key (a step and device; ``dev``: its device): its runs, ``max(1, points // (2 x
    steps of the device))``."""
    steps = np.bincount(dev)[dev]  # keys (steps) of each key's device
    return np.maximum(1, points // (2 * steps))
