"""The report's memory chart is drawn from exactly the memory_timeline rows."""

from __future__ import annotations

import pandas as pd

from tracekit.render.html import figures, render_report
from tracekit.render.memory_chart import MAX_STEPS, memory_charts


def _timeline(steps=(1,), totals=True) -> pd.DataFrame:
    rows = []
    for s in steps:
        for t, mb, ph in [
            (0.0, 10, "forward"),
            (1.0, 30, "forward"),
            (2.0, 50, "backward"),
            (3.0, 20, "optimizer"),
        ]:
            rows.append(
                {
                    "step": s,
                    "device": "gpu:0",
                    "phase": ph,
                    "t_ms": t,
                    "allocated_mb": mb,
                    "growth_mb": mb - 10,
                }
            )
    df = pd.DataFrame(rows)
    if not totals:
        df["allocated_mb"] = float("nan")
    return df


def test_one_chart_per_step_with_phase_bands_and_the_peak_marked():
    figs = memory_charts(_timeline(steps=(1, 2)))
    assert [name for name, _ in figs] == ["memory-1", "memory-2"]
    fig = figs[0][1]
    line = fig["data"][0]
    assert line["x"] == [0.0, 1.0, 2.0, 3.0] and line["y"] == [10, 30, 50, 20]
    peak = fig["data"][1]
    assert peak["x"] == [2.0] and peak["y"] == [50]
    bands = [(s["x0"], s["x1"]) for s in fig["layout"]["shapes"]]
    assert bands == [(0.0, 2.0), (2.0, 3.0), (3.0, 3.0)]
    texts = [a["text"] for a in fig["layout"]["annotations"]]
    assert texts[:3] == ["forward", "backward", "optimizer"] and "peak 50.0 MB" in texts[3]


def test_without_totals_the_chart_draws_growth():
    fig = memory_charts(_timeline(totals=False))[0][1]
    assert fig["data"][0]["y"] == [0, 20, 40, 10]
    assert "growth" in fig["layout"]["yaxis"]["title"]["text"]


def test_charts_stop_after_max_steps_and_take_one_rank():
    df = _timeline(steps=range(MAX_STEPS + 3))
    assert len(memory_charts(df)) == MAX_STEPS
    two = pd.concat([_timeline().assign(rank=1), _timeline().assign(rank=0, allocated_mb=99)])
    assert memory_charts(two)[0][1]["data"][0]["y"] == [99] * 4


def test_the_report_has_the_chart_and_no_table_of_the_points():
    tables = {"memory_timeline": _timeline()}
    assert [n for n, _ in figures(tables)] == ["memory-1"]
    page = render_report({"path": "x"}, tables)
    assert "t-memory_timeline" not in page and "Memory over time, step 1" in page
