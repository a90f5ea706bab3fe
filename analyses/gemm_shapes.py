"""Table XII: each GEMM shape's time and % of the device's peak.

One row per (phase, op, batch, m, n, k, dtype) of the GEMMs the perf model found (the op that
owns the kernels: ``aten::mm``, ``aten::addmm``, ``aten::bmm``...; docs/metrics.md):

* ``calls``: op calls per step; ``gflop``: GFLOP per call; ``total_gflop``: per step;
* ``time_ms``: the sum of the durations of its device activities per step (its kernels, and
  the memsets or copies it launched, as TraceLens counts an op's time); ``us_per_call``;
* ``tflops``: achieved, total FLOPs over kernel time (TFLOP/s);
* ``ideal_ms``: the time its FLOPs take at the device's dense peak for the dtype (an fp32 GEMM
  on TF32 kernels: the tf32 peak); ``peak_pct`` = ideal_ms / time_ms x 100 (= tflops / peak),
  empty when the device's peak for the dtype is unknown.

Rows are sorted by time, largest first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from . import _perf
from ._common import as_text, largest_first_of
from ._groups import flat_sums
from ._registry import CALLS, GFLOP, MS, PCT, PERF, TFLOPS, US, register

KEYS = ["phase", "op", "batch", "m", "n", "k", "dtype"]
SUMS = {"calls": "calls", "total_gflop": "gflop", "time_ms": "dur_ms", "ideal_ms": "ideal_ms"}
#: Shown first: per call and the rates; then the sums they come from.
COLUMNS = [
    "step",
    *KEYS,
    "calls",
    "gflop",
    "time_ms",
    "us_per_call",
    "tflops",
    "peak_pct",
    "total_gflop",
    "ideal_ms",
]


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """The ratios, from the (mean) sums; largest time first (on the columns' arrays)."""
    calls, time_ms, flop = (df[c].to_numpy() for c in ("calls", "time_ms", "total_gflop"))
    ideal = _perf.known(df["ideal_ms"].to_numpy(), flop)
    new = {
        "gflop": _perf.ratio(flop, calls),
        "us_per_call": _perf.ratio(time_ms, calls, 1000.0),
        "tflops": _perf.ratio(flop, time_ms),  # GFLOP per ms is TFLOP/s
        "ideal_ms": ideal,
        "peak_pct": _perf.ratio(ideal, time_ms, 100.0),
    }
    return largest_first_of(df, new, "time_ms", columns=COLUMNS)


@register(
    "gemm_shapes",
    needs=frozenset({PERF}),
    title="GEMM shapes: time and % of peak",
    paper="XII",
    keys=tuple(KEYS),
    values={
        "calls": CALLS,
        "gflop": GFLOP,
        "total_gflop": GFLOP,
        "time_ms": MS,
        "us_per_call": US,
        "tflops": TFLOPS,
        "ideal_ms": MS,
        "peak_pct": PCT,
    },
    finish=_finish,
    derived={
        "gflop": "`total_gflop` / `calls`",
        "us_per_call": "`time_ms` / `calls` x 1000",
        "tflops": "`total_gflop` / `time_ms`",
    },
    filters=frozenset({"phase", "module"}),
    top=20,
    sort_by="time_ms",
    compare="time_ms",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    f = _perf.rows(intervals, windows.steps["step"].to_numpy(), "gemm")
    if f.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = flat_sums(f, ["step", *KEYS], SUMS, sort=False)
    out = as_text(out, ["phase", "op", "dtype"])
    for c in ("batch", "m", "n", "k"):
        out[c] = out[c].astype(np.int64)
    return _finish(out)
