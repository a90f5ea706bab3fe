"""Launch overhead per step, phase and module: HolisticTraceAnalysis 0.5's launch statistics.

The launches counted are HTA's (``get_cuda_kernel_launch_stats``): device activities whose
runtime call is one of :data:`HTA_APIS` (``cudaLaunchKernel``, ``cudaLaunchKernelExC``,
``cudaMemcpyAsync``, ``cudaMemsetAsync`` and their ``hip*`` twins). Over them, per row:

* ``launches``: their number;
* ``delay_ms``, ``delay_mean_us``, ``delay_p50_us``, ``delay_p95_us``: launch delay = the
  activity's start minus the end of its runtime call, clipped at 0 (HTA's ``launch_delay``):
  the total, the mean (delay_ms / launches) and the median and 95th percentile (linear
  interpolation) of the step's launches;
* ``host_bound``, ``host_bound_ms``: activities shorter than their launch call (HTA's short
  GPU kernels: gpu_duration < cpu_duration), and their device time;
* ``device_ms``: their device time; ``small_ms``: that of activities under 10 us;
  ``small_kernel_pct`` = small_ms / device_ms x 100.

``other_api_launches``: launched activities whose call is another API (``cuLaunchKernel`` from
Triton, ``cudaGraphLaunch``, ``cudaMemcpy``...), counted apart as HTA leaves them out. No total
rows: a step's figure is the sum of its rows. Percentiles do not add, so the mean view averages
each row over the steps that hold it (``present-mean``). A trace without runtime calls has no
rows (:func:`analyses.idle_causes.has_launches`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._common import as_text, narrow, text
from ._registry import COUNT, MS, PCT, PRESENT_MEAN, US, Ratio, register
from .idle_causes import has_launches

#: The launch APIs HTA's launch statistics count (with memory events, its default).
HTA_APIS = (
    "cudaLaunchKernel",
    "cudaLaunchKernelExC",
    "cudaMemcpyAsync",
    "cudaMemsetAsync",
    "hipLaunchKernel",
    "hipLaunchKernelExC",
    "hipMemcpyAsync",
    "hipMemsetAsync",
)
#: Activities shorter than this (ns) are small kernels.
SMALL_NS = 10_000
KEYS = ["step", "phase", "module"]
SUMS = ["launches", "other_api_launches", "delay_ms", "host_bound", "host_bound_ms", "device_ms", "small_ms"]
COLUMNS = KEYS + SUMS[:3] + ["delay_p50_us", "delay_p95_us"] + SUMS[3:]
USED = ["step", "phase", "module", "start", "end", "runtime", "launched", "launch_ts", "launch_end", "kind"]


def _frame(iv: pd.DataFrame) -> pd.DataFrame:
    """One row per launched activity: its keys, whether HTA counts it, delay and durations."""
    runtime = iv["runtime"].astype("category")
    hta = np.isin(runtime.cat.categories.astype(str), HTA_APIS)
    counted = np.append(hta, False)[runtime.cat.codes.to_numpy()]
    start, end = iv["start"].to_numpy(np.int64), iv["end"].to_numpy(np.int64)
    call = iv["launch_end"].to_numpy(np.int64) - iv["launch_ts"].to_numpy(np.int64)
    dur = end - start
    delay = np.where(counted, np.maximum(start - iv["launch_end"].to_numpy(np.int64), 0), 0)
    bound = counted & (dur < call)
    return pd.DataFrame(
        {
            "step": iv["step"].to_numpy(),
            "phase": text(iv["phase"], {"": "unattributed"}),
            "module": text(iv["module"], {"": "Other"}),
            "launches": counted.astype(np.int64),
            "other_api_launches": (~counted).astype(np.int64),
            "delay_ms": delay / 1e6,
            "delay_us": delay / 1e3,
            "host_bound": bound.astype(np.int64),
            "host_bound_ms": np.where(bound, dur, 0) / 1e6,
            "device_ms": np.where(counted, dur, 0) / 1e6,
            "small_ms": np.where(counted & (dur < SMALL_NS), dur, 0) / 1e6,
            "counted": counted,
        }
    )


@register(
    "launches",
    title="Launch overhead (HTA launch stats)",
    keys=("phase", "module"),
    values={
        "launches": COUNT,
        "other_api_launches": COUNT,
        "delay_ms": MS,
        "delay_mean_us": US,
        "delay_p50_us": US,
        "delay_p95_us": US,
        "host_bound": COUNT,
        "host_bound_ms": MS,
        "device_ms": MS,
        "small_ms": MS,
        "small_kernel_pct": PCT,
    },
    ratios={
        "delay_mean_us": Ratio("delay_ms", "launches", scale=1000.0),
        "small_kernel_pct": Ratio("small_ms", "device_ms"),
    },
    aggregate=PRESENT_MEAN,
    sort_by="launches",
    top=20,
    chart="none",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    if not has_launches(intervals):
        return pd.DataFrame(columns=COLUMNS)
    mask = intervals["launched"].to_numpy(bool) & intervals["step"].isin(windows.steps["step"]).to_numpy()
    iv = narrow(intervals, USED, mask)
    if iv.empty:
        return pd.DataFrame(columns=COLUMNS)
    f = _frame(iv)
    out = f.groupby(KEYS, observed=True)[SUMS].sum()
    hta = f[f["counted"].to_numpy()]
    by = hta["delay_us"].groupby([hta[k] for k in KEYS], observed=True)
    q = by.quantile([0.5, 0.95]).unstack()
    out["delay_p50_us"] = q[0.5].reindex(out.index).fillna(0.0) if len(q) else 0.0
    out["delay_p95_us"] = q[0.95].reindex(out.index).fillna(0.0) if len(q) else 0.0
    out = as_text(out.reset_index(), ["phase", "module"])
    return out[COLUMNS]
