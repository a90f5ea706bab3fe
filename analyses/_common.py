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


def phase_windows(steps: pd.DataFrame) -> pd.DataFrame:
    """Long frame: step, phase, lo, hi, wall_ms, window_ms (the step's whole window)."""
    rows = []
    for r in steps.itertuples(index=False):
        if not r.complete:
            continue
        bounds = [r.start, r.t_backward, r.t_optimizer, r.end]
        for k, ph in enumerate(PHASES):
            rows.append((r.step, ph, bounds[k], bounds[k + 1], ms(bounds[k + 1] - bounds[k]),
                         ms(r.end - r.start)))
    return pd.DataFrame(rows, columns=["step", "phase", "lo", "hi", "wall_ms", "window_ms"])


def percent(part, whole) -> np.ndarray:
    part = np.asarray(part, dtype=float)
    whole = np.asarray(whole, dtype=float)
    return np.divide(part * 100.0, whole, out=np.zeros(np.broadcast(part, whole).shape), where=whole > 0)


def share_column(phase: str) -> str:
    return f"share_{phase}"
