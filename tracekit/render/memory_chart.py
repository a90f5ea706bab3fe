"""The HTML report's memory charts: per step, the allocation over time, its phases as bands and
its peak marked, drawn from exactly the rows of the ``memory_timeline`` table.

One chart per step (the first :data:`MAX_STEPS` steps; with several ranks, the lowest rank's):
a line per device, ``allocated_mb`` (``Total Allocated``) where the trace records it, else
``growth_mb`` (the rise above the step's start, torch 1.9); the phases of the points as shaded
bands, a band running from a phase's first point to the next phase's first point; a marker and
a label at each device's highest point.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .common import label

#: Steps that get a chart (the report would otherwise hold one per profiled step).
MAX_STEPS = 8
#: More phase runs than this (phases interleaving event by event) are drawn as one band per
#: phase, from its first point to its last.
MAX_BANDS = 40
PHASE_COLORS = {
    "forward": "#4c78a8",
    "backward": "#f58518",
    "unattributed": "#bab0ac",
    "optimizer": "#54a24b",
}
LINE_COLORS = ["#222222", "#e45756", "#72b7b2", "#b279a2", "#9d755d"]


def memory_charts(df: pd.DataFrame) -> list[tuple[str, dict]]:
    """(id, plotly figure) per step of a ``memory_timeline`` table (per step)."""
    if df.empty or "step" not in df.columns:
        return []
    if "rank" in df.columns:
        df = df[df["rank"] == df["rank"].min()]
    steps = list(dict.fromkeys(df["step"].tolist()))
    return [(f"memory-{s}", _step_chart(s, df[df["step"] == s], len(steps))) for s in steps[:MAX_STEPS]]


def _step_chart(step: Any, rows: pd.DataFrame, n_steps: int) -> dict:

    rows = rows.sort_values("t_ms", kind="stable")
    data, notes = [], []
    totals = bool(rows["allocated_mb"].notna().any())
    for i, (device, g) in enumerate(rows.groupby(rows["device"].astype(str), sort=True)):
        y = g["allocated_mb"] if totals else g["growth_mb"]
        ok = y.notna().to_numpy()
        x, yv = g["t_ms"].to_numpy(float)[ok], y.to_numpy(float)[ok]
        if not len(x):
            continue
        color = LINE_COLORS[i % len(LINE_COLORS)]
        data.append(_line(label(device), x, yv, color))
        top = int(np.argmax(yv))
        data.append(_peak(label(device), x[top], yv[top], color))
        notes.append(_peak_label(label(device), x[top], yv[top]))
    shapes, band_notes = _bands(rows)
    ys = [v for d in data for v in d["y"]]
    what = "allocated (MB)" if totals else "growth since the step began (MB)"
    more = f" (first {MAX_STEPS} of {n_steps} steps)" if n_steps > MAX_STEPS else ""
    layout = {
        "title": {"text": label(f"Memory over time, step {step}{more}")},
        # the legend above the plot, under the title, as every chart's (tracekit.render.charts)
        "margin": {"l": 60, "r": 20, "t": 90, "b": 50},
        "height": 380,
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "xanchor": "left", "yanchor": "bottom"},
        "xaxis": {"title": {"text": "ms since the step began"}, "automargin": True},
        # headroom above the peak for its label, which stays inside the plot, clear of the
        # legend and of the phase labels along the bottom
        "yaxis": {"title": {"text": what}, "automargin": True, "range": _y_range(ys)},
        "shapes": shapes,
        "annotations": band_notes + notes,
    }
    # what a test needs to check each line against the table's rows (tests/test_charts.py)
    y_col = "allocated_mb" if totals else "growth_mb"
    lines = {"step": step.item() if hasattr(step, "item") else step, "x": "t_ms", "y": y_col, "by": "device"}
    return {"data": data, "layout": layout, "meta": {"table": "memory_timeline", "lines": lines}}


def _y_range(ys: list[float]) -> list[float]:
    """The y axis from 0 (or the lowest value) to the highest plus a third of the span."""
    lo, hi = min([0.0, *ys]), max([0.0, *ys])
    span = (hi - lo) or 1.0
    return [round(lo - 0.05 * span, 6), round(hi + 0.35 * span, 6)]


def _line(name: str, x: np.ndarray, y: np.ndarray, color: str) -> dict:
    return {
        "type": "scatter",
        "mode": "lines",
        "line": {"shape": "hv", "color": color, "width": 1.5},
        "name": name,
        "x": [round(float(v), 6) for v in x],
        "y": [round(float(v), 6) for v in y],
    }


def _peak(name: str, x: float, y: float, color: str) -> dict:
    return {
        "type": "scatter",
        "mode": "markers",
        "marker": {"color": color, "size": 9, "symbol": "diamond"},
        "name": f"{name} peak",
        "showlegend": False,
        "x": [round(float(x), 6)],
        "y": [round(float(y), 6)],
    }


def _peak_label(name: str, x: float, y: float) -> dict:
    return {"x": round(float(x), 6), "y": round(float(y), 6), "text": f"{name} peak {y:,.1f} MB", "ay": -28}


def _bands(rows: pd.DataFrame) -> tuple[list[dict], list[dict]]:
    """Shaded rectangles (and their labels) for the runs of equal phase over time."""

    t = rows["t_ms"].to_numpy(float)
    phase = rows["phase"].astype(str).to_numpy(dtype=object)
    if not len(t):
        return [], []
    starts = np.flatnonzero(np.r_[True, phase[1:] != phase[:-1]])
    ends = np.r_[t[starts[1:]], t[-1]]
    runs = list(zip(phase[starts], t[starts], ends))
    if len(runs) > MAX_BANDS:  # interleaved: one band per phase, first to last point
        runs = [(p, t[phase == p].min(), t[phase == p].max()) for p in dict.fromkeys(phase)]
    shapes, notes = [], []
    for p, lo, hi in runs:
        color = PHASE_COLORS.get(str(p), "#cccccc")
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": round(float(lo), 6),
                "x1": round(float(hi), 6),
                "y0": 0,
                "y1": 1,
                "fillcolor": color,
                "opacity": 0.12,
                "line": {"width": 0},
                "layer": "below",
            }
        )
        notes.append(
            {
                "x": round(float(lo + hi) / 2, 6),
                "y": 0.0,
                "yref": "paper",
                "yanchor": "bottom",
                "text": label(str(p)),
                "showarrow": False,
                "font": {"size": 10, "color": color},
            }
        )
    return shapes, notes
