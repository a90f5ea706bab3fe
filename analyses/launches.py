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

MTIA's launch calls (:data:`MTIA_APIS`: ``runFunction - job_prep_and_submit_for_execution``, an
execution, and ``enqueueCommand memcpyHtoDAsync`` / ``memcpyDtoHAsync``, a copy: the twins of
``cudaLaunchKernel`` and ``cudaMemcpyAsync`` on the shared MTIA trace) count as launches of
their device too.

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

from ._common import narrow
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
#: MTIA's runtime calls that launch device work (category ``mtia_runtime``, as the shared MTIA
#: trace names them): an execution and the two async copies. Counted as launches like HTA_APIS.
MTIA_APIS = (
    "runFunction - job_prep_and_submit_for_execution",
    "enqueueCommand memcpyHtoDAsync",
    "enqueueCommand memcpyDtoHAsync",
)
#: Every call whose activities ``launches`` counts.
LAUNCH_APIS = HTA_APIS + MTIA_APIS
#: Activities shorter than this (ns) are small kernels.
SMALL_NS = 10_000
KEYS = ["step", "phase", "module"]
COLUMNS = [
    *KEYS,
    "launches",
    "other_api_launches",
    "delay_ms",
    "delay_p50_us",
    "delay_p95_us",
    "host_bound",
    "host_bound_ms",
    "device_ms",
    "small_ms",
]
USED = ["step", "phase", "module", "start", "end", "runtime", "launched", "launch_ts", "launch_end", "kind"]


def _labels(col: pd.Series, empty: str) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the code of its label (missing or "" reads ``empty``); the labels, sorted."""
    cat = pd.Categorical(col)
    names = np.append(np.asarray(cat.categories, dtype=object), "")
    names[names == ""] = empty
    uniq, code = np.unique(names.astype(str), return_inverse=True)
    return code[np.asarray(cat.codes)], uniq.astype(object)


def _groups(iv: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Per row, its (step, phase, module) group; and per group its labels, sorted."""
    s_code, steps = pd.factorize(iv["step"].to_numpy(np.int64), sort=True)  # np.unique's, by hashing
    p_code, phases = _labels(iv["phase"], "unattributed")
    m_code, modules = _labels(iv["module"], "Other")
    n_p, n_m = len(phases), len(modules)
    group, uniq = pd.factorize((s_code * n_p + p_code) * n_m + m_code, sort=True)
    labels = pd.DataFrame(
        {
            "step": steps[uniq // (n_m * n_p)],
            "phase": phases[(uniq // n_m) % n_p],
            "module": modules[uniq % n_m],
        }
    )
    return group, labels


def _percentiles(group: np.ndarray, values: np.ndarray, n_groups: int, qs: tuple) -> list[np.ndarray]:
    """Per group, each quantile of ``qs`` of its ``values`` (linear interpolation; 0 for none)."""
    order = np.lexsort((values, group))
    v = values[order]
    n = np.bincount(group, minlength=n_groups)
    first = np.cumsum(n) - n
    out = []
    for q in qs:
        pos = np.maximum(n - 1, 0) * q
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
        at_lo = v[np.minimum(first + lo, max(len(v) - 1, 0))] if len(v) else np.zeros(n_groups)
        at_hi = v[np.minimum(first + hi, max(len(v) - 1, 0))] if len(v) else np.zeros(n_groups)
        out.append(np.where(n > 0, at_lo + (pos - lo) * (at_hi - at_lo), 0.0))
    return out


def _rows(iv: pd.DataFrame) -> pd.DataFrame:
    """The table's rows: per group, the sums and the delay percentiles of HTA's launches."""
    runtime = pd.Categorical(iv["runtime"])
    hta = np.isin(np.asarray(runtime.categories, dtype=object), LAUNCH_APIS)
    counted = np.append(hta, False)[np.asarray(runtime.codes)]
    start, end = iv["start"].to_numpy(np.int64), iv["end"].to_numpy(np.int64)
    call_end = iv["launch_end"].to_numpy(np.int64)
    dur = end - start
    delay = np.where(counted, np.maximum(start - call_end, 0), 0)
    bound = counted & (dur < call_end - iv["launch_ts"].to_numpy(np.int64))
    group, out = _groups(iv)
    k = len(out)

    def total(w) -> np.ndarray:
        return np.bincount(group, weights=w, minlength=k)

    def number(rows: np.ndarray) -> np.ndarray:  # (a sum of weights 1.0, exact: the same integers)
        return np.bincount(group[rows], minlength=k).astype(np.int64)

    out["launches"] = number(counted)
    out["other_api_launches"] = number(~counted)
    out["delay_ms"] = total(delay / 1e6)
    p50, p95 = _percentiles(group[counted], delay[counted] / 1e3, k, (0.5, 0.95))
    out["delay_p50_us"], out["delay_p95_us"] = p50, p95
    out["host_bound"] = number(bound)
    out["host_bound_ms"] = total(np.where(bound, dur, 0) / 1e6)
    out["device_ms"] = total(np.where(counted, dur, 0) / 1e6)
    out["small_ms"] = total(np.where(counted & (dur < SMALL_NS), dur, 0) / 1e6)
    return out


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
    out = _rows(iv)
    return out[COLUMNS]
