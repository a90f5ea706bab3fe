"""One self-contained HTML report: plotly.js inline, charts, then every table.

``write_report(meta, tables, out)`` takes what ``tracekit analyze`` or ``tracekit compare``
produced. The file opens offline: plotly.js is embedded, and a Content-Security-Policy forbids
the page any network request (``default-src 'none'``).

Trace text is attacker-controlled (kernel names, module names, file paths):

* in HTML it goes through :func:`html.escape`;
* into a chart it is entity-escaped as well (plotly renders a small HTML subset in labels, so
  ``<a href=...>`` in a kernel name would otherwise become a link), then serialised with
  :func:`script_json`, which escapes ``<``, ``>``, ``&`` and the JavaScript line separators
  so no string can close the ``<script>`` element.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit.analyses import spec_of

from ..pipeline.checks import text
from ..pipeline.coverage import lines as coverage_lines
from .common import cell, filters_text, for_people, header, numeric, shown_rows, title
from .memory_chart import memory_charts

PALETTE = [
    "#4c78a8",
    "#f58518",
    "#54a24b",
    "#e45756",
    "#72b7b2",
    "#eeca3b",
    "#b279a2",
    "#ff9da6",
    "#9d755d",
    "#bab0ac",
]
CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; font-src data:"
)


def script_json(obj) -> str:
    """JSON that is safe inside a ``<script>`` element."""
    s = json.dumps(obj, allow_nan=False, default=str)
    return (
        s.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def label(v) -> str:
    """A trace-derived string as a chart label: entity-escaped (shown verbatim by plotly)."""
    return html.escape(str(v), quote=True)


def _num(v) -> float:
    f = float(v)
    return 0.0 if math.isnan(f) or math.isinf(f) else round(f, 6)


def _bar(
    traces: list[dict], heading: str, *, stack: bool = False, horizontal: bool = False, ytitle: str = "ms"
) -> dict:
    layout: dict[str, Any] = {
        "title": {"text": label(heading)},
        "barmode": "stack" if stack else "group",
        "margin": {"l": 60, "r": 20, "t": 50, "b": 80},
        "height": 380,
        "legend": {"orientation": "h"},
        "xaxis": {"automargin": True},
        "yaxis": {"automargin": True},
    }
    layout["xaxis" if horizontal else "yaxis"]["title"] = {"text": ytitle}
    return {"data": traces, "layout": layout}


def _trace(name, x, y, i: int, horizontal: bool = False) -> dict:
    xs, ys = [label(v) for v in x], [_num(v) for v in y]
    t: dict[str, Any] = {"type": "bar", "name": label(name), "marker": {"color": PALETTE[i % len(PALETTE)]}}
    t.update({"y": xs, "x": ys, "orientation": "h"} if horizontal else {"x": xs, "y": ys})
    return t


def _steps_axis(df: pd.DataFrame) -> tuple[str, list]:
    if "step" in df.columns:
        return "step", [f"step {s}" for s in df["step"]]
    return "", ["mean step"] * len(df)


def _with_rank(df: pd.DataFrame) -> pd.DataFrame:
    """Multi-rank tables: the mean over ranks (charts show one run; ``ranks`` has its own)."""
    if "rank" not in df.columns or df.empty:
        return df
    keys = [c for c in df.columns if c != "rank" and not pd.api.types.is_numeric_dtype(df[c])]
    keys += [c for c in ("step", "layer") if c in df.columns]
    if not keys:
        return df
    vals = [c for c in df.columns if c not in keys and c != "rank"]
    return df.groupby(keys, observed=True, sort=False)[vals].mean().reset_index()


#: Bars a chart of many items shows: the largest (differences, kernels, slowest ranks).
MAX_BARS = 15
MAX_RANK_BARS = 32


def _phase_charts(df: pd.DataFrame) -> list[tuple[str, dict]]:
    figs = []
    _, xs = _steps_axis(df)
    df = df.assign(_x=xs)
    traces = [
        _trace(ph, g["_x"], g["wall_ms"], i)
        for i, (ph, g) in enumerate(df.groupby(df["phase"].astype(str), sort=False))
        if g["wall_ms"].abs().sum() > 0
    ]
    figs.append(("phases", _bar(traces, "Phases per step (wall time)", stack=True)))
    cols = [c for c in ("exposed_comm_ms", "idle_ms") if c in df]
    g = df.groupby(df["phase"].astype(str), sort=False)[cols + ["wall_ms"]].mean()
    g = g[g["wall_ms"] > 0]
    if cols and len(g):
        traces = [
            _trace(c.replace("_ms", "").replace("_", " "), g.index, g[c], i + 3) for i, c in enumerate(cols)
        ]
        figs.append(("exposed", _bar(traces, "Exposed communication and idle per phase")))
    return figs


def _module_chart(df: pd.DataFrame) -> list[tuple[str, dict]]:
    df = df[~df["module"].astype(str).isin(["Idle"]) & (df["time_ms"] > 0)]
    g = df.groupby([df["phase"].astype(str), df["module"].astype(str)], sort=False)["time_ms"].mean()
    traces = []
    for i, ph in enumerate(["forward", "recompute", "backward"]):
        if ph in g.index.get_level_values(0):
            s = g.loc[ph]
            traces.append(_trace(ph, s.index, s.values, i))
    return [("modules", _bar(traces, title("modules")))] if traces else []


def _kernel_chart(df: pd.DataFrame) -> list[tuple[str, dict]]:
    df = df[(df["group"].astype(str) != "idle") & (df["time_ms"] > 0)]
    if df.empty:
        return []
    stage = df["stage"].astype(str) if "stage" in df else pd.Series("all", index=df.index)
    cat = df["group"].astype(str) + ": " + df["category"].astype(str)
    g = df.assign(_s=stage, _c=cat).groupby(["_s", "_c"], sort=False)["time_ms"].mean()
    traces = [
        _trace(s, g.loc[s].index, g.loc[s].values, i)
        for i, s in enumerate(dict.fromkeys(g.index.get_level_values(0)))
    ]
    return [("kernels", _bar(traces, title("kernels")))]


def _timeline_chart(df: pd.DataFrame) -> list[tuple[str, dict]]:
    stage = df["stage"].astype(str) if "stage" in df else pd.Series("forward", index=df.index)
    df = df.assign(_s=stage)
    traces = []
    for i, (blk, g) in enumerate(df.groupby(df["block"].astype(str), sort=False)):
        gg = g.groupby("_s", sort=False)["time_ms"].mean()
        traces.append(_trace(blk, gg.index, gg.values, i, horizontal=True))
    return [("timeline", _bar(traces, title("timeline"), stack=True, horizontal=True))]


def _top_kernel_chart(df: pd.DataFrame) -> list[tuple[str, dict]]:
    from tracekit.analyses.top_kernels import OTHER, short_name

    df = df[df["name"].astype(str) != OTHER]
    g = df.groupby(df["name"].astype(str), sort=False)["total_ms"].mean()
    g = g[g > 0].sort_values(ascending=False).head(MAX_BARS)[::-1]
    if g.empty:
        return []
    names = [short_name(n) for n in g.index]
    return [
        (
            "top_kernels",
            _bar(
                [_trace("total", names, g.values, 0, horizontal=True)],
                f"Top {len(g)} kernels by time",
                horizontal=True,
            ),
        )
    ]


def _layer_chart(df: pd.DataFrame) -> list[tuple[str, dict]]:
    g = df.groupby([df["phase"].astype(str), "layer"], sort=False)["time_ms"].mean()
    traces = [
        _trace(ph, [f"layer {x}" for x in g.loc[ph].index], g.loc[ph].values, i)
        for i, ph in enumerate(dict.fromkeys(g.index.get_level_values(0)))
    ]
    return [("layers", _bar(traces, title("layers")))] if traces else []


def _rank_chart(df: pd.DataFrame) -> list[tuple[str, dict]]:
    """Phase walls per rank: every rank up to MAX_RANK_BARS, else the slowest ones."""
    shown = df.sort_values("step_ms", ascending=False).head(MAX_RANK_BARS).sort_values("rank")
    xs = [f"rank {r}" for r in shown["rank"]]
    traces = [
        _trace(c[:-3], xs, shown[c], i)
        for i, c in enumerate(("forward_ms", "backward_ms", "optimizer_ms"))
        if shown[c].abs().sum() > 0
    ]
    what = f"the {len(shown)} slowest of {len(df)} ranks" if len(df) > len(shown) else f"{len(df)} ranks"
    return [("ranks", _bar(traces, f"Step time per rank ({what})", stack=True))] if traces else []


def _delta_chart(name: str, df: pd.DataFrame) -> list[tuple[str, dict]]:
    """B - A: the MAX_BARS largest differences, horizontal so the labels can be read."""
    keys = [c for c in df.columns if not pd.api.types.is_numeric_dtype(df[c])]
    d = df.assign(_x=df[keys].astype(str).agg(" / ".join, axis=1) if keys else "all")
    d = d[d["delta_ms"].abs() > 0]
    d = d.reindex(d["delta_ms"].abs().sort_values(ascending=False).index).head(MAX_BARS)[::-1]
    if d.empty:
        return []
    what = f" (largest {len(d)} of {len(df)})" if len(df) > len(d) else ""
    return [
        (
            name,
            _bar(
                [_trace("B - A", d["_x"], d["delta_ms"], 3, horizontal=True)],
                title(name) + what,
                horizontal=True,
            ),
        )
    ]


CHARTS = {
    "phases": _phase_charts,
    "modules": _module_chart,
    "kernels": _kernel_chart,
    "timeline": _timeline_chart,
    "top_kernels": _top_kernel_chart,
    "layers": _layer_chart,
}


def figures(tables: dict[str, pd.DataFrame]) -> list[tuple[str, dict]]:
    """(id, plotly figure) for each chart the tables allow (the registry's ``chart`` says
    which tables have one)."""
    figs: list[tuple[str, dict]] = []
    for name, df in tables.items():
        if not isinstance(df, pd.DataFrame) or df.empty:
            continue
        spec = spec_of(name)
        if name == "ranks":
            figs += _rank_chart(df)
        elif spec is not None and spec.chart == "memory":
            figs += memory_charts(df)
        elif name in CHARTS and (spec is None or spec.chart != "none"):
            figs += CHARTS[name](_with_rank(df))
        elif name.endswith("_delta") and "delta_ms" in df:
            figs += _delta_chart(name, df)
        elif name == "attention" and {"a_ms", "b_ms"} <= set(df.columns):
            traces = [
                _trace(r, df["phase"], df[c], i) for i, (r, c) in enumerate((("A", "a_ms"), ("B", "b_ms")))
            ]
            figs.append(("attention", _bar(traces, title("attention"))))
    return figs


def table_html(name: str, df: pd.DataFrame) -> str:
    """One table: units in headers (the column's name as its tooltip), no all-zero rows."""
    shown = (
        shown_rows(name, df, top=None if name not in ("top_kernels", "ranks") else 50, wide=True)
        if "a_ms" not in df
        else None
    )
    rows_df = shown.frame if shown is not None else df[(df["a_ms"] != 0) | (df["b_ms"] != 0)]
    head = "".join(
        f'<th title="{html.escape(str(c))}">{html.escape(header(name, str(c)))}</th>' for c in df.columns
    )
    rows = []
    for row in rows_df.itertuples(index=False, name=None):
        cells = []
        for c, v in zip(df.columns, row):
            text = html.escape(cell(name, str(c), v))
            cells.append(f'<td class="n">{text}</td>' if numeric(df, c) else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = "".join(rows) or f'<tr><td colspan="{max(len(df.columns), 1)}">(no rows)</td></tr>'
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in (shown.notes() if shown else []))
    return (
        f'<section class="table" id="t-{html.escape(name)}"><h3>{html.escape(title(name))}</h3>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{notes}</section>"
    )


def _meta_html(meta: dict) -> str:
    items = []
    runs = [("A", meta["a"]), ("B", meta["b"])] if "a" in meta and "b" in meta else [("", meta)]
    for tag, m in runs:
        steps = "; ".join(f"rank {r}: {len(s)}" for r, s in (m.get("complete_steps") or {}).items())
        devices = ", ".join(map(str, m.get("devices", [])))
        items.append(
            f"<li><b>{html.escape(tag)}</b> {html.escape(str(m.get('path', '')))} "
            f"&middot; {html.escape(str(m.get('mode', '')))}"
            + (f" &middot; devices: {html.escape(devices)}" if devices else "")
            + f" &middot; steps analysed: {html.escape(steps)}</li>"
        )
        if m.get("filters"):
            items.append(f'<li class="note">filters: {html.escape(filters_text(m["filters"]))}</li>')
        for n in m.get("notices", []):
            items.append(f'<li class="note">note: {html.escape(str(n))}</li>')
        for c in coverage_lines(m):
            items.append(f'<li class="note">{html.escape(c)}</li>')
    if meta.get("paper"):
        items.append(
            f'<li class="note">paper_* columns: {html.escape(meta["paper"]["setting"])} '
            f"From: {html.escape(meta['paper']['citation'])}</li>"
        )
    for w in meta.get("warnings", []):
        items.append(f'<li class="warn">warning: {html.escape(text(w))}</li>')
    return '<ul class="meta">' + "".join(items) + "</ul>"


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 8px} h3{font-size:15px;margin:18px 0 6px}
.meta{list-style:none;padding:0;font-size:13px;color:#444} .warn{color:#a15c00}
.note{color:#555;font-size:12px}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:12px}
.chart{border:1px solid #ddd;border-radius:6px;min-height:380px}
table{border-collapse:collapse;font-size:12px} td,th{border:1px solid #ddd;padding:3px 8px}
th{background:#f4f4f4;text-align:left} td.n{text-align:right;font-variant-numeric:tabular-nums}
"""


def render_report(meta: dict, tables: dict[str, pd.DataFrame]) -> str:
    """The whole page as a string."""
    from plotly.offline import get_plotlyjs

    figs = figures(tables)
    title = "tracekit comparison" if "a" in meta and "b" in meta else "tracekit report"
    aggregation = str(meta.get("aggregation", "mean per complete step"))
    charts = "".join(f'<div class="chart" id="c-{i}"></div>' for i, _ in enumerate(figs))
    calls = script_json([{"id": f"c-{i}", "name": n, "fig": f} for i, (n, f) in enumerate(figs)])
    tables_html = "".join(
        table_html(k, v) for k, v in tables.items() if isinstance(v, pd.DataFrame) and for_people(k)
    )
    js = get_plotlyjs().replace("</script", "<\\/script")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{html.escape(title)}</title><style>{STYLE}</style>
<script>{js}</script></head>
<body><h1>{html.escape(title)}</h1>{_meta_html(meta)}
<p style="font-size:12px;color:#666">Times in ms, {html.escape(aggregation)}.
Definitions: docs/metrics.md.</p>
<div class="charts">{charts}</div>
{tables_html}
<script>
(function(){{
  var figs = {calls};
  var done = 0;
  figs.forEach(function(f){{
    Plotly.newPlot(f.id, f.fig.data, f.fig.layout,
                   {{displaylogo:false, displayModeBar:false, responsive:true}})
      .then(function(){{ done += 1; document.body.setAttribute('data-charts-rendered', String(done)); }});
  }});
  document.body.setAttribute('data-charts', String(figs.length));
}})();
</script></body></html>
"""


def write_report(meta: dict, tables: dict[str, pd.DataFrame], out: str | Path) -> Path:
    """Write the report to ``out`` and return its path."""
    from ..safewrite import write_text

    return write_text(out, render_report(meta, tables))
