"""Memory per step, device and phase, from the allocator's ``[memory]`` events.

The rows are the rank's memory events of complete steps (:attr:`Attributed.memory
<tracekit.pipeline.Attributed>`, labelled by :mod:`tracekit.pipeline.memory`), in time order.
Per step, device (``cpu``, ``gpu:N``) and window (``phase``: ``step`` is the whole step, the
other rows its phases; docs/metrics.md, "Memory"):

* ``events``; ``allocated_mb`` / ``freed_mb``: the sums of allocations and frees; ``net_mb``;
* ``peak_allocated_mb`` / ``peak_reserved_mb``: the highest ``Total Allocated`` / ``Total
  Reserved`` among the window's events (empty where the trace does not record them);
* ``peak_growth_mb``: the largest rise of the allocation above its level at the window's
  start (before its first event), never negative. The allocation level is ``Total Allocated``
  where every event of the step and device records it, else the running sum of ``Bytes`` from
  the step's start (torch 1.9).

The mean view averages each row over the complete steps that hold it. MB = 2**20 bytes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import distinct_rows
from tracekit.pipeline.windows import Windows

from ._common import WINDOW_PHASES, once_per_table
from ._registry import COUNT, MB, MEMORY_EVENTS, PRESENT_MEAN, register

MB_BYTES = float(1 << 20)
#: The windows of the table, in order: the whole step, then its phases.
WINDOWS = ["step", *WINDOW_PHASES]
VALUES = {
    "events": COUNT,
    "allocated_mb": MB,
    "freed_mb": MB,
    "net_mb": MB,
    "peak_allocated_mb": MB,
    "peak_reserved_mb": MB,
    "peak_growth_mb": MB,
}
COLUMNS = ["step", "device", "phase", *VALUES]


def complete(memory: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    """The memory events of the complete steps ``windows`` frames, in time order (selected
    once per memory table and windows: the memory tables share them; callers only read it)."""
    return _complete(memory, windows)["rows"]


def complete_levels(memory: pd.DataFrame, windows: Windows) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`complete` and the :func:`level` of each of its events, computed once per memory
    table and windows (``memory`` and ``memory_timeline`` both read them)."""
    got = _complete(memory, windows)
    if "level" not in got:
        got["level"] = level(got["rows"])
    return got["rows"], got["level"]


def _complete(memory: pd.DataFrame, windows: Windows) -> dict:
    held = _held(memory)
    if held.get("windows") is not windows:  # another rank's or filter's windows: start again
        held.clear()
        held["windows"] = windows
        held["rows"] = memory[memory["step"].isin(windows.steps["step"]).to_numpy()]
    return held


@once_per_table
def _held(memory: pd.DataFrame) -> dict:
    """What :func:`complete_levels` keeps for one memory table (its windows, rows and levels)."""
    return {}


def level(m: pd.DataFrame) -> np.ndarray:
    """Per event, the allocation of its device right after it: ``Total Allocated`` where every
    event of its step and device records it, else the running sum of ``Bytes`` over the step's
    events of that device (0 at the step's start)."""
    key = distinct_rows(m["step"].to_numpy(), m["device"].array.codes)[0]
    total = m["total_allocated"].to_numpy(np.float64)
    recorded = pd.Series(~np.isnan(total)).groupby(key).transform("all").to_numpy(bool)
    running = pd.Series(m["bytes"].to_numpy(np.float64)).groupby(key).cumsum().to_numpy()
    return np.where(recorded, total, running)


def window_stats(m: pd.DataFrame, lvl: np.ndarray, window: pd.Categorical) -> pd.DataFrame:
    """One row per (step, device, ``window``) of the events ``m`` (with their levels ``lvl``),
    in order of first appearance; sums and maxima by integer group key (numpy, no group-by of
    object columns), a maximum over recorded values only (NaN where none is)."""
    device = pd.Categorical(m["device"])
    ok = np.flatnonzero((device.codes >= 0) & (window.codes >= 0))
    if len(ok) < len(m):  # (all rows, the usual case: no copy of the frame)
        m, lvl = m.iloc[ok], lvl[ok]
    key, first = distinct_rows(m["step"].to_numpy(), device.codes[ok], window.codes[ok])
    n = len(first)
    nbytes = m["bytes"].to_numpy(np.float64)
    order = np.argsort(key, kind="stable")
    starts = np.searchsorted(key[order], np.arange(n))

    def most(values: np.ndarray) -> np.ndarray:
        return np.fmax.reduceat(values[order], starts) if n else np.empty(0)

    alloc = np.bincount(key, np.where(nbytes > 0, nbytes, 0.0), n) / MB_BYTES
    free = np.bincount(key, np.where(nbytes < 0, -nbytes, 0.0), n) / MB_BYTES
    base = (lvl - nbytes)[first]
    return pd.DataFrame(
        {
            "step": m["step"].to_numpy()[first],
            "device": np.asarray(device[ok[first]], dtype=object),  # the few rows' labels only
            "phase": np.asarray(window[ok[first]], dtype=object),
            "events": np.bincount(key, minlength=n),
            "allocated_mb": alloc,
            "freed_mb": free,
            "net_mb": alloc - free,
            "peak_allocated_mb": most(m["total_allocated"].to_numpy(np.float64)) / MB_BYTES,
            "peak_reserved_mb": most(m["total_reserved"].to_numpy(np.float64)) / MB_BYTES,
            "peak_growth_mb": np.maximum(most(lvl) - base, 0.0) / MB_BYTES,
        }
    )


@register(
    "memory",
    title="Memory per step, device and phase",
    keys=("device", "phase"),
    values=VALUES,
    reads=MEMORY_EVENTS,
    aggregate=PRESENT_MEAN,
    chart="none",
)
def table(memory: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    m = complete(memory, windows)
    if m.empty:
        return pd.DataFrame(columns=COLUMNS)
    lvl = complete_levels(memory, windows)[1]
    whole = window_stats(m, lvl, pd.Categorical.from_codes(np.zeros(len(m), np.int8), ["step"]))
    parts = window_stats(m, lvl, pd.Categorical(m["phase"]))
    out = pd.concat([whole, parts], ignore_index=True)
    order = out["phase"].map({w: i for i, w in enumerate(WINDOWS)}).fillna(len(WINDOWS))
    out = out.assign(_o=order).sort_values(["step", "device", "_o"], kind="stable")
    return out[COLUMNS].reset_index(drop=True)
