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
from pathlib import Path

import pandas as pd

from ..pipeline.checks import warning_lines
from ..pipeline.coverage import lines as coverage_lines
from .charts import figures, label
from .common import (
    cell,
    device_lines,
    filters_text,
    for_people,
    header,
    mode_text,
    numeric,
    shown_rows,
    title,
)
from .finite import finite_obj

__all__ = ["figures", "label", "render_report", "script_json", "write_report"]

CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; font-src data:"
)


def script_json(obj) -> str:
    """JSON that is safe inside a ``<script>`` element."""
    s = json.dumps(finite_obj(obj)[0], allow_nan=False, default=str)
    return (
        s.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def table_html(name: str, df: pd.DataFrame) -> str:
    """One table: units in headers (the column's name as its tooltip), no all-zero rows, names
    in their short form with the full name as the cell's tooltip."""
    if "a_ms" in df:  # a comparison: rows where A or B has time
        df = df[(df["a_ms"] != 0) | (df["b_ms"] != 0)].reset_index(drop=True)
        shown = shown_rows(name, df, skip_zero=False)
    else:
        shown = shown_rows(name, df, top=None if name not in ("top_kernels", "ranks") else 50)
    full = shown.full if shown.full is not None else shown.frame
    head = "".join(
        f'<th title="{html.escape(str(c))}">{html.escape(header(name, str(c)))}</th>' for c in df.columns
    )
    rows = []
    for row, whole in zip(
        shown.frame.itertuples(index=False, name=None), full.itertuples(index=False, name=None)
    ):
        cells = []
        for c, v, w in zip(df.columns, row, whole):
            text = html.escape(cell(name, str(c), v))
            tip = f' title="{html.escape(str(w))}"' if isinstance(w, str) and w != v else ""
            cells.append(f'<td class="n">{text}</td>' if numeric(df, c) else f"<td{tip}>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    body = "".join(rows) or f'<tr><td colspan="{max(len(df.columns), 1)}">(no rows)</td></tr>'
    notes = "".join(f'<p class="note">{html.escape(n)}</p>' for n in shown.notes())
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
            f"&middot; {html.escape(mode_text(m))}"
            + (f" &middot; devices: {html.escape(devices)}" if devices else "")
            + f" &middot; steps analysed: {html.escape(steps)}</li>"
        )
        items += [f"<li>{html.escape(d)}</li>" for d in device_lines(m)]
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
    for line in warning_lines(meta.get("warnings", [])):
        items.append(f'<li class="warn">warning: {html.escape(line)}</li>')
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

    figs = figures(tables, meta)
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
