"""What the perf tables share (``gemm_shapes``, ``efficiency``, the MFU of ``phases``): the perf
model's interval columns summed per key, and the ratios computed from those sums.

The sums are table columns (``total_gflop``, ``time_ms``, ``ideal_ms``...), so a table's mean
over steps is a mean of sums and every ratio (``tflops``, ``peak_pct``, ``us_per_call``) is
recomputed from it by the table's ``finish``: a ratio of means, never a mean of ratios.
``ideal_ms`` is the time the FLOPs take at the device's peak for their dtype, ``ideal_mem_ms``
the time the bytes take at its peak bandwidth; both are infinite where a peak is unknown (the
activity's ``compute_ns``/``memory_ns`` is NaN), so a % built on them is empty, never a guess.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import str_test

from ._common import NS_PER_MS, text

#: The interval columns the perf tables read.
COLUMNS = [
    "step",
    "phase",
    "module",
    "group",
    "start",
    "end",
    "flops",
    "op_bytes",
    "op_calls",
    "compute_ns",
    "memory_ns",
    "perf_op",
    "perf_family",
    "perf_shape",
    "dtype",
    "gemm_b",
    "gemm_m",
    "gemm_n",
    "gemm_k",
]


def compute_kernels(intervals: pd.DataFrame, done) -> pd.DataFrame:
    """The perf columns of the compute activities (of the complete steps ``done``; None: of
    every step the intervals hold)."""
    keep = (intervals["group"] == "compute").to_numpy().copy()
    if done is not None:
        keep &= np.isin(intervals["step"].to_numpy(), done)
    return intervals[[c for c in COLUMNS if c in intervals.columns]][keep]


def of_modelled_ops(intervals: pd.DataFrame, done, gemms: bool = False) -> pd.DataFrame:
    """The perf columns of the activities of modelled ops (``gemms``: of GEMMs) in the complete
    steps ``done``: their compute kernels and the memsets or copies they launched (an op's
    device time)."""
    if gemms:
        keep = intervals["gemm_m"].to_numpy() >= 0
    else:
        keep = str_test(intervals["perf_family"], lambda s: s != "").copy()
    keep &= np.isin(intervals["step"].to_numpy(), done)
    return intervals[[c for c in COLUMNS if c in intervals.columns]][keep]


def amounts(iv: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per activity, the amounts the perf tables add up: ``calls``, ``gflop``, ``gbyte``,
    ``dur_ms``, ``ideal_ms``, ``ideal_mem_ms`` (infinite where the peak is unknown) and
    ``modelled`` (its op has a model)."""
    return {
        "calls": iv["op_calls"].to_numpy(),
        "gflop": iv["flops"].to_numpy() / 1e9,
        "gbyte": iv["op_bytes"].to_numpy() / 1e9,
        "dur_ms": (iv["end"] - iv["start"]).to_numpy() / NS_PER_MS,
        "ideal_ms": _unknown_is_inf(iv["compute_ns"].to_numpy()) / NS_PER_MS,
        "ideal_mem_ms": _unknown_is_inf(iv["memory_ns"].to_numpy()) / NS_PER_MS,
        "modelled": str_test(iv["perf_family"], lambda s: s != ""),
    }


def _unknown_is_inf(ns: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(ns), np.inf, ns)


def phase_text(iv: pd.DataFrame) -> pd.Categorical:
    return text(iv["phase"], {"": "unattributed"})


def ratio(num, den, scale: float = 1.0) -> np.ndarray:
    """``num / den * scale``; 0 where ``den`` is 0, NaN where ``num`` is NaN."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    out = np.divide(num * scale, den, out=np.zeros(np.broadcast(num, den).shape), where=den > 0)
    return np.where(np.isnan(num), np.nan, out)


def known(ideal, work) -> np.ndarray:
    """A time at peak as shown: NaN where the peak is unknown. That is where it is infinite
    (a per-step sum over an activity with no peak) or 0 while there is work to do (a mean over
    steps, whose aggregation counts a missing value as 0: a known peak gives work a time)."""
    ideal, work = np.asarray(ideal, float), np.asarray(work, float)
    return np.where(np.isfinite(ideal) & ((ideal > 0) | (work <= 0)), ideal, np.nan)
