"""The HTML report's critical-path timelines, drawn from exactly the rows of the
``critical_path_timeline`` table.

One chart per rank (the first :data:`MAX_RANKS`), with a menu of its steps (at most
:data:`MAX_STEPS`, spread evenly over its complete steps, the first and the last included; the
first is drawn at first): x is the time since the step's window began, one lane per kind
(:data:`KIND_COLORS`' order), a bar per row from its ``start_ms`` to its ``end_ms`` in its
kind's colour (the colours of the ``critical_path`` stacked chart), its phase and module in its
hover text; the phases of the rows as shaded bands, as the memory chart draws them. A step
draws at most :data:`STEP_BARS` bars: the table holds at most that many rows per step unless
``--full-series`` kept every piece; then a step of more is thinned for the chart by the table's
own rule (:func:`tracekit.analyses.critical_path_timeline.thinned`), and its title says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyses.critical_path_timeline import LABELS, POINTS, joined, thinned

from .common import label
from .memory_chart import _bands

#: A colour per kind of the path, top lane first (shared with the ``critical_path`` chart).
KIND_COLORS = {
    "cpu": "#4c78a8",
    "launch": "#f58518",
    "kernel": "#54a24b",
    "memcpy": "#72b7b2",
    "sync": "#e45756",
    "wait": "#ff9da6",  # several ranks: a collective's time before its last arrival
    "comm": "#b279a2",
    "idle": "#bab0ac",
}
#: Ranks that get a chart (a report of many ranks would otherwise hold one per rank).
MAX_RANKS = 8
#: Steps a chart's menu offers, and the bars a drawn step holds at most (the table's budget).
MAX_STEPS = 20
STEP_BARS = POINTS


def offered(steps: list) -> list:
    """The steps a chart offers: all of them up to :data:`MAX_STEPS`, else that many spread
    evenly (the first and the last included)."""
    if len(steps) <= MAX_STEPS:
        return steps
    at = np.unique(np.rint(np.linspace(0, len(steps) - 1, MAX_STEPS)).astype(int))
    return [steps[i] for i in at]


def critical_charts(df: pd.DataFrame) -> list[tuple[str, dict]]:
    """(id, plotly figure) per rank of a ``critical_path_timeline`` table, with a step menu."""
    if df.empty or "step" not in df.columns:
        return []
    ranks = sorted(df["rank"].unique().tolist()) if "rank" in df.columns else [None]
    out = []
    for r in ranks[:MAX_RANKS]:
        mine = df if r is None else df[df["rank"] == r]
        steps = sorted(mine["step"].unique().tolist())
        rows = {
            s: fitted(mine[mine["step"] == s].sort_values("start_ms", kind="stable")) for s in offered(steps)
        }
        name = "critical-timeline" if r is None else f"critical-timeline-{r}"
        out.append((name, _chart(rows, r, len(ranks), len(steps))))
    return out


def fitted(rows: pd.DataFrame) -> pd.DataFrame:
    """One step's rows, thinned to :data:`STEP_BARS` (only a ``--full-series`` table has more)."""
    if len(rows) <= STEP_BARS:
        return rows
    codes = np.stack([pd.Categorical(rows[c].astype(str)).codes.astype(np.int64) for c in LABELS], axis=1)
    lo, hi = rows["start_ms"].to_numpy(float), rows["end_ms"].to_numpy(float)
    step = np.zeros(len(rows), np.int64)
    kept, lo, hi, n = thinned(step, codes, lo, hi, rows["pieces"].to_numpy(np.int64), STEP_BARS)
    first, lo, hi, n = joined(step[kept], codes[kept], lo, hi, n)
    out = rows.iloc[kept[first]].copy()
    out["start_ms"], out["end_ms"], out["pieces"] = lo, hi, n
    return out.assign(thinned=True)


def _chart(per_step: dict, rank: Any, n_ranks: int, n_steps: int) -> dict:
    steps = list(per_step)
    data, views = [], []
    for i, (step, rows) in enumerate(per_step.items()):
        lanes = [k for k in KIND_COLORS if k in set(rows["kind"].astype(str))]
        for kind in lanes:
            data.append(_bars(kind, rows[rows["kind"].astype(str) == kind], KIND_COLORS[kind], step, i == 0))
        views.append((step, lanes, *_phase_bands(rows), _title(step, rank, n_ranks, n_steps, rows)))
    step, lanes, shapes, notes, title = views[0]
    layout = {
        "title": {"text": title},
        "margin": {"l": 60, "r": 20, "t": 110, "b": 50},
        "height": max(280, 110 + 34 * max(len(v[1]) for v in views)),
        "barmode": "overlay",
        # the legend above the phases' labels, which sit on the plot's top edge
        "legend": {"orientation": "h", "x": 0, "y": 1.12, "xanchor": "left", "yanchor": "bottom"},
        "xaxis": {"title": {"text": "ms since the step's window began"}, "automargin": True},
        "yaxis": {"type": "category", "categoryarray": lanes, "autorange": "reversed", "automargin": True},
        "shapes": shapes,
        "annotations": notes,
    }
    if len(steps) > 1:
        layout["updatemenus"] = [_menu(data, views)]
    # what a test needs to check each bar against the table's rows (tests/test_charts.py)
    bars = {"step": _plain(steps[0]), "steps": [_plain(s) for s in steps], "rank": _plain(rank)}
    bars["thinned"] = [_plain(s) for s, rows in per_step.items() if "thinned" in rows.columns]
    return {"data": data, "layout": layout, "meta": {"table": "critical_path_timeline", "bars": bars}}


def _phase_bands(rows: pd.DataFrame) -> tuple[list, list]:
    phase = rows["phase"].astype(str).to_numpy(object)
    edges = pd.DataFrame(
        {
            "t_ms": np.r_[rows["start_ms"].to_numpy(float), rows["end_ms"].to_numpy(float)[-1:]],
            "phase": np.r_[phase, phase[-1:]],
        }
    )
    shapes, notes = _bands(edges)
    for note in notes:  # above the plot: the top lane's bars would hide them
        note["yanchor"] = "bottom"
    return shapes, notes


def _title(step: Any, rank: Any, n_ranks: int, n_steps: int, rows: pd.DataFrame) -> str:
    who = "" if rank is None else f"rank {rank}, "
    more = f" (first {MAX_RANKS} of {n_ranks} ranks)" if n_ranks > MAX_RANKS else ""
    some = f"; {MAX_STEPS} of {n_steps} steps in the menu" if n_steps > MAX_STEPS else ""
    thin = f"; {len(rows)} bars, thinned" if "thinned" in rows.columns else ""
    return label(f"Critical path over time, {who}step {_plain(step)}{more}{some}{thin}")


def _menu(data: list, views: list) -> dict:
    """A dropdown of the steps: each shows its own bars, lanes, phase bands and title."""
    buttons = []
    for step, lanes, shapes, notes, title in views:
        visible = [t["meta"]["step"] == _plain(step) for t in data]
        look = {"title.text": title, "yaxis.categoryarray": lanes, "shapes": shapes, "annotations": notes}
        buttons.append(
            {"label": label(f"step {_plain(step)}"), "method": "update", "args": [{"visible": visible}, look]}
        )
    return {
        "type": "dropdown",
        "active": 0,
        "buttons": buttons,
        "x": 1,
        "xanchor": "right",
        "y": 1.25,
        "yanchor": "bottom",
    }


def _bars(kind: str, g: pd.DataFrame, color: str, step: Any, visible: bool) -> dict:
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
        "visible": visible,
        "meta": {"step": _plain(step)},
    }


def _plain(v: Any) -> Any:
    return v.item() if hasattr(v, "item") else v
