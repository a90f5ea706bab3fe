"""The HTML report's critical-path timelines, drawn from exactly the rows of the
``critical_path_timeline`` table.

One chart per rank (the first :data:`MAX_RANKS`), of its first step: x is the time since the
step's window began, one lane per kind (:data:`KIND_COLORS`' order), a bar per row from its
``start_ms`` to its ``end_ms`` in its kind's colour (the colours of the ``critical_path``
stacked chart), its phase and module in its hover text; the phases of the rows as shaded bands,
as the memory chart draws them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from .common import label
from .memory_chart import _bands

#: A colour per kind of the path, top lane first (shared with the ``critical_path`` chart).
KIND_COLORS = {
    "cpu": "#4c78a8",
    "launch": "#f58518",
    "kernel": "#54a24b",
    "memcpy": "#72b7b2",
    "sync": "#e45756",
    "comm": "#b279a2",
    "idle": "#bab0ac",
}
#: Ranks that get a chart (a report of many ranks would otherwise hold one per rank).
MAX_RANKS = 8


def critical_charts(df: pd.DataFrame) -> list[tuple[str, dict]]:
    """(id, plotly figure) per rank of a ``critical_path_timeline`` table: its first step."""
    if df.empty or "step" not in df.columns:
        return []
    ranks = sorted(df["rank"].unique().tolist()) if "rank" in df.columns else [None]
    out = []
    for r in ranks[:MAX_RANKS]:
        mine = df if r is None else df[df["rank"] == r]
        step = mine["step"].min()
        rows = mine[mine["step"] == step].sort_values("start_ms", kind="stable")
        name = "critical-timeline" if r is None else f"critical-timeline-{r}"
        out.append((name, _chart(rows, step, r, len(ranks))))
    return out


def _chart(rows: pd.DataFrame, step: Any, rank: Any, n_ranks: int) -> dict:
    data = []
    for kind, color in KIND_COLORS.items():
        g = rows[rows["kind"].astype(str) == kind]
        if len(g):
            data.append(_bars(kind, g, color))
    lanes = [k for k in KIND_COLORS if k in set(rows["kind"].astype(str))]
    edges = pd.DataFrame(
        {
            "t_ms": np.r_[rows["start_ms"].to_numpy(float), rows["end_ms"].to_numpy(float)[-1:]],
            "phase": np.r_[
                rows["phase"].astype(str).to_numpy(object), rows["phase"].astype(str).to_numpy(object)[-1:]
            ],
        }
    )
    shapes, notes = _bands(edges)
    for note in notes:  # above the plot: the top lane's bars would hide them
        note["yanchor"] = "bottom"
    who = "" if rank is None else f"rank {rank}, "
    more = f" (first {MAX_RANKS} of {n_ranks} ranks)" if n_ranks > MAX_RANKS else ""
    layout = {
        "title": {"text": label(f"Critical path over time, {who}step {_plain(step)}{more}")},
        "margin": {"l": 60, "r": 20, "t": 110, "b": 50},
        "height": max(280, 110 + 34 * len(lanes)),
        "barmode": "overlay",
        # the legend above the phases' labels, which sit on the plot's top edge
        "legend": {"orientation": "h", "x": 0, "y": 1.12, "xanchor": "left", "yanchor": "bottom"},
        "xaxis": {"title": {"text": "ms since the step's window began"}, "automargin": True},
        "yaxis": {"type": "category", "categoryarray": lanes, "autorange": "reversed", "automargin": True},
        "shapes": shapes,
        "annotations": notes,
    }
    # what a test needs to check each bar against the table's rows (tests/test_charts.py)
    bars = {"step": _plain(step), "rank": _plain(rank)}
    return {"data": data, "layout": layout, "meta": {"table": "critical_path_timeline", "bars": bars}}


def _bars(kind: str, g: pd.DataFrame, color: str) -> dict:
    start, end = g["start_ms"].to_numpy(float), g["end_ms"].to_numpy(float)
    text = [
        label(f"{kind}: {p} / {m}, {s:,.3f} to {e:,.3f} ms" + (f" ({n} pieces)" if n > 1 else ""))
        for p, m, s, e, n in zip(g["phase"].astype(str), g["module"].astype(str), start, end, g["pieces"])
    ]
    return {
        "type": "bar",
        "orientation": "h",
        "name": kind,
        "marker": {"color": color},
        "y": [kind] * len(g),
        "base": [round(float(v), 6) for v in start],
        "x": [round(float(v), 6) for v in end - start],
        "hovertext": text,
        "hoverinfo": "text",
    }


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v
