"""Efficiency per phase and module category: FLOPs, bytes, achieved rates, % of peak, the bound.

Over the compute kernels launched by the phase's ops (the modules table's categories; kernels
outside every category are ``Other``):

* ``gflop``, ``gbyte``: the perf model's FLOPs and bytes per step (docs/metrics.md);
* ``time_ms``: the sum of the durations of the kernels of modelled ops; ``unmodelled_ms``: of
  the other compute kernels (ops with no model or no recorded shapes); ``modelled_pct`` =
  time_ms / (time_ms + unmodelled_ms) x 100;
* ``tflops`` = gflop / time, ``tbps`` = gbyte / time, ``intensity`` = FLOP per byte;
* ``ideal_ms`` / ``ideal_mem_ms``: the time the FLOPs take at the device's peak for their
  dtypes / the bytes at its peak bandwidth. ``bound`` is ``compute`` when ideal_ms >=
  ideal_mem_ms, i.e. when the intensity is at or above the ridge point (peak FLOP/s over peak
  bytes/s, the peak being that of the row's mix of dtypes), else ``memory``; ``peak_pct`` is
  the binding roof's share: max(ideal_ms, ideal_mem_ms) / time_ms x 100 (the roofline's % of
  attainable). Both are empty where a peak is unknown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.taxonomy import MODULE_CATEGORIES
from tracekit.pipeline.windows import Windows

from . import _perf
from ._common import WINDOW_PHASES, as_text
from ._frames import place, rebuilt, stable_order
from ._groups import flat_sums
from ._registry import FLOP_PER_BYTE, GBYTE, GFLOP, LABEL, MS, PCT, PERF, TBPS, TFLOPS, register

KEYS = ["phase", "module"]
#: Row order: the modules table's categories, then Other.
MODULE_ROWS = [*MODULE_CATEGORIES, "Other"]
SUMS = {
    "gflop": "gflop",
    "gbyte": "gbyte",
    "time_ms": "time_ms",
    "unmodelled_ms": "unmodelled_ms",
    "ideal_ms": "ideal_ms",
    "ideal_mem_ms": "ideal_mem_ms",
}
#: Shown first: the amounts and the rates; then the sums the rates come from.
COLUMNS = [
    "step",
    *KEYS,
    "gflop",
    "gbyte",
    "time_ms",
    "tflops",
    "tbps",
    "intensity",
    "peak_pct",
    "bound",
    "modelled_pct",
    "unmodelled_ms",
    "ideal_ms",
    "ideal_mem_ms",
]


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """The ratios and the bound, from the (mean) sums; rows by phase and module category.
    Computed on the columns' arrays, the frame built once (:func:`rebuilt`)."""
    gflop, gbyte, time_ms = (df[c].to_numpy() for c in ("gflop", "gbyte", "time_ms"))
    compute = _perf.known(df["ideal_ms"].to_numpy(), gflop)
    memory = _perf.known(df["ideal_mem_ms"].to_numpy(), gbyte)
    binding = np.maximum(compute, memory)  # NaN when either is unknown
    new = {
        "tflops": _perf.ratio(gflop, time_ms),
        "tbps": _perf.ratio(gbyte, time_ms),
        "intensity": _perf.ratio(gflop, gbyte),
        "peak_pct": _perf.ratio(binding, time_ms, 100.0),
        "bound": np.where(binding > 0, np.where(compute >= memory, "compute", "memory"), ""),
        "modelled_pct": _perf.ratio(time_ms, time_ms + df["unmodelled_ms"].to_numpy(), 100.0),
        "ideal_ms": compute,
        "ideal_mem_ms": memory,
    }
    by = [df[c].to_numpy() for c in ("rank", "step") if c in df.columns]
    order = stable_order([*by, place(df["phase"], WINDOW_PHASES), place(df["module"], MODULE_ROWS)], len(df))
    return rebuilt(df, new, order, [c for c in ("rank", *COLUMNS) if c in df.columns or c in new])


@register(
    "efficiency",
    needs=frozenset({PERF}),
    title="Efficiency: achieved rates and % of peak per phase and module",
    keys=tuple(KEYS),
    values={
        "gflop": GFLOP,
        "gbyte": GBYTE,
        "time_ms": MS,
        "unmodelled_ms": MS,
        "ideal_ms": MS,
        "ideal_mem_ms": MS,
        "tflops": TFLOPS,
        "tbps": TBPS,
        "intensity": FLOP_PER_BYTE,
        "peak_pct": PCT,
        "bound": LABEL,
        "modelled_pct": PCT,
    },
    finish=_finish,
    derived={
        "tflops": "`gflop` / `time_ms`",
        "tbps": "`gbyte` / `time_ms`",
        "intensity": "`gflop` / `gbyte`",
        "bound": "`compute` when `ideal_ms` >= `ideal_mem_ms`, else `memory`",
    },
    filters=frozenset({"phase", "module"}),
    compare="time_ms",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    f = _perf.rows(intervals, windows.steps["step"].to_numpy(), "compute")
    if f.empty:
        return pd.DataFrame(columns=COLUMNS)
    on = f["modelled"].to_numpy()
    dur = f["dur_ms"].to_numpy()
    f = f.assign(time_ms=np.where(on, dur, 0.0), unmodelled_ms=np.where(on, 0.0, dur))
    out = flat_sums(f, ["step", *KEYS], SUMS, sort=False)
    return _finish(as_text(out, KEYS))
