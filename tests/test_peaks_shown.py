"""Issue 38.6 and 38.7, planted through ``tracekit.testing``: one ``--peak-tflops`` number
does not set the tf32 peak, tf32 kernels say tf32 and are measured against their own peak, a %
of peak over 100 always comes with a notice; the terminal and Markdown name the device, the row
it matched, where the peaks came from and the peaks used."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from shared_traces import shared_trace

import tracekit
from tracekit.render import formats, terminal
from tracekit.render.html import render_report
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A

F32, BF16 = "float", "c10::BFloat16"
TF32_PEAK, BF16_PEAK = 494.7e12, 989.4e12  # the builder's H100 SXM5 (dense)
S1688 = "volta_sgemm_128x64_nn_tensorop_s1688gemm_128x128_32x1_nn"  # cuBLAS's TF32 tensor-op GEMM
SGEMM = "volta_sgemm_128x64_nn"  # an fp32 GEMM on CUDA cores
M = N = K = 1024
MM = 2 * M * N * K


def _trace(tmp_path: Path, device: str | None = None) -> Path:
    b = TraceBuilder()
    dims = {"input_dims": [[M, K], [K, N]], "input_types": [F32, F32]}
    with b.step():
        b.kernel(S1688, 20, op="aten::mm", **dims, at_us=10)  # 2.15 GFLOP in 20 us: 107 TFLOP/s
        b.kernel(SGEMM, 200, op="aten::mm", **dims, at_us=40)  # 10.7 TFLOP/s
        b.kernel(GEMM_A, 10, op="aten::mm", input_dims=[[M, K], [K, N]], input_types=[BF16, BF16], at_us=300)
    path = b.write(tmp_path / "rank0.pt.trace.json")
    if device is not None:
        doc = json.loads(path.read_text())
        doc["deviceProperties"][0]["name"] = device
        path.write_text(json.dumps(doc))
    return path


def _shapes(a) -> dict:
    g = a.table("gemm_shapes")
    return {(r.dtype, round(r.time_ms * 1000)): r for r in g.itertuples()}


def test_tf32_kernels_say_tf32_and_are_measured_against_the_tf32_peak(tmp_path) -> None:
    a = tracekit.load(_trace(tmp_path), cache=False, jobs=1)
    g = _shapes(a)
    assert set(g) == {("tf32", 20), ("fp32", 200), ("bf16", 10)}
    assert g[("tf32", 20)].peak_pct == pytest.approx(MM / TF32_PEAK / 20e-6 * 100)
    assert g[("bf16", 10)].peak_pct == pytest.approx(MM / BF16_PEAK / 10e-6 * 100)
    assert a.meta["device"][0]["measured"] == {"bf16": 989.4, "tf32": 494.7, "fp32": 67.0}


def test_one_peak_number_does_not_set_the_tf32_peak(tmp_path) -> None:
    a = tracekit.load(_trace(tmp_path), cache=False, jobs=1, peak_tflops="19.5")
    g = _shapes(a)
    assert g[("fp32", 200)].peak_pct == pytest.approx(MM / 19.5e12 / 200e-6 * 100)  # 55 %
    assert g[("tf32", 20)].peak_pct == pytest.approx(MM / TF32_PEAK / 20e-6 * 100)  # the row's, not 551 %
    dev = a.meta["device"][0]
    assert dev["peak_tflops"] == {"tf32": 494.7, "*": 19.5}
    assert dev["origin"] == "--peak-tflops over the built-in table"
    # the bf16 GEMM (215 TFLOP/s) is now measured against 19.5: 1101 %, never silently; since
    # issue 39.14 such a row is kept out of % of peak and MFU (empty), and the notice says so
    bf16 = MM / 19.5e12 / 10e-6 * 100
    assert np.isnan(g[("bf16", 10)].peak_pct)
    above = [n for n in a.meta["notices"] if "above the peak FLOP/s" in n]
    assert len(above) == 1 and f"up to {bf16:.0f}%" in above[0] and "bf16 at 19.5 TFLOP/s" in above[0]
    assert "kept out of MFU and % of peak" in above[0]


def test_an_unknown_device_with_one_number_has_no_tf32_peak_and_says_so(tmp_path) -> None:
    a = tracekit.load(_trace(tmp_path, "NVIDIA H100"), cache=False, jobs=1, peak_tflops="500")
    g = _shapes(a)
    assert g[("tf32", 20)].peak_pct != g[("tf32", 20)].peak_pct  # NaN: empty
    assert g[("fp32", 200)].peak_pct == pytest.approx(MM / 500e12 / 200e-6 * 100)
    assert any(n.startswith("no peak for tf32 (give --peak-tflops tf32=N)") for n in a.meta["notices"])
    given = tracekit.load(_trace(tmp_path, "NVIDIA H100"), cache=False, jobs=1, peak_tflops="500,tf32=250")
    assert _shapes(given)[("tf32", 20)].peak_pct == pytest.approx(MM / 250e12 / 20e-6 * 100)


def test_no_notice_when_nothing_runs_above_its_peak(tmp_path) -> None:
    a = tracekit.load(_trace(tmp_path), cache=False, jobs=1)
    assert not any("above the peak" in n for n in a.meta["notices"])
    assert "above_peak" not in a.meta["mfu"][0]


def _header(a) -> tuple[str, str]:
    out = io.StringIO()
    terminal.render(a.meta, {}, Console(file=out, width=300, highlight=False, no_color=True))
    return out.getvalue(), formats.markdown_report(a.meta, {})


def test_terminal_and_markdown_name_the_device_the_row_and_the_peaks(tmp_path) -> None:
    a = tracekit.load(_trace(tmp_path), cache=False, jobs=1)
    text, md = _header(a)
    line = (
        "device: NVIDIA H100 80GB HBM3 -> NVIDIA H100 SXM5 80GB (built-in table), "
        "bf16 989.4, fp32 67, tf32 494.7 TFLOP/s, 3.35 TB/s"  # equal FLOPs: by name
    )
    assert line in text.splitlines()
    assert "- **device**: " + formats.md_escape(line.removeprefix("device: ")) in md.splitlines()
    assert f"<li>{html.escape(line)}</li>" in render_report(a.meta, {})  # the HTML report too
    text, _ = _header(tracekit.load(_trace(tmp_path, "NVIDIA H100"), cache=False, jobs=1))
    assert "device: NVIDIA H100 -> no peak known" in text.splitlines()


def test_a100_pg509_is_named_with_its_match() -> None:
    a = tracekit.load(shared_trace("hta/trace_diff__control__control.json.gz"), cache=False, jobs=1)
    text, _ = _header(a)
    assert "device: NVIDIA A100-PG509-200 -> NVIDIA A100 SXM4 40GB (built-in table), tf32 156" in text


@pytest.mark.parametrize("rank", [0, 1])
def test_every_percent_over_100_is_covered_by_the_notice(rank) -> None:
    """HTA trace_filter with one peak number: a memset that carries its op call's FLOPs ran at
    thousands of % of 19.5 TFLOP/s; the notice names it, and (issue 39.14) such activities are
    kept out of % of peak and MFU, so no table shows a FLOP % of peak over 100."""
    path = shared_trace(f"hta/trace_filter__sampled_rank-{rank}.json.gz")
    a = tracekit.load(path, cache=False, jobs=1, peak_tflops="19.5")
    shown = max(a.table(n)["peak_pct"].max() for n in ("gemm_shapes", "efficiency", "op_shapes"))
    worst = max(k["max_pct"] for m in a.meta["mfu"].values() for k in m["above_peak"].values())
    assert worst > 100 and shown <= 100 * (1 + 1e-6)
    above = [n for n in a.meta["notices"] if "above the peak FLOP/s" in n]
    assert len(above) == 1 and "kept out of MFU and % of peak" in above[0]
