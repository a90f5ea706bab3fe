"""The HTML report's charts, each drawn from exactly the rows of the table under it.

A chart is a declaration (:class:`Chart`): the table it draws, the columns that label a bar
(``x``), the value column(s) it draws, the column(s) that split it into series. One function,
:func:`figure`, turns a declaration and the table's rows into a plotly figure, the same way for
every chart:

* a bar is the **sum** of the rows that share its ``x`` (and series) values: a kernel's rows
  over phases and modules add up, they are never averaged;
* a bar is keyed by its full values; its label is their display form (a short kernel name), so
  two kernels whose short names collide are two bars, labelled ``name``, ``name #2``;
* per-step tables (``--per-step``) draw one series per step, inference tables one per stage
  (prefill and decode are never averaged together);
* a table of several ranks is drawn as the mean over its ranks (a rank missing a row counts
  0), and the title says so;
* rows a chart leaves out (``Idle``, ``(other kernels)``) are named in its title, and the
  largest ``top`` bars are kept, saying "largest N of M".

``figure(...)["meta"]`` records the table and the declaration's columns, so a test can read
the chart back out of the written page and compare it with the table. A new chart (a roofline,
a memory curve) is one more :class:`Chart` in :data:`CHARTS`, or its own function in
:data:`SPECIAL` when it is not bars of sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.pipeline.names import short_name

from .colours import colours, top_margin
from .common import display_name, label, title
from .critical_chart import KIND_COLORS, critical_charts
from .memory_chart import memory_charts
from .perf_charts import CHARTS as PERF_CHARTS

#: Bars a chart of many items shows: the largest (differences, kernels); ranks: the slowest.
MAX_BARS = 15
MAX_RANK_BARS = 32


def _num(v) -> float:
    f = float(v)
    return 0.0 if math.isnan(f) or math.isinf(f) else round(f, 6)


@dataclass(frozen=True)
class Chart:
    """One chart of one table (see the module docstring).

    ``values``: one value column, split into series by ``series``; or several, one series
    each (their names, ``_ms`` dropped). ``drop``: rows left out, ``column -> values``,
    named in the title. ``top``: the bars with the largest total (absolute), largest last on
    a horizontal chart; ``top_by``: rank bars by this column instead (the slowest ranks).
    ``short``: the display form of a bar's label. ``title``: None for the table's own."""

    table: str
    x: tuple[str, ...]
    values: tuple[str, ...]
    series: tuple[str, ...] = ()
    title: str | None = None
    stack: bool = False
    horizontal: bool = False
    drop: dict[str, tuple[str, ...]] = field(default_factory=dict)
    top: int | None = None
    top_by: str | None = None
    short: Callable[[str], str] | None = None
    unit: str = "ms"
    key: str = ""
    #: The label of the one bar of a table with no ``x`` column (a mean table's phases).
    alone: str = "mean step"
    #: A fixed colour per value of the last series column (else the palette in trace order).
    colors: dict[str, str] = field(default_factory=dict)


CHARTS = [
    Chart("phases", ("step",), ("wall_ms",), ("phase",), "Phases per step (wall time)", stack=True),
    Chart(
        "phases",
        ("phase",),
        ("exposed_comm_ms", "idle_ms"),
        title="Exposed communication and idle per phase",
        key="exposed",
    ),
    Chart(
        "idle_causes", ("phase",), ("idle_ms",), ("cause",), "Idle causes per phase (all streams)", stack=True
    ),
    Chart(
        "critical_path",
        ("phase",),
        ("time_ms",),
        ("kind",),
        "Critical path per phase: what the step waited on (kinds stacked)",
        stack=True,
        horizontal=True,
        colors=KIND_COLORS,
    ),
    Chart("modules", ("module",), ("time_ms",), ("phase",), drop={"module": ("Idle",)}),
    Chart("kernels", ("group", "category"), ("time_ms",), ("stage",), drop={"group": ("idle",)}),
    Chart("timeline", ("stage",), ("time_ms",), ("block",), stack=True, horizontal=True, alone="forward"),
    Chart(
        "top_kernels",
        ("name",),
        ("total_ms",),
        title="Top kernels by time",
        horizontal=True,
        drop={"name": ("(other kernels)",)},
        top=MAX_BARS,
        short=short_name,
    ),
    Chart("layers", ("layer",), ("time_ms",), ("stage", "phase")),
    Chart(
        "ranks",
        ("rank",),
        ("forward_ms", "backward_ms", "unattributed_ms", "optimizer_ms"),
        title="Step time per rank",
        stack=True,
        top=MAX_RANK_BARS,
        top_by="step_ms",
    ),
    Chart("attention", ("phase",), ("a_ms", "b_ms"), title=None),
]


def _layout(heading: str, chart: Chart, keys: list[str], labels: list[str]) -> dict:
    cat_axis, val_axis = ("yaxis", "xaxis") if chart.horizontal else ("xaxis", "yaxis")
    layout: dict[str, Any] = {
        # the title at the top, the legend's rows between it and the plot (top_margin)
        "title": {
            "text": label(heading),
            "x": 0,
            "xanchor": "left",
            "y": 1,
            "yref": "container",
            "yanchor": "top",
            "pad": {"t": 12},
        },
        "barmode": "stack" if chart.stack else "group",
        # The legend above the plot, under the title: never over the axis labels.
        "margin": {"l": 60, "r": 20, "t": 90, "b": 60},
        "height": 380 if not chart.horizontal else max(380, 90 + 22 * len(keys)),
        # Always a legend, even of one series: a colour is never left to guess.
        "showlegend": True,
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "xanchor": "left", "yanchor": "bottom"},
        cat_axis: {"automargin": True, "type": "category", "tickvals": keys, "ticktext": labels},
        val_axis: {"automargin": True, "title": {"text": chart.unit}},
    }
    return layout


def _labels(keys: list[tuple], chart: Chart) -> tuple[list[str], list[str]]:
    """Each bar's key (its full values, escaped) and label (their display form; a label two
    keys share gets ``#2``, ``#3``...)."""
    full = [" / ".join(str(v) for v in k) for k in keys]
    shown = [display_name(s, chart.short) if chart.short else display_name(s) for s in full]
    if chart.x in (("layer",), ("rank",), ("step",)) and keys and keys[0] != (chart.alone,):
        shown = [f"{chart.x[0]} {s}" for s in shown]
    seen: dict[str, int] = {}
    out = []
    for s in shown:
        seen[s] = seen.get(s, 0) + 1
        out.append(s if seen[s] == 1 else f"{s} #{seen[s]}")
    return [label(s) for s in full], [label(s) for s in out]


def _rows(chart: Chart, df: pd.DataFrame) -> tuple[pd.DataFrame, list[str], list[str], int]:
    """The rows drawn, their x and series columns (present ones; ``step`` joins the series of
    a per-step table whose x is not the step), and the number of ranks averaged."""
    keep = pd.Series(True, index=df.index)
    for col, dropped in chart.drop.items():
        if col in df.columns:
            keep &= ~df[col].astype(str).isin(dropped)
    rows = df[keep.to_numpy()]
    x = [c for c in chart.x if c in df.columns] or []
    series = [c for c in chart.series if c in df.columns]
    if "step" in df.columns and "step" not in x and chart.table != "ranks":
        series = ["step", *series]
    ranks = int(df["rank"].nunique()) if "rank" in df.columns and chart.table != "ranks" else 1
    return rows, x, series, ranks


def _sums(rows: pd.DataFrame, x: list[str], series: list[str], values: list[str], ranks: int) -> pd.DataFrame:
    """Per (series, x): the sum of each value over the rows, divided by the ranks (their
    mean, a rank without the row counting 0); groups in table order."""
    keys = series + x
    if not keys:
        return rows[values].sum().to_frame().T / ranks
    frame = rows[keys + values].copy()
    for k in keys:
        frame[k] = frame[k].astype(str)
    return (
        frame.groupby(keys, sort=False)[values]
        .sum()
        .reset_index()
        .assign(**{v: lambda d, v=v: d[v] / ranks for v in values})
    )


def figure(chart: Chart, df: pd.DataFrame) -> dict | None:
    """The plotly figure of ``chart`` from the rows of ``df`` (None: nothing to draw)."""
    values = [v for v in chart.values if v in df.columns]
    if df.empty or not values:
        return None
    rows, x, series, ranks = _rows(chart, df)
    sums = _sums(rows, x, series, values, ranks)
    if not x:
        sums["_x"] = chart.alone
        x = ["_x"]
    keys = list(dict.fromkeys(map(tuple, sums[x].astype(str).to_numpy().tolist())))
    if chart.top_by and chart.top_by in df.columns:
        by = df.groupby(df[x[0]].astype(str), sort=False)[chart.top_by].sum()
        keep = set(by.sort_values(ascending=False).head(chart.top).index)
        keys = [k for k in keys if k[0] in keep]
        shown_of = f"the {len(keys)} slowest of {len(by)}" if len(by) > len(keys) else f"{len(by)}"
    else:
        total = sums.assign(_t=sums[values].abs().sum(axis=1)).groupby(x, sort=False)["_t"].sum()
        total.index = [tuple(i) if isinstance(i, tuple) else (i,) for i in total.index]
        total = total[total > 0]
        keys = [k for k in keys if k in total.index]
        n = len(keys)
        if chart.top is not None and n > chart.top:
            keys = sorted(keys, key=lambda k: -total[k])[: chart.top]
        if chart.horizontal and chart.top is not None:
            keys = sorted(keys, key=lambda k: total[k])  # largest at the top
        shown_of = f"largest {len(keys)} of {n}" if len(keys) < n else ""
    if not keys:
        return None
    traces = _traces(sums, keys, x, series, values, chart.horizontal, chart.colors)
    if not traces:
        return None
    tick_keys, tick_labels = _labels(keys, chart)
    layout = _layout(_heading(chart, shown_of, ranks), chart, tick_keys, tick_labels)
    layout["margin"]["t"] = top_margin([t["name"] for t in traces])
    return {
        "data": traces,
        "layout": layout,
        "meta": {
            "table": chart.table,
            "x": x,
            "series": series,
            "values": values,
            "ranks": ranks,
            "drop": {k: list(v) for k, v in chart.drop.items()},
            "top": chart.top,
        },
    }


def _traces(
    sums: pd.DataFrame,
    keys: list[tuple],
    x: list[str],
    series: list[str],
    values: list[str],
    horizontal: bool,
    colors: dict[str, str] | None = None,
) -> list:
    """One bar trace per series value and value column (named by both where both vary), over
    ``keys``; a trace with nothing to draw is left out."""
    at = {k: i for i, k in enumerate(keys)}
    parts = list(sums.groupby(series, sort=False)) if series else [((), sums)]
    out: list[dict] = []
    for name, g in parts:
        words = [str(v) for v in (name if isinstance(name, tuple) else (name,))]
        if series and series[0] == "step":
            words[0] = f"step {words[0]}"
        for v in values:
            pts = sorted(
                (at[k], _num(val)) for k, val in zip(map(tuple, g[x].to_numpy().tolist()), g[v]) if k in at
            )
            if not any(val for _, val in pts):
                continue
            column = [v.removesuffix("_ms").replace("_", " ")] if len(values) > 1 or not series else []
            cats = [label(" / ".join(keys[j])) for j, _ in pts]
            vals = [val for _, val in pts]
            trace: dict[str, Any] = {
                "type": "bar",
                "name": label(" ".join(words + column)),
                # what the trace is: its series values and value column (tests read it back)
                "meta": {
                    "series": [label(w) for w in (name if isinstance(name, tuple) else (name,))],
                    "column": v,
                },
            }
            trace.update({"y": cats, "x": vals, "orientation": "h"} if horizontal else {"x": cats, "y": vals})
            out.append(trace)
    colours(out, colors)
    return out


def _heading(chart: Chart, shown_of: str, ranks: int) -> str:
    heading = chart.title or title(chart.table)
    notes = [f"{', '.join(v)} not drawn" for v in chart.drop.values()]
    if shown_of:
        notes.append(shown_of + (" ranks" if chart.table == "ranks" else ""))
    if ranks > 1:
        notes.append(f"mean over {ranks} ranks")
    return heading + (f" ({'; '.join(notes)})" if notes else "")


def delta_chart(name: str, df: pd.DataFrame) -> Chart:
    """B - A of ``tracekit compare``: the largest differences, by the table's label columns."""
    keys = tuple(c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c]))
    heading = f"{title(name[:-6]).split(':')[0]}: change in time, B - A (ms)"
    return Chart(name, keys, ("delta_ms",), title=heading, horizontal=True, top=MAX_BARS, key=name)


#: Charts that are not bars of sums: table name -> function of its rows and the run's meta
#: giving (id, figure) pairs, drawn after the table's :data:`CHARTS` (a roofline, a memory
#: curve...): the perf charts of :mod:`.perf_charts` read the device's peaks in ``meta``.
Special = Callable[[pd.DataFrame, dict], list[tuple[str, dict]]]


def _special(draw: Callable[..., list[tuple[str, dict]]]) -> Special:
    """A perf chart (:mod:`.perf_charts`: rows, meta, the label escaper) as a special chart."""

    def chart(df: pd.DataFrame, meta: dict) -> list[tuple[str, dict]]:
        return draw(df, meta, label)

    return chart


SPECIAL: dict[str, Special] = {name: _special(draw) for name, draw in PERF_CHARTS.items()}
SPECIAL["memory_timeline"] = lambda df, meta: memory_charts(df)
SPECIAL["critical_path_timeline"] = lambda df, meta: critical_charts(df)


def figures(tables: dict[str, pd.DataFrame], meta: dict | None = None) -> list[tuple[str, dict]]:
    """(id, plotly figure) of every chart the tables allow, in the tables' order (a table
    whose registry spec says ``chart="none"`` has none); ``meta``: the run's (device peaks)."""
    from tracekit.analyses import spec_of

    out: list[tuple[str, dict]] = []
    for name, df in tables.items():
        if not isinstance(df, pd.DataFrame) or df.empty:
            continue
        spec = spec_of(name)
        charts = [c for c in CHARTS if c.table == name and (spec is None or spec.chart != "none")]
        if name.endswith("_delta") and "delta_ms" in df:
            charts = [delta_chart(name, df)]
        for chart in charts:
            fig = figure(chart, df)
            if fig is not None:
                out.append((chart.key or chart.table, fig))
        if name in SPECIAL:
            out += SPECIAL[name](df, meta or {})
    return out
