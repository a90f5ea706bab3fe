"""gemm_shapes and efficiency on a hand-built interval table: the sums per step, and the mean
over steps whose ratios are ratios of the mean sums (never means of per-step ratios)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses import REGISTRY

from tracekit.aggregate import mean_over_steps
from tracekit.pipeline.windows import frame_windows

US = 1000  # ns
MM = 2 * 64 * 64 * 64  # FLOPs of one mm(64x64, 64x64)
PEAK = 100e12  # FLOP/s (bf16)
BW = 1e12  # bytes/s


def _windows() -> pd.DataFrame:
    rows = []
    for step, (lo, hi) in {1: (0, 100 * US), 2: (100 * US, 200 * US)}.items():
        rows.append((step, "step", lo, hi))
        rows += [(step, "forward", lo, hi), (step, "backward", hi, hi), (step, "unattributed", hi, hi)]
        rows.append((step, "optimizer", hi, hi))
    df = pd.DataFrame(rows, columns=["step", "window", "start", "end"])
    df["complete"] = True
    return df


def act(
    step,
    start_us,
    dur_us,
    *,
    flops=0.0,
    nbytes=0.0,
    calls=0.0,
    family="",
    op="",
    gemm=(-1, -1, -1, -1),
    dtype="",
    module="MLP",
    peak=True,
) -> dict:
    b, m, n, k = gemm
    return {
        "step": step, "phase": "forward", "module": module, "group": "compute",
        "start": start_us * US, "end": (start_us + dur_us) * US, "flops": flops, "op_bytes": nbytes,
        "op_calls": calls, "compute_ns": flops / PEAK * 1e9 if peak else np.nan,
        "memory_ns": nbytes / BW * 1e9 if peak else np.nan, "perf_op": op, "perf_family": family, "perf_shape": "",
        "dtype": dtype, "gemm_b": b, "gemm_m": m, "gemm_n": n, "gemm_k": k,
    }  # fmt: skip


def _intervals(peak: bool = True) -> pd.DataFrame:
    mm = {"flops": MM, "nbytes": 3 * 64 * 64 * 2, "calls": 1.0, "family": "gemm", "op": "aten::mm",
          "gemm": (1, 64, 64, 64), "dtype": "bf16", "peak": peak}  # fmt: skip
    rows = [
        act(1, 0, 10, **mm),
        act(1, 20, 10, **mm),
        act(2, 100, 30, **mm),
        act(1, 40, 5, nbytes=4096, calls=1.0, family="elementwise", op="aten::add", dtype="bf16", peak=peak),
        act(1, 50, 15),  # a compute kernel of an op with no model
    ]
    df = pd.DataFrame(rows)
    for c in ("phase", "module", "group", "perf_op", "perf_family", "perf_shape", "dtype"):
        df[c] = pd.Categorical(df[c])
    return df


def _mean(name: str, per_step: pd.DataFrame) -> pd.DataFrame:
    spec = REGISTRY[name]
    return spec.finish(mean_over_steps(per_step, 2, list(spec.keys)))


def test_gemm_shapes_per_step_and_mean() -> None:
    per_step = REGISTRY["gemm_shapes"].func(_intervals(), frame_windows(_windows()))
    one = per_step[per_step["step"] == 1].iloc[0]
    assert (one["op"], one["batch"], one["m"], one["n"], one["k"], one["dtype"]) == (
        "aten::mm",
        1,
        64,
        64,
        64,
        "bf16",
    )
    assert one["calls"] == 2 and one["gflop"] == pytest.approx(MM / 1e9)
    assert one["time_ms"] == pytest.approx(0.020) and one["us_per_call"] == pytest.approx(10.0)
    assert one["tflops"] == pytest.approx(2 * MM / 20e-6 / 1e12)
    assert one["peak_pct"] == pytest.approx(2 * MM / PEAK / 20e-6 * 100)
    mean = _mean("gemm_shapes", per_step).iloc[0]
    assert mean["calls"] == 1.5 and mean["time_ms"] == pytest.approx(0.025)
    assert mean["tflops"] == pytest.approx(3 * MM / 50e-6 / 1e12)  # all FLOPs over all time
    assert mean["peak_pct"] == pytest.approx(3 * MM / PEAK / 50e-6 * 100)
    assert mean["us_per_call"] == pytest.approx(50 / 3)


def test_efficiency_rows_bound_and_modelled_share() -> None:
    per_step = REGISTRY["efficiency"].func(_intervals(), frame_windows(_windows()))
    one = per_step[per_step["step"] == 1].set_index("module").loc["MLP"]
    assert one["gflop"] == pytest.approx(2 * MM / 1e9)
    assert one["gbyte"] == pytest.approx((2 * 3 * 64 * 64 * 2 + 4096) / 1e9)
    assert one["time_ms"] == pytest.approx(0.025) and one["unmodelled_ms"] == pytest.approx(0.015)
    assert one["modelled_pct"] == pytest.approx(25 / 40 * 100)
    compute, memory = 2 * MM / PEAK * 1e3, (2 * 3 * 64 * 64 * 2 + 4096) / BW * 1e3  # ms at peak
    assert one["intensity"] == pytest.approx(2 * MM / (2 * 3 * 64 * 64 * 2 + 4096))
    assert one["bound"] == ("compute" if compute >= memory else "memory")
    assert one["peak_pct"] == pytest.approx(max(compute, memory) / 0.025 * 100)
    mean = _mean("efficiency", per_step).set_index("module").loc["MLP"]
    assert mean["time_ms"] == pytest.approx(0.055 / 2) and mean["tflops"] == pytest.approx(
        3 * MM / 55e-6 / 1e12
    )


def test_unknown_peaks_leave_the_percentages_empty() -> None:
    iv = _intervals(peak=False)
    shapes = REGISTRY["gemm_shapes"].func(iv, frame_windows(_windows()))
    assert (
        shapes["peak_pct"].isna().all() and shapes["ideal_ms"].isna().all() and (shapes["tflops"] > 0).all()
    )
    eff = REGISTRY["efficiency"].func(iv, frame_windows(_windows()))
    assert eff["peak_pct"].isna().all() and (eff["bound"] == "").all()
    assert _mean("gemm_shapes", shapes)["peak_pct"].isna().all()
