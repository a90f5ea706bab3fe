"""The table registry and the views built on it: top kernels, layers, filters, many ranks,
terminal width, integer counts, the HTML report of multi-rank runs, Markdown."""

from __future__ import annotations

import copy
import json
import re
import shutil
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from rich.console import Console
from tracekit.analyses import REGISTRY, TABLES
from tracekit.analyses import layers as layers_table
from tracekit.analyses import ranks as ranks_table
from tracekit.analyses.top_kernels import short_name

import tracekit
from tracekit.cli import main
from tracekit.filters import Filters, parse_steps
from tracekit.pipeline.windows import frame_windows
from tracekit.render import formats
from tracekit.render.charts import SPECIAL
from tracekit.render.html import figures, render_report
from tracekit.render.terminal import render
from tracekit.testing import llama_training, write_trace

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    t, truth = llama_training(n_layers=3, n_steps=3, seed=5)
    path = write_trace(tmp_path_factory.mktemp("views") / "t.json", t)
    return tracekit.load(path, cache=False), truth


def _terminal(meta, tables, width=80, **kw) -> str:
    buf = StringIO()
    render(meta, tables, Console(file=buf, width=width, force_terminal=False), **kw)
    return buf.getvalue()


# --- the registry -------------------------------------------------------------------------------


def test_every_table_is_declared_with_units_for_its_columns(run):
    a, _ = run
    assert set(TABLES) <= set(REGISTRY)
    for name, df in a.tables().items():
        spec = REGISTRY[name]
        # a chart kind, or a table drawn by its own function (the memory and path timelines)
        assert spec.title and (spec.chart in ("bar", "stacked", "none") or name in SPECIAL), name
        for c in df.columns:  # every column is a key, a label of the row, or a declared value
            assert c in spec.values or c in spec.keys or c in ("rank", "stage", "step"), (name, c)


def test_counts_are_whole_per_step_and_keep_their_fraction_in_the_mean(run):
    """A count per step is a whole number (JSON int); the mean over steps keeps its fraction,
    so that count x mean duration = total, and a count never reads 0 beside time."""
    a, _ = run
    per = json.loads(formats.to_json(a.meta, a.tables(per_step=True)))["tables"]
    counts = [r["count"] for t in ("comm", "top_kernels", "layers") for r in per[t]]
    assert counts and all(type(c) is int for c in counts)
    kernels = per["kernels"]
    assert all(r["count"] is None for r in kernels if r["group"] == "idle")  # idle: no activities
    assert all(type(r["count"]) is int for r in kernels if r["group"] != "idle")
    for name, df in a.tables().items():
        spec = REGISTRY[name]
        for c, unit in spec.values.items():
            if unit == "count" and c in df and spec.source is None:
                assert df[c].dtype == np.float64, (name, c)


def test_a_count_never_reads_zero_beside_time():
    """tiny-infer's steps differ (prefill, decode): a kernel run 2 times in 8 steps is 0.25 per
    step, shown as 0.25 (it read 0 when counts were rounded), and count x mean = total."""
    a = tracekit.load(SAMPLES / "tiny-infer", cache=False, jobs=1)
    top = a.table("top_kernels")
    assert (top["count"] > 0).all()
    np.testing.assert_allclose(top["count"] * top["mean_us"] / 1000, top["total_ms"], rtol=1e-9)
    half = top[(top["name"] == "aten::mul") & (top["module"] == "MLP")]
    assert half["count"].tolist() == [0.25]  # the sample recorded with --profile-memory
    out = _terminal(a.meta, {"top_kernels": top}, width=160)
    row = next(line for line in out.splitlines() if "│ mul " in line and "MLP" in line)
    assert re.search(r"│ +0\.25 │", row), row
    assert "count (/step)" in " ".join(out.split())


def test_a_new_table_is_one_registration(run, monkeypatch):
    """Registering a table adds it to tables(), to every format and to the CLI's choices."""
    from tracekit.analyses import _registry

    a, _ = run

    def per_step_streams(intervals, steps):
        g = intervals.groupby(["step", "stream"]).size().rename("count").reset_index()
        return g.assign(stream=g["stream"].astype(str))

    spec = _registry.TableSpec(
        name="streams",
        title="Activities per stream",
        func=per_step_streams,
        keys=("stream",),
        values={"count": _registry.COUNT},
    )
    monkeypatch.setitem(REGISTRY, "streams", spec)
    monkeypatch.setitem(TABLES, "streams", per_step_streams)
    b = a.filtered(Filters())
    got = b.tables()
    assert "streams" in got and got["streams"]["count"].dtype == np.float64  # a mean per step
    assert "Activities per stream" in " ".join(_terminal(b.meta, {"streams": got["streams"]}).split())
    assert "### Activities per stream" in formats.markdown_report(b.meta, got)


# --- top kernels --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, short",
    [
        (
            (
                "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
            ),
            "vectorized_elementwise_kernel<CUDAFunctor_add>",
        ),
        (
            (
                "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, "
                "unsigned long)"
            ),
            "multimem_all_reduce_kernel<BFloat16>",
        ),
        (
            (
                "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long)"
            ),
            "fused_add_rms_norm_kernel<BFloat16>",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
        ),
        ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
        ("nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT", "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT"),
        ("aten::mm", "mm"),
    ],
)
def test_short_kernel_names(name, short):
    assert short_name(name) == short


def test_top_kernels_reconcile_and_keep_full_names(run):
    a, _truth = run
    per = a.table("top_kernels", per_step=True)
    iv = a.intervals
    for step, g in per.groupby("step"):
        acts = iv[iv["step"] == step]
        assert g["count"].sum() == len(acts)
        assert g["total_ms"].sum() == pytest.approx((acts["end"] - acts["start"]).sum() / 1e6)
    mean = a.table("top_kernels")
    assert list(mean["total_ms"]) == sorted(mean["total_ms"], reverse=True)
    row = mean.iloc[0]
    assert row["mean_us"] == pytest.approx(row["total_ms"] * 1000 / row["count"])
    assert set(mean["name"]) <= set(iv["name"].astype(str)) | {"(other kernels)"}


# --- layers -------------------------------------------------------------------------------------


def _layer_intervals(
    times: dict[tuple[str, int], float], passes: int = 1
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Compute kernels: one per (phase, layer), of ``ms`` each, in every forward pass; ``layer``
    is the decoder layer's index, as the pipeline assigns it (the same in every pass)."""
    rows, t = [], 0
    for p in range(passes):
        for (phase, layer), ms in times.items():
            rows.append(
                {
                    "step": 1,
                    "fwd_pass": p,
                    "layer": layer,
                    "phase": phase,
                    "group": "compute",
                    "stage": "",
                    "start": t,
                    "end": t + int(ms * 1e6),
                    "count": 1,
                }
            )
            t += int(ms * 1e6) + 10
    iv = pd.DataFrame(rows)
    iv = pd.concat([iv, iv.iloc[:1].assign(layer=-1, start=t, end=t + 5)], ignore_index=True)
    windows = pd.DataFrame(
        {"step": [1], "window": ["step"], "start": [0], "end": [t + 5], "complete": [True]}
    )
    return iv, frame_windows(windows)


def test_layers_show_the_slow_layer():
    times = {("forward", i): 1.0 for i in range(4)} | {("backward", i): 2.0 for i in range(4)}
    times[("forward", 2)] = 3.0
    times[("recompute", 1)] = 0.5
    iv, windows = _layer_intervals(times, passes=2)
    # recomputed forward work runs inside backward: the pipeline's `recompute` column says so
    iv["recompute"] = iv["phase"] == "recompute"
    iv.loc[iv["recompute"], "phase"] = "backward"
    t = layers_table.table(iv, windows)
    fwd = t[t["phase"] == "forward"].set_index("layer")
    assert list(fwd.index) == [0, 1, 2, 3]
    assert fwd.loc[2, "time_ms"] == pytest.approx(6.0)  # two passes of 3 ms
    assert fwd.loc[2, "vs_mean_pct"] == pytest.approx((3.0 / 1.5 - 1) * 100)
    assert list(dict.fromkeys(t["phase"])) == ["forward", "recompute", "backward"]
    s = layers_table.spread(t).set_index("phase")
    assert s.loc["forward", "slowest_layer"] == 2 and s.loc["forward", "layers"] == 4
    assert s.loc["forward", "max_ms"] == pytest.approx(6.0)
    assert s.loc["backward", "slowest_over_mean_pct"] == pytest.approx(0.0)


def test_layers_of_a_real_run(run):
    a, _truth = run
    t = a.table("layers")
    assert sorted(t.loc[t["phase"] == "forward", "layer"]) == list(range(3))


# --- filters ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, steps", [("3-7", (3, 4, 5, 6, 7)), ("2,4,9", (2, 4, 9)), ("1-2, 8", (1, 2, 8)), ("5", (5,))]
)
def test_parse_steps(text, steps):
    """Ranges as written, resolved against the steps a run has (never expanded)."""
    ranges = parse_steps(text)
    assert Filters(step_ranges=ranges).resolved(steps=range(20)).steps == steps
    assert Filters(step_ranges=ranges).resolved(steps=[*steps, 99]).steps == steps


@pytest.mark.parametrize("bad", ["3-", "a", "7-3", ""])
def test_parse_steps_refuses(bad):
    with pytest.raises(ValueError):
        parse_steps(bad)


def test_step_filter_selects_steps_and_says_so(run):
    a, truth = run
    first = truth.steps[0]
    f = a.filtered(Filters(steps=(first,)))
    assert set(f.table("phases", per_step=True)["step"]) == {first}
    one = a.table("phases", per_step=True)
    one = one[one["step"] == first].drop(columns="step").reset_index(drop=True)
    pd.testing.assert_frame_equal(
        f.table("phases").reset_index(drop=True), one, check_dtype=False, check_categorical=False
    )
    assert f.meta["filters"]["steps"] == [first]
    assert "filters" not in a.meta


def test_phase_and_module_filters(run):
    a, _ = run
    f = a.filtered(Filters(phase="backward"))
    assert set(f.table("phases")["phase"].astype(str)) == {"backward"}
    assert set(f.table("top_kernels")["phase"]) <= {"backward", ""}
    assert "idle" in f.meta["filters"]["tables_left_out"] and "idle" not in f.tables()
    m = a.filtered(Filters(module="bmm0,softmax,bmm1"))  # the naive attention core
    assert set(m.table("modules")["module"].astype(str)) == {"Bmm0", "Softmax", "Bmm1"}
    assert set(m.table("top_kernels")["module"]) == {"Bmm0", "Softmax", "Bmm1"}
    assert m.meta["filters"]["module"] == ["Bmm0", "Softmax", "Bmm1"]
    assert "phases" in m.meta["filters"]["tables_left_out"]


def test_cli_filters_and_table_choice(run, tmp_path):
    a, truth = run
    path = a.path
    r = CliRunner().invoke(
        main,
        [
            "analyze",
            path,
            "--format",
            "json",
            "--table",
            "top_kernels",
            "--table",
            "phases",
            "--steps",
            f"{truth.steps[0]}-{truth.steps[1]}",
            "--phase",
            "forward",
        ],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert list(doc["tables"]) == ["phases", "top_kernels"]
    assert doc["meta"]["filters"]["steps"] == truth.steps[:2]
    bad = CliRunner().invoke(main, ["analyze", path, "--steps", "x"])
    assert bad.exit_code == 2 and "--steps" in bad.output and "Traceback" not in bad.output
    one = CliRunner().invoke(main, ["analyze", path, "--table", "ranks"])
    assert one.exit_code == 2 and "several ranks" in one.output


# --- terminal -----------------------------------------------------------------------------------


def test_terminal_fits_80_columns_and_never_cuts_numbers(run):
    a, _ = run
    tables = a.tables()
    out = _terminal(a.meta, tables, width=80)
    assert max(len(line) for line in out.splitlines()) <= 80
    rows = [line for line in out.splitlines() if line.startswith(("┏", "┃", "│", "└"))]
    assert rows and all(line.endswith(("┓", "┃", "│", "┘")) for line in rows)  # no table cut
    for name in ("phases", "idle", "gemm"):  # every number of these tables is printed whole
        for v in tables[name].select_dtypes("number").to_numpy().ravel():
            if pd.isna(v):  # empty (NaN: no FLOPs known without shapes) is shown blank
                continue
            assert f"{v:,.3f}" in out or f"{v:,.1f}" in out, (name, v)
    assert "wall (ms)" in out.replace("\n", " ") or "wall" in out
    assert "…" not in "".join(line for line in out.splitlines() if line.startswith("┃"))


def test_terminal_per_step_header_and_wide(run):
    a, _ = run
    r = CliRunner().invoke(main, ["analyze", a.path, "--per-step", "--table", "phases"])
    assert r.exit_code == 0 and "per step" in r.output and "mean per" not in r.output
    long = "void at::native::very_long_kernel_name<" + "x" * 80 + ">(int)"
    df = pd.DataFrame(
        {
            "name": [long],
            "category": ["GEMM"],
            "module": ["MLP"],
            "phase": ["forward"],
            "count": [3],
            "total_ms": [1.5],
            "mean_us": [500.0],
            "percent": [10.0],
        }
    )
    narrow = _terminal({"path": "t"}, {"top_kernels": df}, width=80)
    wide = _terminal({"path": "t"}, {"top_kernels": df}, width=80, wide=True)
    assert "very_long_ke" in narrow and "void" not in narrow and long not in narrow
    assert long in wide


def test_inference_hides_all_zero_phase_rows(tmp_path):
    d = tmp_path / "infer"
    shutil.copytree(SAMPLES / "tiny-infer", d)
    a = tracekit.load(d, cache=False)
    tables = a.tables()
    assert (tables["phases"]["phase"].astype(str) == "backward").any()  # in the data
    out = _terminal(a.meta, {"phases": tables["phases"], "modules": tables["modules"]}, width=100)
    body = "\n".join(line for line in out.splitlines() if line.startswith("│"))
    assert "backward" not in body and "optimizer" not in body and "all-zero rows hidden" in out
    assert "forward" in body


# --- many ranks ---------------------------------------------------------------------------------


def test_rank_summary_names_stragglers_at_512_ranks():
    rng = np.random.default_rng(0)
    by_rank = {}
    for r in range(512):
        wall = {"forward": 10 + rng.normal(0, 0.05), "backward": 20 + rng.normal(0, 0.05), "optimizer": 2.0}
        if r in (77, 301):
            wall["backward"] += 5.0 if r == 77 else 3.0
        by_rank[r] = pd.DataFrame(
            {
                "phase": list(wall),
                "wall_ms": list(wall.values()),
                "compute_ms": 1.0,
                "comm_ms": 0.5,
                "exposed_comm_ms": 0.2,
                "idle_ms": 0.1,
            }
        )
    t = ranks_table.tables(by_rank)
    step = t["rank_summary"].set_index("phase").loc["step"]
    assert step["slowest_rank"] == 77 and step["stragglers"].startswith("77 (+")
    assert "301 (+" in step["stragglers"] and step["stragglers"].count("(+") == 2
    assert step["median_ms"] == pytest.approx(t["ranks"]["step_ms"].median())
    out = _terminal({"path": "job"}, t, width=80)
    rows = [line for line in out.splitlines() if re.match(r"│\s+\d+ │", line)]
    assert len(rows) <= 2 * 16  # top 16 ranks (twice if split), not 512
    assert "top 16 of 512 rows" in out


def test_no_straggler_reads_none_in_every_output(tmp_path):
    """sample_traces/tiny-zero2-2ranks: two ranks are never stragglers of each other (their
    median absolute deviation is their whole difference); the cell says so in every output."""
    d = tmp_path / "z2"
    shutil.copytree(SAMPLES / "tiny-zero2-2ranks", d)
    s = tracekit.load(d, cache=False, jobs=1).table("rank_summary")
    # 7 measures: the phases with time (no unattributed row: neither rank has any), step,
    # compute, exposed communication, idle
    assert list(s["stragglers"]) == ["none"] * len(s) and len(s) == 7
    assert ranks_table.straggler_text([]) == "none"
    assert ranks_table.straggler_text([(3, 12.04), (7, 4.1)]) == "3 (+12.0%), 7 (+4.1%)"
    base = ["analyze", str(d), "--table", "rank_summary", "-j", "1"]
    runner = CliRunner()
    term = runner.invoke(main, [*base, "--wide"], terminal_width=200)
    assert term.exit_code == 0, term.output
    rows = [line for line in term.output.splitlines() if line.startswith("│ step ")]
    assert len(rows) == 1 and rows[0].rstrip("│ ").endswith("none"), term.output
    md = runner.invoke(main, [*base, "--format", "md"])
    assert re.search(r"^\| step \|.*\| none \|$", md.output, re.M), md.output
    r = runner.invoke(main, [*base, "--format", "csv", "--out", str(tmp_path / "csv")])
    assert r.exit_code == 0, r.output
    lines = (tmp_path / "csv" / "rank_summary.csv").read_text().splitlines()
    assert lines[0].endswith(",stragglers") and all(line.endswith(",none") for line in lines[1:])
    r = runner.invoke(main, [*base, "--format", "html", "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    html = (tmp_path / "r.html").read_text()
    assert html.count("<td>none</td>") >= 7


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory):
    """64 rank files of one synthetic run; rank 17 has a 30 ms longer optimizer step."""
    d = tmp_path_factory.mktemp("ranks64")
    base, _ = llama_training(n_layers=1, n_steps=2, seed=3, comm=False)
    for r in range(64):
        t = copy.deepcopy(base)
        t["distributedInfo"] = {"rank": r, "world_size": 64, "backend": "nccl"}
        for ev in t["traceEvents"]:
            if isinstance(ev, dict) and ev.get("pid") is not None and isinstance(ev.get("pid"), int):
                ev["pid"] = ev["pid"] + 1000 * r
        if r == 17:
            kern = [e for e in t["traceEvents"] if isinstance(e, dict) and e.get("cat") == "kernel"]
            last = max(kern, key=lambda e: e["ts"] + e["dur"])
            last["dur"] += 30_000.0
        write_trace(d / f"rank{r}.pt.trace.json", t)
    return d


def test_many_ranks_summary_and_html(rank_dir, tmp_path):
    a = tracekit.load(rank_dir, cache=False, jobs=1)
    assert len(a.ranks) == 64
    s = a.table("rank_summary").set_index("phase")
    assert s.loc["step", "slowest_rank"] == 17 and s.loc["step", "stragglers"].startswith("17 (+")
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["analyze", str(rank_dir), "--format", "html", "--out", str(out), "-j", "1"])
    assert r.exit_code == 0, r.output
    text = out.read_text()
    assert "Step time per rank" in text and "Inference timeline" not in text


# --- HTML and Markdown --------------------------------------------------------------------------


def test_html_of_a_two_rank_run(tmp_path):
    d = tmp_path / "z2"
    shutil.copytree(SAMPLES / "tiny-zero2-2ranks", d)
    r = CliRunner().invoke(main, ["analyze", str(d), "--format", "html", "--out", str(tmp_path / "z.html")])
    assert r.exit_code == 0, r.output
    text = (tmp_path / "z.html").read_text()
    assert "Step time per rank" in text and "devices: " not in text  # CPU run: no empty devices
    assert "Forward timeline (Table XI)" in text and "Inference timeline" not in text


def test_compare_chart_shows_the_largest_differences(run):
    _a, _ = run
    df = pd.DataFrame(
        {
            "phase": ["forward"] * 42,
            "module": [f"m{i}" for i in range(42)],
            "a_ms": 1.0,
            "b_ms": [1.0 + i for i in range(42)],
        }
    )
    df["delta_ms"] = df["b_ms"] - df["a_ms"]
    figs = dict(figures({"modules_delta": df}))
    bars = figs["modules_delta"]["data"][0]
    assert len(bars["y"]) == 15 and "forward / m41" in bars["y"]
    # m0 did not change (B - A = 0): 41 differences
    assert "largest 15 of 41" in figs["modules_delta"]["layout"]["title"]["text"]


def test_html_hides_zero_rows_and_keeps_escaping(run):
    a, _ = run
    tables = a.tables()
    text = render_report(a.meta, {"modules": tables["modules"]})
    assert "all-zero row" in text
    assert 'title="time_ms"' in text and "time (ms)" in text


def test_markdown_reads_well(run):
    a, _ = run
    md = formats.markdown_report(a.meta, a.tables())
    lines = md.splitlines()
    assert lines[0].startswith("# tracekit: ") and any(x.startswith("- **mode**") for x in lines)
    assert "| phase | wall (ms) | % |" in md and "### Top kernels" in md
    kernels = md.split("### Kernel categories")[1].split("###")[0]
    rows = [line.split("|") for line in kernels.splitlines() if line.startswith("| ")][1:]
    counts = [r[3].strip() for r in rows if r[1].strip() != "idle"]
    assert counts and all(re.fullmatch(r"[\d,]+", c) for c in counts)
    assert [r[3].strip() for r in rows if r[1].strip() == "idle"] == [""]  # idle: no activities
