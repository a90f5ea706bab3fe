"""Issue 38, items 11, 13, 14, 15: kernel short names stay distinct and mangled names are read,
the HTML charts' colours, legends and titles, the MTIA notice, one number rule, empty tables'
columns, and --per-step cross-rank tables."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.pipeline.demangle import readable
from tracekit.pipeline.names import short_name
from tracekit.render.charts import figures
from tracekit.render.colours import MEANING, top_margin
from tracekit.render.common import cell, shown_rows
from tracekit.render.formats import csv_float, to_csv
from tracekit.render.memory_chart import memory_charts

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import shared_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"

AITER = (
    "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
)
CK_TILE = "_ZN7ck_tile6kentryILi2ENS_38FmhaBatchPrefillWithPagedKVCacheKernelINS_5TileIiEEEEEvT0_"
CUTLASS = "_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionIfEEEEvNT_6ParamsE"


# 11: kernel names -------------------------------------------------------------------------


def test_mangled_names_are_read():
    assert readable(AITER) == "aiter::add_rmsnorm_quant_kernel<>"
    assert short_name(AITER) == "add_rmsnorm_quant_kernel"
    assert short_name(CK_TILE) == "kentry<FmhaBatchPrefillWithPagedKVCacheKernel>"
    assert short_name(CUTLASS) == "Kernel<ImplicitGemmConvolution>"  # a nested name: its last part
    assert readable("_ZN2ck12_GLOBAL__N_13fooEv") == "ck::(anonymous namespace)::foo"
    assert readable("_Z9my_kernelPfi") == "my_kernel"
    for not_mangled in ("_Zfoo", "_ZN", "Memcpy DtoD (Device -> Device)", "_ZN99short"):
        assert readable(not_mangled) is None
        assert short_name(not_mangled) == not_mangled


def test_a_hostile_mangled_name_is_read_in_linear_time():
    import time

    name = "_ZN3fooI" + "NS_3barE" * 10_000 + "E"
    t0 = time.perf_counter()
    assert short_name(name) == "foo<bar>"
    assert time.perf_counter() - t0 < 2.0


def test_distinct_kernels_keep_distinct_short_names():
    names = [f"void at::native::bn_bw_1C11_kernel_new<float2, float, int, {i}>(float*)" for i in (1, 2, 3)]
    df = pd.DataFrame(
        {
            "name": [*names, names[0]],
            "category": "Normalization",
            "module": "Other",
            "phase": ["backward", "backward", "backward", "forward"],
            "count": [1, 2, 3, 4],
            "total_ms": [4.0, 3.0, 2.0, 1.0],
            "mean_us": 1.0,
            "percent": 10.0,
        }
    )
    shown = shown_rows("top_kernels", df).frame["name"].tolist()
    base = short_name(names[0])
    assert shown == [base, f"{base} #2", f"{base} #3", base]  # one full name, one short name


# 13: HTML charts ---------------------------------------------------------------------------


def test_exposed_and_idle_chart_has_a_legend_and_the_colours_of_its_meanings():
    phases = pd.DataFrame(
        {"phase": ["forward"], "wall_ms": [10.0], "exposed_comm_ms": [0.0], "idle_ms": [7.0]}
    )
    fig = dict(figures({"phases": phases}))["exposed"]
    assert fig["layout"]["showlegend"] is True  # one series still has its legend
    assert [(t["name"], t["marker"]["color"]) for t in fig["data"]] == [("idle", MEANING["idle"])]


def test_every_phase_has_one_colour_in_every_chart():
    a = tracekit.load(SAMPLES / "tiny-train-1rank", cache=False, jobs=1)
    seen: dict[str, set] = {}
    for _, fig in figures(a.tables()):
        for t in fig["data"]:
            if t.get("type") == "bar" and t["name"] in MEANING:
                seen.setdefault(t["name"], set()).add(t["marker"]["color"])
    assert seen and all(v == {MEANING[k]} for k, v in seen.items())


def test_a_long_legend_gets_its_rows_above_the_plot():
    one = top_margin(["forward"])
    many = top_margin([f"step {s} {p}" for s in range(5, 9) for p in ("forward", "backward", "optimizer")])
    assert many >= one + 3 * 22  # rows of legend, not over the title


def test_memory_peak_label_is_inside_the_plot_and_phase_labels_at_the_bottom():
    rows = pd.DataFrame(
        {
            "step": 1,
            "t_ms": [0.0, 1.0, 2.0, 3.0],
            "device": "cuda:0",
            "allocated_mb": [10.0, 50.0, 100.0, 20.0],
            "growth_mb": [0.0, 40.0, 90.0, 10.0],
            "phase": ["forward", "forward", "backward", "optimizer"],
        }
    )
    ((_, fig),) = memory_charts(rows)
    lo, hi = fig["layout"]["yaxis"]["range"]
    assert lo <= 0 and hi >= 100 * 1.3  # room above the 100 MB peak for its label
    bands = [n for n in fig["layout"]["annotations"] if n.get("yref") == "paper"]
    assert bands and all(n["y"] == 0 and n["yanchor"] == "bottom" for n in bands)


def test_compare_orders_gemm_shape_deltas_and_titles_delta_charts_by_what_they_plot():
    from tracekit.compare import compare

    a = tracekit.load(shared_trace("hta/trace_diff__control__control.json.gz"), cache=False)
    b = tracekit.load(shared_trace("hta/trace_diff__test__test.json.gz"), cache=False)
    t = compare(a, b)
    d = t["gemm_shapes_delta"]["delta_ms"].abs().to_numpy()
    assert len(d) > 1 and (np.diff(d) <= 0).all()  # largest change first
    titles = [fig["layout"]["title"]["text"] for key, fig in figures(t) if key.endswith("_delta")]
    assert titles and all("% of peak" not in x and "change in time" in x for x in titles)


# 14: MTIA ---------------------------------------------------------------------------------


def test_mtia_device_events_are_read_so_no_notice_says_otherwise():
    # what is read and how: tests/test_mtia.py
    a = tracekit.load(shared_trace("hta/mtia_inference_trace__mtia_inference_rank_0.json.gz"), cache=False)
    assert a.meta["mode"] == "gpu"
    assert not any(n.startswith("device events not read") for n in a.meta["notices"])


def test_a_cpu_only_trace_naming_no_device_gets_no_such_notice():
    a = tracekit.load(SAMPLES / "tiny-train-1rank", cache=False, jobs=1)
    assert not any(n.startswith("device events not read") for n in a.meta["notices"])


# 15: numbers, empty tables, --per-step ------------------------------------------------------


def test_one_number_rule():
    assert cell("gemm_shapes", "gflop", 2.8e-08) == "0.000000028"  # never an exponent
    assert cell("gemm_shapes", "gflop", 0.00771) == "0.00771"
    assert cell("phases", "wall_ms", -0.0001) == "0.000"  # never -0
    assert cell("ranks", "vs_mean_pct", -0.01) == "0.0"
    assert cell("ranks", "vs_mean_pct", -1.25) == "-1.2"
    assert csv_float(102441234.5) == "102441234.5"  # all digits, no 1.02441e+08
    assert csv_float(-0.0) == "0" and csv_float(2.8e-08) == "0.000000028"
    assert float(csv_float(0.1 + 0.2)) == 0.1 + 0.2  # reads back as the same float
    csv = to_csv(pd.DataFrame({"a": [1.0e8 + 0.5, -0.0]}))
    assert "e+" not in csv and "-0" not in csv


def test_empty_tables_keep_their_percent_column_in_csv_and_parquet(tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "analyze",
            str(SAMPLES / "tiny-infer"),
            "--format",
            "csv",
            "--table",
            "comm",
            "--table",
            "memcpy",
            "--no-cache",
        ],
    )
    assert res.exit_code == 0, res.output
    heads = [ln for ln in res.stdout.splitlines() if ln and not ln.startswith("#")]
    assert heads == [
        "phase,collective,count,time_ms,busy_ms,exposed_ms,percent",
        "kind,count,time_ms,busy_ms,bytes,percent",
    ]
    res = CliRunner().invoke(
        main,
        [
            "analyze",
            str(SAMPLES / "tiny-infer"),
            "--format",
            "parquet",
            "--table",
            "comm",
            "--out",
            str(tmp_path / "p"),
            "--no-cache",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "percent" in pd.read_parquet(next((tmp_path / "p").glob("comm*.parquet"))).columns


def test_per_step_ranks_and_rank_summary_have_a_step_column():
    a = tracekit.load(SAMPLES / "tiny-zero2-2ranks", cache=False, jobs=1)
    ranks, summary = a.table("ranks", per_step=True), a.table("rank_summary", per_step=True)
    assert list(ranks.columns[:2]) == ["step", "rank"] and "step" in summary.columns
    mean = a.table("ranks").set_index("rank")["step_ms"]
    one_step = ranks.groupby("rank")["step_ms"].mean()  # this sample has one complete step
    assert one_step.to_dict() == pytest.approx(mean.to_dict())
    phases = a.table("phases", per_step=True)
    for (step, rank), g in phases.groupby(["step", "rank"]):
        row = ranks[(ranks["step"] == step) & (ranks["rank"] == rank)]
        assert float(row["step_ms"].iloc[0]) == pytest.approx(float(g["wall_ms"].sum()))
    buf = io.StringIO(to_csv(summary))
    assert buf.readline().startswith("step,phase,")
