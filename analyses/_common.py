"""Small helpers shared by the table modules."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.intervals import measure, measure_by

NS_PER_MS = 1e6
PHASES = ["forward", "backward", "optimizer"]
#: Every phase window of a step, in time order: the paper's phases and the tail with no
#: phase evidence (``unattributed``), which tables show only where a rank has some.
WINDOW_PHASES = ["forward", "backward", "unattributed", "optimizer"]


def ms(ns) -> float:
    return float(ns) / NS_PER_MS


def union_ms(frame: pd.DataFrame) -> float:
    """Measure of the union of the frame's [start, end) intervals, in ms."""
    if frame.empty:
        return 0.0
    return ms(measure(frame["start"].to_numpy(), frame["end"].to_numpy()))


def union_ms_by(frame: pd.DataFrame, keys: list[str]) -> pd.Series:
    """Measure (ms) of the union of ``[start, end)`` intervals per group of ``keys``."""
    return measure_by(frame, keys) / NS_PER_MS


def step_windows(windows: pd.DataFrame) -> pd.DataFrame:
    """The complete steps' device windows: step, start, end (ns), window_ms."""
    w = windows[(windows["window"] == "step").to_numpy() & windows["complete"].to_numpy()]
    w = w[["step", "start", "end"]].reset_index(drop=True)
    w["window_ms"] = (w["end"] - w["start"]) / NS_PER_MS
    return w


def phase_windows(windows: pd.DataFrame) -> pd.DataFrame:
    """Long frame of the complete steps' phase windows: step, phase, lo, hi, wall_ms,
    window_ms (the step's whole window)."""
    w = windows[windows["complete"].to_numpy()]
    whole = w[w["window"] == "step"].set_index("step")
    ph = w[w["window"] != "step"]
    out = pd.DataFrame(
        {
            "step": ph["step"].to_numpy(),
            "phase": ph["window"].to_numpy(),
            "lo": ph["start"].to_numpy(),
            "hi": ph["end"].to_numpy(),
        }
    )
    out["wall_ms"] = (out["hi"] - out["lo"]) / NS_PER_MS
    span = (whole["end"] - whole["start"]) / NS_PER_MS
    out["window_ms"] = span.reindex(out["step"]).to_numpy()
    return out


def window_shares(intervals: pd.DataFrame) -> pd.DataFrame:
    """Long frame of each activity's share (ms) in each phase window: step, phase (the window),
    group, module, recompute (activation recomputation), share_ms. Rows with no share are
    dropped."""
    parts = []
    for ph in WINDOW_PHASES:
        col = intervals[share_column(ph)]
        keep = (col > 0).to_numpy()
        if not keep.any():
            continue
        sub = intervals.loc[keep]
        parts.append(
            pd.DataFrame(
                {
                    "step": sub["step"].to_numpy(),
                    "phase": ph,
                    "group": sub["group"].astype(str).to_numpy(),
                    "module": sub["module"].astype(str).to_numpy(),
                    "recompute": _recompute(sub),
                    "share_ms": col[keep].to_numpy() / NS_PER_MS,
                }
            )
        )
    if not parts:
        return pd.DataFrame(columns=["step", "phase", "group", "module", "recompute", "share_ms"])
    return pd.concat(parts, ignore_index=True)


def _recompute(iv: pd.DataFrame) -> np.ndarray:
    if "recompute" not in iv:
        return np.zeros(len(iv), bool)
    return iv["recompute"].to_numpy(bool)


def percent(part, whole) -> np.ndarray:
    part = np.asarray(part, dtype=float)
    whole = np.asarray(whole, dtype=float)
    return np.divide(part * 100.0, whole, out=np.zeros(np.broadcast(part, whole).shape), where=whole > 0)


def phases_present(intervals: pd.DataFrame, windows: pd.DataFrame) -> list[str]:
    """The phases a rank's tables show: the paper's three, and ``unattributed`` where some
    activity has that label or some complete step has an unattributed window."""
    w = windows[(windows["window"] == "unattributed").to_numpy() & windows["complete"].to_numpy()]
    has = bool(((w["end"] - w["start"]) > 0).any()) or bool(
        (intervals["phase"].astype(str) == "unattributed").any()
    )
    return WINDOW_PHASES if has else PHASES


def share_column(phase: str) -> str:
    return f"share_{phase}"
