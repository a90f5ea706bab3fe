"""Small helpers shared by the table modules."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.intervals import measure

NS_PER_MS = 1e6
PHASES = ["forward", "backward", "optimizer"]


def ms(ns) -> float:
    return float(ns) / NS_PER_MS


def union_ms(frame: pd.DataFrame) -> float:
    """Measure of the union of the frame's [start, end) intervals, in ms."""
    if frame.empty:
        return 0.0
    return ms(measure(frame["start"].to_numpy(), frame["end"].to_numpy()))


def union_ms_by(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Measure (ms) of the union of [start, end) intervals per group of ``keys``.

    Sorted by start within a group, an interval adds what it reaches past the furthest end
    seen before it in the group; those additions sum to the union's measure.
    """
    if frame.empty:
        return pd.Series(dtype=float, index=pd.MultiIndex.from_arrays([[]] * len(keys), names=keys)
                         if len(keys) > 1 else pd.Index([], name=keys[0]))
    f = frame[keys + ["start", "end"]].sort_values(keys + ["start"], kind="stable")
    groups = [f[k] for k in keys]
    first = ~f.duplicated(keys, keep="first").to_numpy() if len(keys) else None
    first[0] = True
    end = f["end"].to_numpy(np.int64)
    # The furthest end before each interval in its group (int64 throughout: epoch nanoseconds
    # do not survive float64).
    prev = np.empty_like(end)
    prev[1:] = end[:-1]
    prev[first] = np.iinfo(np.int64).min
    reach = pd.Series(prev, index=f.index).groupby(groups, observed=True, sort=False).cummax()
    added = np.clip(end - np.maximum(f["start"].to_numpy(np.int64), reach.to_numpy(np.int64)), 0, None)
    return pd.Series(added, index=f.index).groupby(groups, observed=True).sum() / NS_PER_MS


def phase_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Long frame: step, phase, lo, hi, wall_ms, window_ms (the step's whole window)."""
    st = steps[steps["complete"]]
    bounds = [st["start"], st["t_backward"], st["t_optimizer"], st["end"]]
    parts = [pd.DataFrame({"step": st["step"].to_numpy(), "phase": ph,
                           "lo": bounds[k].to_numpy(), "hi": bounds[k + 1].to_numpy()})
             for k, ph in enumerate(PHASES)]
    out = pd.concat(parts, ignore_index=True).sort_values(["step"], kind="stable")
    out["wall_ms"] = (out["hi"] - out["lo"]) / NS_PER_MS
    out["window_ms"] = out["step"].map(dict(zip(st["step"], (st["end"] - st["start"]) / NS_PER_MS)))
    return out.reset_index(drop=True)


def window_shares(intervals: pd.DataFrame) -> pd.DataFrame:
    """Long frame of each activity's share (ms) in each phase window: step, phase (the window),
    group, module, kernel_category, share_ms. Rows with no share are dropped."""
    parts = []
    for ph in PHASES:
        col = intervals[share_column(ph)]
        keep = (col > 0).to_numpy()
        if not keep.any():
            continue
        sub = intervals.loc[keep]
        parts.append(pd.DataFrame({"step": sub["step"].to_numpy(), "phase": ph,
                                   "group": sub["group"].astype(str).to_numpy(),
                                   "module": sub["module"].astype(str).to_numpy(),
                                   "share_ms": col[keep].to_numpy() / NS_PER_MS}))
    if not parts:
        return pd.DataFrame(columns=["step", "phase", "group", "module", "share_ms"])
    return pd.concat(parts, ignore_index=True)


def percent(part, whole) -> np.ndarray:
    part = np.asarray(part, dtype=float)
    whole = np.asarray(whole, dtype=float)
    return np.divide(part * 100.0, whole, out=np.zeros(np.broadcast(part, whole).shape), where=whole > 0)


def share_column(phase: str) -> str:
    return f"share_{phase}"
