"""Every HTML chart is drawn from exactly the rows of the table under it (issue 26).

The charts are read back out of the written page (the plotly JSON of ``var figs``) and each
bar is compared with the table: the sum of the rows sharing its label and series (never their
mean), divided by the ranks when a directory's ranks are drawn as their mean; every group of
rows with time is a bar unless the chart keeps the largest N (then no bar left out is larger
than one drawn). Checked on random planted traces (one and two ranks, mean and per step) and on
the sample traces (an inference trace split by stage, two ranks).
"""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracekit.analyses import spec_of

import tracekit
from tracekit.render.charts import figures
from tracekit.render.html import render_report
from tracekit.testing.strategies import plans

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
_tmp: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _scratch(tmp_path_factory):
    _tmp.append(tmp_path_factory.mktemp("charts"))
    yield
    _tmp.pop()


def read_figures(page: str) -> list[dict]:
    """The charts of a written report, as the page's script holds them."""
    m = re.search(r"var figs = (\[.*?\]);\n", page, re.S)
    assert m, "no chart data in the page"
    return json.loads(m.group(1))


def _groups(df: pd.DataFrame, meta: dict) -> pd.DataFrame:
    """The table's rows as the chart must draw them: dropped rows out, then per (series, x)
    the sum of each value column over its rows, divided by the ranks."""
    rows = df
    for col, dropped in meta["drop"].items():
        if col in rows:
            rows = rows[~rows[col].astype(str).isin(dropped)]
    keys = meta["series"] + [c for c in meta["x"] if c != "_x"]
    frame = rows.assign(**{k: rows[k].astype(str) for k in keys})
    if keys:
        sums = frame.groupby(keys, sort=False)[meta["values"]].sum().reset_index()
    else:
        sums = frame[meta["values"]].sum().to_frame().T
    sums[meta["values"]] = sums[meta["values"]] / meta["ranks"]
    xs = [c for c in meta["x"] if c != "_x"]
    sums["_key"] = sums[xs].agg(" / ".join, axis=1) if xs else meta.get("alone", "")
    sums["_series"] = sums[meta["series"]].agg(" ".join, axis=1) if meta["series"] else ""
    return sums


def check_charts(tables: dict[str, pd.DataFrame], page: str) -> int:
    """Every bar of every chart of ``page`` against ``tables``; returns the bars checked."""
    checked = 0
    for f in read_figures(page):
        fig, meta = f["fig"], f["fig"]["meta"]
        if "points" in meta:
            checked += check_points(tables[meta["table"]], fig)
            continue
        if "lines" in meta:
            checked += check_lines(tables[meta["table"]], fig)
            continue
        if "bars" in meta:
            checked += check_bars(tables[meta["table"]], fig)
            continue
        sums = _groups(tables[meta["table"]], meta)
        drawn = set()
        for trace in fig["data"]:
            horizontal = trace.get("orientation") == "h"
            cats, vals = (trace["y"], trace["x"]) if horizontal else (trace["x"], trace["y"])
            series = " ".join(html.unescape(s) for s in trace["meta"]["series"])
            col = trace["meta"]["column"]
            mine = sums[sums["_series"] == series] if meta["series"] else sums
            for cat, val in zip(cats, vals):
                key = html.unescape(cat)
                want = mine.loc[mine["_key"] == key, col] if "_x" not in meta["x"] else mine[col]
                assert len(want) == 1, (meta["table"], series, key)
                assert val == pytest.approx(float(want.iloc[0]), abs=2e-6), (meta["table"], series, key, col)
                drawn.add((series, key, col))
                checked += 1
        # Nothing with time is left out, unless the chart keeps its largest bars.
        for col in meta["values"]:
            missing = sums[(sums[col].abs() > 1e-6)]
            left = [(s, k) for s, k in zip(missing["_series"], missing["_key"]) if (s, k, col) not in drawn]
            if meta["top"] is None:
                assert not left or "_x" in meta["x"], (meta["table"], left[:5])
            else:
                totals = sums.groupby("_key")[meta["values"]].sum().abs().sum(axis=1)
                drawn_keys = {k for _, k, _ in drawn}
                if left and drawn_keys:
                    smallest = min(totals[k] for k in drawn_keys)
                    assert all(totals[k] <= smallest + 1e-9 for _, k in left if k not in drawn_keys)
    return checked


def check_points(df: pd.DataFrame, fig: dict) -> int:
    """A scatter chart of shapes (roofline, GEMM sizes): one point per shape with positive x
    and y, in the series of its ``by`` column; a table of one rank's mean is drawn row for row."""
    how = fig["meta"]["points"]
    x, y, by = how["x"], how["y"], how["by"]
    spec = spec_of(fig["meta"]["table"])
    rows = df[(df[x] > 0) & (df[y] > 0)]
    points = [t for t in fig["data"] if t.get("mode") == "markers"]
    drawn = sorted(
        (html.unescape(t["meta"]["series"]), px, py) for t in points for px, py in zip(t["x"], t["y"])
    )
    shapes = rows[list(spec.keys)].astype(str).drop_duplicates()
    assert len(drawn) == len(shapes), (fig["meta"]["table"], len(drawn), len(shapes))
    if not {"rank", "step"} & set(df.columns):
        want = sorted((str(b), float(px), float(py)) for b, px, py in zip(rows[by], rows[x], rows[y]))
        assert [d[0] for d in drawn] == [w[0] for w in want]
        np.testing.assert_allclose([d[1:] for d in drawn], [w[1:] for w in want], rtol=1e-9)
    return len(drawn)


def check_lines(df: pd.DataFrame, fig: dict) -> int:
    """A memory chart: per device, its line is the step's rows of the table in time order (the
    lowest rank's with several), every point with a value drawn."""
    how = fig["meta"]["lines"]
    rows = df[df["step"] == how["step"]]
    if "rank" in rows.columns:
        rows = rows[rows["rank"] == df["rank"].min()]
    rows = rows.sort_values(how["x"], kind="stable")
    lines = [t for t in fig["data"] if t.get("mode") == "lines"]
    for t in lines:
        g = rows[rows[how["by"]].astype(str) == html.unescape(t["name"])]
        g = g[g[how["y"]].notna()]
        np.testing.assert_allclose(t["x"], g[how["x"]].to_numpy(float), atol=1e-6)
        np.testing.assert_allclose(t["y"], g[how["y"]].to_numpy(float), atol=1e-6)
    return sum(len(t["y"]) for t in lines)


def check_bars(df: pd.DataFrame, fig: dict) -> int:
    """A critical-path timeline: per step of its menu (or its one step) and kind, its bars are
    the step's rows of that kind (of the chart's rank) in time order, each from ``start_ms`` to
    ``end_ms``, and nothing else; the first step's bars alone are visible."""
    how = fig["meta"]["bars"]
    mine = df if how["rank"] is None else df[df["rank"] == how["rank"]]
    bars = [t for t in fig["data"] if t.get("type") == "bar"]
    steps = how.get("steps", [how["step"]])
    assert {t.get("meta", {}).get("step", how["step"]) for t in bars} == set(steps)
    for step in steps:
        rows = mine[mine["step"] == step].sort_values("start_ms", kind="stable")
        drawn = [t for t in bars if t.get("meta", {}).get("step", how["step"]) == step]
        assert sorted(t["name"] for t in drawn) == sorted(rows["kind"].astype(str).unique())
        assert all(t.get("visible", True) == (step == how["step"]) for t in drawn)
        if step in how.get("thinned", []):  # a --full-series step thinned for the chart
            check_thinned(rows, drawn)
            continue
        for t in drawn:
            g = rows[rows["kind"].astype(str) == t["name"]]
            assert set(t["y"]) == {t["name"]}
            np.testing.assert_allclose(t["base"], g["start_ms"].to_numpy(float), atol=1e-6)
            ends = np.asarray(t["base"]) + np.asarray(t["x"])
            np.testing.assert_allclose(ends, g["end_ms"].to_numpy(float), atol=2e-6)
    return sum(len(t["x"]) for t in bars)


def check_thinned(rows: pd.DataFrame, drawn: list) -> None:
    """A step's bars thinned for the chart: at most the table's budget, in order, touching, over
    the step's rows' whole span."""
    lo = np.concatenate([np.asarray(t["base"], float) for t in drawn])
    hi = lo + np.concatenate([np.asarray(t["x"], float) for t in drawn])
    o = np.argsort(lo)
    lo, hi = lo[o], hi[o]
    assert len(lo) <= 400 < len(rows)
    np.testing.assert_allclose(lo[1:], hi[:-1], atol=2e-6)
    assert lo[0] == pytest.approx(rows["start_ms"].min(), abs=1e-6)
    assert hi[-1] == pytest.approx(rows["end_ms"].max(), abs=2e-6)


def _run(plans_, per_step: bool) -> tuple[dict, str]:
    d = _tmp[-1] / "run"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for rank, plan in enumerate(plans_):
        plan.build(rank=rank, world_size=len(plans_)).write(d / f"rank{rank}.pt.trace.json")
    a = tracekit.load(d if len(plans_) > 1 else d / "rank0.pt.trace.json", cache=False, jobs=1)
    tables = a.tables(per_step=per_step)
    return tables, render_report(a.meta, tables)


@settings(max_examples=int(settings().max_examples // 3) or 1)
@given(st.lists(plans(max_steps=3), min_size=1, max_size=2), st.booleans())
def test_every_chart_is_its_tables_rows(ranks, per_step):
    tables, page = _run(ranks, per_step)
    assert check_charts(tables, page) > 0


@pytest.mark.parametrize("sample", ["tiny-infer", "tiny-zero2-2ranks"])
@pytest.mark.parametrize("per_step", [False, True])
def test_sample_charts_are_their_tables_rows(sample, per_step, tmp_path):
    shutil.copytree(SAMPLES / sample, tmp_path / sample)
    a = tracekit.load(tmp_path / sample, cache=False, jobs=1)
    tables = a.tables(per_step=per_step)
    page = render_report(a.meta, tables)
    assert check_charts(tables, page) > 10
    figs = {f["name"]: f["fig"] for f in read_figures(page)}
    if sample == "tiny-infer":  # prefill and decode are their own series, never averaged
        names = {html.unescape(t["name"]) for t in figs["layers"]["data"]}
        assert any("prefill" in n for n in names) and any("decode" in n for n in names)
    else:
        assert "mean over 2 ranks" in figs["modules"]["layout"]["title"]["text"]


def test_a_kernel_is_the_sum_of_its_rows_and_colliding_names_are_two_bars():
    """ncclKernel_SendRecv in forward and backward is drawn at its total (it was drawn at the
    mean of its rows, half of it); two kernels with one short name are two bars."""
    add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<{}>, at::detail::Array<char*, 3> >(int)"
    top = pd.DataFrame(
        {
            "name": [
                "ncclKernel_SendRecv",
                "ncclKernel_SendRecv",
                add.format("float"),
                add.format("c10::Half"),
            ],
            "category": ["Other", "Other", "Element-wise", "Element-wise"],
            "module": ["Other"] * 4,
            "phase": ["forward", "backward", "forward", "forward"],
            "count": [1.0, 1.0, 2.0, 2.0],
            "total_ms": [10.9, 10.9, 3.0, 2.0],
            "mean_us": [10900.0, 10900.0, 1500.0, 1000.0],
            "percent": [40.0, 40.0, 11.0, 9.0],
        }
    )
    (_key, fig), *_ = figures({"top_kernels": top})
    bars = dict(zip(map(html.unescape, fig["data"][0]["y"]), fig["data"][0]["x"]))
    assert bars["ncclKernel_SendRecv"] == pytest.approx(21.8)
    assert len(bars) == 3
    axis = fig["layout"]["yaxis"]
    labels = [html.unescape(t) for t in axis["ticktext"]]
    assert sorted(labels) == [
        "ncclKernel_SendRecv",
        "vectorized_elementwise_kernel<CUDAFunctor_add>",
        "vectorized_elementwise_kernel<CUDAFunctor_add> #2",
    ]
    assert set(map(html.unescape, axis["tickvals"])) == set(bars)


def test_compare_draws_no_empty_attention_chart():
    att = pd.DataFrame({"phase": ["forward", "backward"], "a_ms": [0.0, 0.0], "b_ms": [0.0, 0.0]})
    assert figures({"attention": att}) == []
    att["b_ms"] = [1.0, 0.0]
    assert [k for k, _ in figures({"attention": att})] == ["attention"]


def test_legend_sits_above_the_plot_not_over_the_labels():
    a = tracekit.load(SAMPLES / "tiny-infer", cache=False, jobs=1)
    for _, fig in figures(a.tables()):
        legend = fig["layout"]["legend"]
        assert legend["yanchor"] == "bottom" and legend["y"] >= 1.0
        assert np.isfinite(fig["layout"]["margin"]["t"]) and fig["layout"]["margin"]["t"] >= 80
