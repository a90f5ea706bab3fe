"""Every modelled op shape: FLOPs, bytes, achieved rates and % of peak (the roofline's points).

One row per (phase, op, family, shape, dtype) of the ops the perf model found (docs/metrics.md,
"FLOPs and bytes"), as TraceLens' per-shape sheets, per phase:

* ``calls`` per step; ``gflop`` and ``gbyte`` per call; ``total_gflop``, ``total_gbyte`` per step;
* ``time_ms``: the sum of the durations of its device activities per step (its kernels, and
  the memsets or copies it launched, as TraceLens counts an op's time); ``us_per_call``;
* ``tflops``, ``tbps``: achieved (per step totals over kernel time); ``intensity`` = FLOP/byte;
* ``ideal_ms`` / ``ideal_mem_ms``: the FLOPs at the dtype's peak / the bytes at the peak
  bandwidth; ``peak_pct`` = the larger (the binding roof) over time_ms x 100: how close the
  shape runs to its roofline; empty when a peak is unknown.

Rows are sorted by time, largest first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from . import _perf
from ._common import as_text, largest_first_of
from ._groups import flat_sums
from ._registry import CALLS, FLOP_PER_BYTE, GBYTE, GFLOP, MS, PCT, PERF, TBPS, TFLOPS, US, register

KEYS = ["phase", "op", "family", "shape", "dtype"]
SUMS = {
    "calls": "calls",
    "total_gflop": "gflop",
    "total_gbyte": "gbyte",
    "time_ms": "dur_ms",
    "ideal_ms": "ideal_ms",
    "ideal_mem_ms": "ideal_mem_ms",
}
#: Shown first: per call and the rates; then the sums they come from.
COLUMNS = [
    "step",
    *KEYS,
    "calls",
    "gflop",
    "gbyte",
    "time_ms",
    "us_per_call",
    "tflops",
    "tbps",
    "intensity",
    "peak_pct",
    "total_gflop",
    "total_gbyte",
    "ideal_ms",
    "ideal_mem_ms",
]


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """The ratios, from the (mean) sums; largest time first (on the columns' arrays)."""
    calls, time_ms = df["calls"].to_numpy(), df["time_ms"].to_numpy()
    flop, byte = df["total_gflop"].to_numpy(), df["total_gbyte"].to_numpy()
    ideal = _perf.known(df["ideal_ms"].to_numpy(), flop)
    ideal_mem = _perf.known(df["ideal_mem_ms"].to_numpy(), byte)
    new = {
        "gflop": _perf.ratio(flop, calls),
        "gbyte": _perf.ratio(byte, calls),
        "us_per_call": _perf.ratio(time_ms, calls, 1000.0),
        "tflops": _perf.ratio(flop, time_ms),
        "tbps": _perf.ratio(byte, time_ms),
        "intensity": _perf.ratio(flop, byte),
        "ideal_ms": ideal,
        "ideal_mem_ms": ideal_mem,
        "peak_pct": _perf.ratio(np.maximum(ideal, ideal_mem), time_ms, 100.0),
    }
    return largest_first_of(df, new, "time_ms", columns=COLUMNS)


@register(
    "op_shapes",
    needs=frozenset({PERF}),
    title="Op shapes: FLOPs, bytes, achieved rates and % of roofline",
    keys=tuple(KEYS),
    values={
        "calls": CALLS,
        "total_gflop": GFLOP,
        "total_gbyte": GBYTE,
        "time_ms": MS,
        "ideal_ms": MS,
        "ideal_mem_ms": MS,
        "gflop": GFLOP,
        "gbyte": GBYTE,
        "us_per_call": US,
        "tflops": TFLOPS,
        "tbps": TBPS,
        "intensity": FLOP_PER_BYTE,
        "peak_pct": PCT,
    },
    finish=_finish,
    derived={
        "gflop": "`total_gflop` / `calls`",
        "gbyte": "`total_gbyte` / `calls`",
        "us_per_call": "`time_ms` / `calls` x 1000",
        "tflops": "`total_gflop` / `time_ms`",
        "tbps": "`total_gbyte` / `time_ms`",
        "intensity": "`total_gflop` / `total_gbyte`",
    },
    filters=frozenset({"phase", "module"}),
    top=20,
    sort_by="time_ms",
    chart="none",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    f = _perf.rows(intervals, windows.steps["step"].to_numpy(), "modelled")
    if f.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = flat_sums(f, ["step", *KEYS], SUMS, sort=False)
    return _finish(as_text(out, KEYS))
