"""What the MFU meta says beside the numbers: which dtypes were measured against which peak
(:func:`measured`), and the kernels that ran faster than their peak (:func:`above_peak`), so a
% of peak over 100 is never shown without a notice (:mod:`tracekit.ranks.meta`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..perf.devices import Peaks
from .state import as_str, codes_of

#: How far over 100 % a kernel's share of peak may be before it counts (float noise).
SLACK_PCT = 1e-6


#: A 0 ns activity lasted less than the trace's resolution (kineto writes microseconds): it is
#: above its peak only when its time at peak is longer than that.
RESOLUTION_NS = 1000.0


def over_peak(ns: np.ndarray, dur: np.ndarray) -> np.ndarray:
    """Per activity, whether its time at peak ``ns`` is longer than its duration ``dur`` (a
    0 ns one: than :data:`RESOLUTION_NS`): FLOPs it cannot have done in its time, or a wrong
    peak. Such an activity is kept out of MFU and % of peak (its time at peak counts as 0, so
    a group of only such activities shows an empty %) and named in the above-peak notice."""
    ns, dur = np.asarray(ns, np.float64), np.asarray(dur, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        over = np.where(dur > 0, ns * 100 > dur * (100 + SLACK_PCT), ns > RESOLUTION_NS)
    return np.isfinite(ns) & (ns > 0) & over


def measured(dtype: pd.Categorical | pd.Series, flops: np.ndarray, peaks: Peaks) -> dict[str, float | None]:
    """The dtypes that hold FLOPs, most FLOPs first, each with the dense peak TFLOP/s its FLOPs
    were measured against (None: none known)."""
    codes, dtypes = codes_of(pd.Series(dtype))
    per = np.bincount(codes, weights=flops, minlength=len(dtypes))
    order = [int(i) for i in np.argsort(-per, kind="stable") if per[i] > 0]
    return {str(dtypes[i]): (peaks.flops_peak(str(dtypes[i])) or 0) / 1e12 or None for i in order}


def above_peak(acts: pd.DataFrame, keep: np.ndarray) -> dict:
    """Over the activities of ``keep`` (those of complete steps; any that carries FLOPs or
    bytes: a compute kernel, or the memset of an op that launched no compute kernel, which then
    carries the op's FLOPs): those whose time at peak is longer than their duration, i.e. that
    ran above the peak FLOP/s (``flops``) or moved their modelled bytes above the peak
    bandwidth (``bytes``). Per kind: how many, the largest % of peak, that activity's name, op
    and dtype; {} when none did."""
    dur = (acts["end"].to_numpy() - acts["start"].to_numpy()).astype(np.float64)[keep]
    out: dict = {}
    for kind, col in (("flops", "compute_ns"), ("bytes", "memory_ns")):
        ns = acts[col].to_numpy(np.float64)[keep]
        pct = np.divide(ns * 100, dur, out=np.full(len(dur), np.nan), where=dur > 0)
        if kind == "flops":  # what MFU leaves out (a 0 ns one: an infinite rate)
            over = np.flatnonzero(over_peak(ns, dur))
        else:  # a cache can beat the bandwidth: named, kept
            over = np.flatnonzero(np.isfinite(pct) & (pct > 100 + SLACK_PCT))
        if not len(over):
            continue
        timed = over[np.isfinite(pct[over])]  # the largest % of those that lasted > 0 ns
        i = int(timed[np.argmax(pct[timed])]) if len(timed) else int(over[0])
        row = np.flatnonzero(keep)[i]
        out[kind] = {
            "kernels": len(over),
            "max_pct": round(float(pct[i]), 3) if np.isfinite(pct[i]) else None,
            "kernel": as_str(acts["name"].iloc[row : row + 1])[0],
            "op": as_str(acts["perf_op"].iloc[row : row + 1])[0],
            "dtype": as_str(acts["dtype"].iloc[row : row + 1])[0],
        }
    return out
