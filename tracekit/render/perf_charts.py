"""The HTML report's perf charts, drawn from table rows: a roofline (``op_shapes``) and GEMM
efficiency against size (``gemm_shapes``, the paper's Fig. 11).

Each op shape or GEMM shape is one point (hover for its op, shape, calls, time and % of peak),
on log axes, so hundreds of points stay readable; the device's roofs come from ``meta.device``
(the peaks each rank was measured against), one roof per dtype the points use. Trace text is
escaped as every chart label is (:func:`tracekit.render.html.label`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from tracekit.analyses import spec_of
from tracekit.perf.devices import peak_of

#: Colours by op family / dtype (plotly's default cycle).
COLOURS = ["#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#eeca3b", "#b279a2", "#9d755d"]


def _over_ranks(name: str, df: pd.DataFrame) -> pd.DataFrame:
    """One point per shape: with several ranks or steps (the per-step tables), the mean of
    each shape's sums over them, its ratios recomputed."""
    if "rank" not in df.columns and "step" not in df.columns:
        return df
    spec = spec_of(name)
    keys = list(spec.keys) if spec else []
    over = [c for c in ("rank", "step") if c in df.columns]
    sums = [c for c in df.columns if c not in keys + over and pd.api.types.is_numeric_dtype(df[c])]
    n = len(df[over].drop_duplicates())  # a shape absent from a rank or step counts as 0 there
    mean = (df.groupby(keys, observed=True, sort=False)[sums].sum() / n).reset_index()
    return spec.finish(mean) if spec and spec.finish else mean


def _device(meta: dict) -> dict:
    """The first rank's peaks (``meta.device``), {} when none."""
    dev = meta.get("device") or {}
    return next(iter(dev.values()), {}) if isinstance(dev, dict) else {}


def _layout(title: str, xtitle: str, ytitle: str, label) -> dict:
    return {
        "title": {"text": label(title)},
        "height": 460,
        # The legend above the plot, under the title, as every chart's (tracekit.render.charts).
        "margin": {"l": 70, "r": 20, "t": 90, "b": 60},
        "legend": {"orientation": "h", "x": 0, "y": 1.0, "xanchor": "left", "yanchor": "bottom"},
        "hovermode": "closest",
        "xaxis": {"type": "log", "title": {"text": xtitle}, "automargin": True},
        "yaxis": {"type": "log", "title": {"text": ytitle}, "automargin": True},
    }


def _points(df: pd.DataFrame, x: str, y: str, by: str, hover: list[str], label) -> list[dict]:
    traces = []
    for i, (group, g) in enumerate(df.groupby(by, sort=True)):
        traces.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": label(group),
                "x": [float(v) for v in g[x]],
                "y": [float(v) for v in g[y]],
                "marker": {"color": COLOURS[i % len(COLOURS)], "size": 9, "opacity": 0.75},
                "text": ["<br>".join(label(f"{c}: {_fmt(r[c])}") for c in hover) for _, r in g.iterrows()],
                "hoverinfo": "text",
                "meta": {"series": str(group)},
            }
        )
    return traces


def _meta(table: str, x: str, y: str, by: str) -> dict:
    """What a test needs to check the points against the table: one point per shape (the
    table's keys; several ranks or steps: the mean of its sums, ratios recomputed), x and y
    its columns, one series per value of ``by``."""
    return {"table": table, "points": {"x": x, "y": y, "by": by}}


def _fmt(v) -> str:
    return f"{v:,.4g}" if isinstance(v, float) else str(v)


def _roofs(dev: dict, dtypes: list[str], lo: float, hi: float, label) -> list[dict]:
    """Per dtype with a known peak: the memory roof (bandwidth x intensity) up to the ridge
    point, then the compute roof."""
    peaks, bw = dev.get("peak_tflops") or {}, dev.get("peak_tbps")
    out = []
    for d in dtypes:
        p = peak_of(peaks, d)
        if not p:
            continue
        ridge = p / bw if bw else lo
        xs, ys = ([lo, ridge, hi], [bw * lo, p, p]) if bw and lo < ridge else ([lo, hi], [p, p])
        out.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": label(f"{d} roof ({p:g} TFLOP/s" + (f", {bw:g} TB/s)" if bw else ")")),
                "x": xs,
                "y": ys,
                "line": {"dash": "dash", "width": 1.5},
                "hoverinfo": "name",
            }
        )
    return out


def roofline(df: pd.DataFrame, meta: dict, label) -> list[tuple[str, dict]]:
    """Every op shape with FLOPs: achieved TFLOP/s against FLOP per byte, under the roofs."""
    df = _over_ranks("op_shapes", df)
    df = df[(df["tflops"] > 0) & (df["intensity"] > 0)]
    if df.empty:
        return []
    dev = _device(meta)
    lo, hi = float(df["intensity"].min()) / 2, float(df["intensity"].max()) * 2
    hover = ["op", "shape", "dtype", "phase", "calls", "time_ms", "tflops", "intensity", "peak_pct"]
    traces = _points(df, "intensity", "tflops", "family", hover, label)
    traces += _roofs(dev, sorted(df["dtype"].astype(str).unique()), lo, hi, label)
    what = dev.get("matched") or "no device peak known"
    fig = {
        "data": traces,
        "layout": _layout(f"Roofline: op shapes on {what}", "FLOP per byte", "TFLOP/s", label),
        "meta": _meta("op_shapes", "intensity", "tflops", "family"),
    }
    return [("roofline", fig)]


def gemm_sizes(df: pd.DataFrame, meta: dict, label) -> list[tuple[str, dict]]:
    """The paper's Fig. 11 from the trace's own GEMMs: achieved TFLOP/s against GEMM size
    (GFLOP per call), with each dtype's peak."""
    df = _over_ranks("gemm_shapes", df)
    df = df[(df["tflops"] > 0) & (df["gflop"] > 0)]
    if df.empty:
        return []
    hover = ["op", "batch", "m", "n", "k", "dtype", "phase", "calls", "us_per_call", "tflops", "peak_pct"]
    traces = _points(df, "gflop", "tflops", "dtype", hover, label)
    peaks = _device(meta).get("peak_tflops") or {}
    lo, hi = float(df["gflop"].min()) / 2, float(df["gflop"].max()) * 2
    for d in sorted(df["dtype"].astype(str).unique()):
        p = peak_of(peaks, d)
        if p:
            name = label(f"{d} peak {p:g} TFLOP/s")
            traces.append({"type": "scatter", "mode": "lines", "name": name, "x": [lo, hi], "y": [p, p],
                           "line": {"dash": "dash", "width": 1.5}, "hoverinfo": "name"})  # fmt: skip
    layout: dict[str, Any] = _layout(
        "GEMM efficiency against size (Fig. 11)", "GFLOP per call", "TFLOP/s", label
    )
    return [
        (
            "gemm_sizes",
            {"data": traces, "layout": layout, "meta": _meta("gemm_shapes", "gflop", "tflops", "dtype")},
        )
    ]


CHARTS = {"op_shapes": roofline, "gemm_shapes": gemm_sizes}
