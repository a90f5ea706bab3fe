"""The perf model as a person uses it: CLI peak flags, the HTML charts, compare, --paper, explain --op."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import tracekit
from tracekit.compare import compare
from tracekit.paper import with_paper
from tracekit.render.html import figures, render_report
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_ADD

BF16 = "c10::BFloat16"


def run(*args, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "tracekit.cli", *map(str, args)], capture_output=True, text=True, timeout=300
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


def gemm_trace(path, m: int, us: float, steps: int = 2):
    """``steps`` steps of one MLP GEMM (m x 11008 x 4096, bf16) taking ``us``, then an add."""
    b = TraceBuilder()
    for _ in range(steps):
        with b.step(), b.module("LlamaMLP", "model.layers.0.mlp"):
            dims = {"input_dims": [[m, 4096], [4096, 11008]], "input_types": [BF16, BF16]}
            b.kernel(GEMM_A, us, op="aten::mm", **dims)
            add = {"input_dims": [[m, 11008], [m, 11008], []], "input_types": [BF16, BF16, "Scalar"]}
            b.kernel(K_ADD, 30, op="aten::add", **add)
    return b.write(path)


@pytest.fixture(scope="module")
def naive(tmp_path_factory):
    return gemm_trace(tmp_path_factory.mktemp("a") / "rank0.pt.trace.json", 666, 289)


@pytest.fixture(scope="module")
def recompute(tmp_path_factory):
    return gemm_trace(tmp_path_factory.mktemp("b") / "rank0.pt.trace.json", 10624, 3870)


def test_peak_flags_and_their_errors(naive, tmp_path):
    doc = json.loads(run("analyze", naive, "--format", "json", "--table", "gemm_shapes", "--no-cache").stdout)
    row = doc["tables"]["gemm_shapes"][0]
    assert (row["m"], row["n"], row["k"], row["calls"]) == (666, 11008, 4096, 1.0)
    assert row["peak_pct"] == pytest.approx(2 * 666 * 11008 * 4096 / 289e-6 / 989.4e12 * 100)
    given = run(
        "analyze", naive, "--format", "json", "--table", "gemm_shapes", "--peak-tflops", "312", "--no-cache"
    )
    assert json.loads(given.stdout)["tables"]["gemm_shapes"][0]["peak_pct"] == pytest.approx(66.6, abs=0.05)
    f = tmp_path / "a800.toml"
    f.write_text('[[device]]\nname = "A800"\nmatch = ["NVIDIA H100 80GB HBM3"]\ntflops = { bf16 = 312 }\n')
    mine = json.loads(run("analyze", naive, "--format", "json", "--devices", f, "--no-cache").stdout)
    assert mine["meta"]["device"]["0"]["matched"] == "A800"
    for bad in (["--peak-tflops", "fast"], ["--peak-tflops", "bf17=3"], ["--peak-bandwidth", "-1"]):
        r = run("analyze", naive, *bad, "--no-cache", check=False)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr


def test_html_has_the_roofline_and_gemm_size_charts(naive, tmp_path):
    a = tracekit.load(naive, cache=False, jobs=1)
    figs = dict(figures(a.tables(), a.meta))
    roof = figs["roofline"]
    assert roof["layout"]["xaxis"]["type"] == "log" and roof["layout"]["yaxis"]["type"] == "log"
    points = [t for t in roof["data"] if t["mode"] == "markers"]
    roofs = [t for t in roof["data"] if t["mode"] == "lines"]
    assert {t["name"] for t in points} == {"gemm"}  # the add has no FLOPs: not on a FLOP roofline
    assert len(roofs) == 1 and max(roofs[0]["y"]) == 989.4  # bf16's dense peak
    sizes = figs["gemm_sizes"]
    assert sizes["data"][0]["x"] == [pytest.approx(2 * 666 * 11008 * 4096 / 1e9)]
    assert "m: 666" in sizes["data"][0]["text"][0]
    assert "roofline" in render_report(a.meta, a.tables())


def test_compare_gives_table_xii_and_efficiency_deltas(naive, recompute):
    a, b = (tracekit.load(p, cache=False, jobs=1) for p in (naive, recompute))
    out = compare(a, b)
    shapes = out["gemm_shapes_delta"].set_index("m")
    assert shapes.loc["666", "a_ms"] == pytest.approx(0.289) and shapes.loc["10624", "b_ms"] == pytest.approx(
        3.870
    )
    rates = out["efficiency_rates"].set_index(["phase", "module"]).loc[("forward", "MLP")]
    assert rates["b_peak_pct"] > rates["a_peak_pct"] and rates["peak_pct_delta"] == pytest.approx(
        rates["b_peak_pct"] - rates["a_peak_pct"]
    )


def test_paper_puts_table_xii_beside_the_shape(naive):
    t = with_paper({"gemm_shapes": tracekit.load(naive, cache=False, jobs=1).table("gemm_shapes")})[
        "gemm_shapes"
    ]
    row = t.set_index("m").loc[666]
    assert row["paper_us_per_call"] == 289.0 and row["paper_peak_pct"] == 66.6
    assert row["us_per_call"] == pytest.approx(289.0) and t["m"].dtype.kind == "i"


def test_explain_op_shows_shape_formula_kernels_and_peak(naive):
    out = run("explain", naive, "aten::mm", "--op", "--no-cache").stdout
    assert "perf op     aten::mm (gemm, bf16): B=1 M=666 N=11008 K=4096" in out
    assert "2·B·M·N·K = 2·1·666·11008·4096" in out and "989.4 TFLOP/s bf16" in out
    doc = json.loads(run("explain", naive, "aten::mm", "--op", "--format", "json", "--no-cache").stdout)
    perf = doc["chains"][0]["perf"]
    assert (
        perf["kernels"][0]["dur_us"] == pytest.approx(289.0)
        and perf["peak"]["matched"] == "NVIDIA H100 SXM5 80GB"
    )
