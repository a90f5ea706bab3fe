"""``critical_path_timeline`` (issue 35.3, "the HTML report draws it over the timeline"): the
path's pieces per step, against ``critical_path`` on the planted scenarios of
tests/test_critical_path.py, thinned to a chart's size, and drawn in the HTML report."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from test_charts import check_charts, read_figures
from test_critical_path import ADAM, GEMM, SCENARIOS, _build, _sync
from test_report import _chromium, needs_chromium
from tracekit.analyses.critical_path_timeline import MIN_PIECES, POINTS, joined, thinned

import tracekit
from tracekit.cli import main
from tracekit.render.critical_chart import KIND_COLORS
from tracekit.render.html import render_report
from tracekit.testing import TraceBuilder

NAME = "critical_path_timeline"


def _ns(ms) -> np.ndarray:
    return np.rint(np.asarray(ms, dtype=float) * 1e6).astype(np.int64)


def _check_tiles(t: pd.DataFrame, window: pd.Series) -> None:
    """Each step's rows in time order, touching, from 0 to its window."""
    for step, g in t.groupby("step"):
        lo, hi = _ns(g["start_ms"]), _ns(g["end_ms"])
        assert (hi > lo).all() and (lo[1:] == hi[:-1]).all(), step
        assert lo[0] == 0 and hi[-1] == _ns(window[step]), step


def _check_sums(t: pd.DataFrame, cp: pd.DataFrame) -> None:
    """Per step and kind, the rows' time is critical_path's, to the nanosecond."""
    got = (
        t.assign(ns=_ns(t["end_ms"]) - _ns(t["start_ms"]))
        .groupby(["step", "kind"], observed=True)["ns"]
        .sum()
    )
    want = cp.assign(ns=_ns(cp["time_ms"])).groupby(["step", "kind"], observed=True)["ns"].sum()
    assert got.to_dict() == want[want > 0].to_dict()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_pieces_sum_to_the_critical_path_per_kind(name, tmp_path):
    _, _, a, _ = _build(tmp_path, name)
    t = a.table(NAME, per_step=True)
    assert list(t.columns) == ["step", "kind", "phase", "module", "start_ms", "end_ms", "pieces"]
    assert t["step"].nunique() == 3 and (t["pieces"] == 1).all()  # few pieces: none merged
    _check_sums(t, a.table("critical_path", per_step=True))
    window = a.table("idle", per_step=True).set_index("step")["window_ms"]
    _check_tiles(t, window)


def _many(tmp_path, kernels: int):
    """Three steps of the host-bound optimizer with ``kernels`` launches each: many pieces."""
    b = TraceBuilder(modules="none")
    for _ in range(3):
        with b.step():
            with b.forward():
                b.kernel(GEMM, 200, op="aten::mm")
            with b.optimizer():
                _sync(b)
                for _ in range(kernels):
                    b.kernel(ADAM, 1, op="aten::_fused_adam_")
                    b.cpu(5)
    return b.write(tmp_path / "many.pt.trace.json")


def test_many_pieces_are_thinned_to_the_bound_and_full_series_keeps_them(tmp_path):
    path = _many(tmp_path, 200)
    thin = tracekit.load(path, cache=False, jobs=1, tables=[NAME, "critical_path", "idle"])
    whole = tracekit.load(path, cache=False, jobs=1, tables=[NAME, "critical_path"], full_series=True)
    raw = len(next(iter(thin.ranks.values())).critical)
    t, w = thin.table(NAME, per_step=True), whole.table(NAME, per_step=True)
    budget = max(MIN_PIECES, POINTS // 3)
    assert raw > 3 * budget and len(w) == raw and (w["pieces"] == 1).all()
    assert t.groupby("step").size().max() <= budget
    assert t["pieces"].sum() == raw  # every piece is in some row
    _check_tiles(t, thin.table("idle", per_step=True).set_index("step")["window_ms"])
    _check_sums(w, whole.table("critical_path", per_step=True))
    # the longest piece is kept: each step's forward GEMM, its row (with the short pieces
    # after it that joined it) starting where the step does
    gemm = t[(t["kind"] == "kernel") & (t["phase"] == "forward")]
    assert len(gemm) == 3 and (gemm["start_ms"] == 0).all() and (gemm["end_ms"] >= 0.2).all()


def test_thinning_keeps_the_longest_and_joins_the_rest_to_the_one_before():
    step = np.array([1, 1, 1, 1, 1, 2, 2])
    lo = np.array([0, 5, 6, 10, 11, 0, 3])
    hi = np.array([5, 6, 10, 11, 20, 3, 4])
    own = np.arange(7)[:, None]  # every row its own labels: nothing joins again
    kept, start, end, count = thinned(step, own, lo, hi, np.ones(7, np.int64), 2)
    # step 1 keeps 11-20 (9) and 0-5/6-10 tie-broken to the earlier (0-5); step 2 keeps both
    assert kept.tolist() == [0, 4, 5, 6]
    assert start.tolist() == [0, 11, 0, 3] and end.tolist() == [11, 20, 3, 4]
    assert count.tolist() == [4, 1, 1, 1]
    kept, start, end, count = thinned(step[:5], own[:5], lo[:5], hi[:5], np.ones(5, np.int64), 1)
    assert kept.tolist() == [4] and (start[0], end[0], count[0]) == (0, 20, 5)


def test_thinning_keeps_more_rows_where_kept_neighbours_join_again():
    """A b A b A c (A 10 ns, the rest 1 ns): keeping the three A gives one row once joined
    again, so a budget of 2 keeps them (a fourth, the first b, would give 3 rows); a budget of
    3 keeps the first b too (A b A-A: 3 rows)."""
    step = np.ones(6, np.int64)
    lo = np.array([0, 10, 11, 21, 22, 32])
    hi = np.array([10, 11, 21, 22, 32, 33])
    codes = np.array([0, 1, 0, 1, 0, 2])[:, None]
    ones = np.ones(6, np.int64)
    kept, start, end, count = thinned(step, codes, lo, hi, ones, 2)
    assert kept.tolist() == [0, 2, 4] and start.tolist() == [0, 11, 22] and end.tolist() == [11, 22, 33]
    first, lo2, hi2, n = joined(step[kept], codes[kept], start, end, count)
    assert first.tolist() == [0] and (lo2[0], hi2[0], n[0]) == (0, 33, 6)
    kept, start, end, count = thinned(step, codes, lo, hi, ones, 3)
    assert kept.tolist() == [0, 1, 2, 4] and count.tolist() == [1, 1, 2, 2]
    assert len(joined(step[kept], codes[kept], start, end, count)[0]) == 3


def test_only_computed_with_the_critical_path(tmp_path):
    _build(tmp_path, "loader")
    path = tmp_path / "loader.pt.trace.json"
    a = tracekit.load(path, cache=False, jobs=1, tables=["idle"])
    assert next(iter(a.ranks.values())).critical.empty and NAME not in a.tables()
    b = tracekit.load(path, cache=False, jobs=1, tables=[NAME])
    assert not b.table(NAME, per_step=True).empty


def test_json_csv_and_the_html_timeline(tmp_path):
    _, _, a, _ = _build(tmp_path, "item")
    tables = a.tables()
    page = render_report(a.meta, tables)
    figs = {f["name"]: f["fig"] for f in read_figures(page)}
    fig = figs["critical-timeline"]
    assert fig["meta"]["bars"]["step"] == 1
    assert {t["name"] for t in fig["data"]} == {"kernel", "memcpy", "sync", "cpu", "launch"}
    assert all(t["marker"]["color"] == KIND_COLORS[t["name"]] for t in fig["data"])
    assert any("forward / Other" in h for t in fig["data"] for h in t["hovertext"])
    assert fig["layout"]["shapes"] and fig["layout"]["shapes"][0]["x0"] == 0
    # the stacked chart of critical_path colours its kinds the same
    stacked = figs["critical_path"]["data"]
    assert all(t["marker"]["color"] == KIND_COLORS[t["meta"]["series"][-1]] for t in stacked)
    assert check_charts(tables, page) > 0
    assert f"t-{NAME}" not in page  # no table of the rows, only the chart

    class Strict(HTMLParser):
        def error(self, message):  # pragma: no cover - raised on malformed markup
            raise AssertionError(message)

    Strict().feed(page)
    trace = str(tmp_path / "item.pt.trace.json")
    run = CliRunner()
    out = run.invoke(main, ["analyze", trace, "--no-cache", "--format", "json", "--table", NAME])
    got = json.loads(out.output)["tables"][NAME]
    assert {r["kind"] for r in got} == {"kernel", "memcpy", "sync", "cpu", "launch"}
    csv = run.invoke(main, ["analyze", trace, "--no-cache", "--format", "csv", "--table", NAME])
    assert f"# {NAME}" in csv.output and "start_ms" in csv.output
    term = run.invoke(main, ["analyze", trace, "--no-cache", "--table", NAME])
    assert term.exit_code == 0 and "start_ms" not in term.output


@pytest.mark.browser
@needs_chromium
def test_the_timeline_renders_in_headless_chromium(tmp_path):
    """The report with the path timeline renders every chart and logs no JavaScript error."""
    _build(tmp_path, "optimizer")
    out = tmp_path / "report.html"
    trace = str(tmp_path / "optimizer.pt.trace.json")
    r = CliRunner().invoke(main, ["analyze", trace, "--no-cache", "--format", "html", "--out", str(out)])
    assert r.exit_code == 0, r.output
    run = _chromium("--enable-logging=stderr", "--v=0", "--dump-dom", out.resolve().as_uri(), tmp=tmp_path)
    n = int(re.search(r'data-charts="(\d+)"', run.stdout).group(1))
    assert n >= 2 and re.search(r'data-charts-rendered="(\d+)"', run.stdout).group(1) == str(n)
    assert "Critical path over time, step 1" in run.stdout
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console


@pytest.mark.shared
def test_real_traces_timelines_tile_their_windows(tmp_path):
    """On every shared real trace: no error, each step's rows cover its window in order within
    the bound, and the full series sums to critical_path per kind."""
    from shared_traces import shared_traces

    traces = shared_traces()
    if not traces:
        pytest.skip("../shared/traces absent")
    for p in traces:
        shutil.copy(p, tmp_path / p.name)
        names = [NAME, "critical_path", "idle"]
        a = tracekit.load(tmp_path / p.name, cache=False, jobs=1, tables=names, full_series=True)
        t = a.table(NAME, per_step=True)
        if a.mode != "gpu" or t.empty:
            assert a.table("critical_path", per_step=True).empty, p.name
            (tmp_path / p.name).unlink()
            continue
        window = a.table("idle", per_step=True).set_index("step")["window_ms"]
        _check_tiles(t, window)
        _check_sums(t, a.table("critical_path", per_step=True))
        thin = tracekit.load(tmp_path / p.name, cache=False, jobs=1, tables=names)
        th = thin.table(NAME, per_step=True)
        _check_tiles(th, window)
        assert th.groupby("step").size().max() <= max(MIN_PIECES, POINTS // th["step"].nunique()), p.name
        assert th["pieces"].sum() == len(
            next(iter(thin.ranks.values())).critical.query("step in @window.index")
        )
        (tmp_path / p.name).unlink()


def test_one_chart_per_rank_of_its_first_step():
    from tracekit.render.critical_chart import critical_charts

    rows = [
        {"rank": r, "step": s, "kind": k, "phase": "forward", "module": "Linear", "start_ms": a, "end_ms": b}
        for r in (1, 0)
        for s in (4, 3)
        for k, a, b in (("cpu", 0.0, 1.0), ("kernel", 1.0, 3.5))
    ]
    df = pd.DataFrame(rows).assign(pieces=1)
    figs = critical_charts(df)
    assert [n for n, _ in figs] == ["critical-timeline-0", "critical-timeline-1"]
    assert all(f["meta"]["bars"]["step"] == 3 for _, f in figs)
    kernel = figs[0][1]["data"][1]
    assert kernel["base"] == [1.0] and kernel["x"] == [2.5] and kernel["y"] == ["kernel"]
    assert figs[0][1]["layout"]["yaxis"]["categoryarray"] == ["cpu", "kernel"]


def test_the_result_cache_gives_the_same_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    _build(tmp_path, "item")
    path = tmp_path / "item.pt.trace.json"
    first = tracekit.load(path, cache=True, jobs=1).table(NAME)
    again = tracekit.load(path, cache=True, jobs=1)
    pd.testing.assert_frame_equal(again.table(NAME), first)
    whole = tracekit.load(path, cache=True, jobs=1, full_series=True).table(NAME)
    pd.testing.assert_frame_equal(whole, first)  # few pieces: the full series is the same
