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

from tracekit.pipeline.peak_checks import over_peak
from tracekit.pipeline.state import str_test

from ._common import NS_PER_MS, narrow, once_per_table, text


@once_per_table
def frame(iv: pd.DataFrame) -> pd.DataFrame:
    """The perf tables' one frame of the intervals, built once per interval table: one row per
    compute kernel or activity of a modelled op, with ``step``, ``phase`` (text; none:
    unattributed), ``module`` (none: Other), ``op``, ``family``, ``shape``, ``dtype``
    (categoricals), ``batch``, ``m``, ``n``, ``k`` (-1: not a GEMM), ``compute``, ``modelled``
    (bool) and the amounts: ``calls``, ``gflop``, ``gbyte``, ``dur_ms``, ``ideal_ms``,
    ``ideal_mem_ms`` (infinite where a peak is unknown)."""
    compute = str_test(iv["group"], lambda s: s == "compute")
    modelled = str_test(iv["perf_family"], lambda s: s != "")
    keep = np.flatnonzero(compute | modelled)
    cols = {
        "step": iv["step"].to_numpy()[keep],
        "phase": text(iv["phase"], {"": "unattributed"})[keep],
        "module": text(iv["module"], {"": "Other"})[keep],
        "op": text(iv["perf_op"])[keep],
        "family": text(iv["perf_family"])[keep],
        "shape": text(iv["perf_shape"])[keep],
        "dtype": text(iv["dtype"])[keep],
        **{
            k: iv[f"gemm_{c}"].to_numpy()[keep]
            for k, c in (("batch", "b"), ("m", "m"), ("n", "n"), ("k", "k"))
        },
        "compute": compute[keep],
        "modelled": modelled[keep],
        "calls": iv["op_calls"].to_numpy()[keep],
        "gflop": iv["flops"].to_numpy()[keep] / 1e9,
        "gbyte": iv["op_bytes"].to_numpy()[keep] / 1e9,
        "dur_ms": (iv["end"].to_numpy()[keep] - iv["start"].to_numpy()[keep]) / NS_PER_MS,
        "ideal_ms": _unknown_is_inf(_within_peak(iv)[keep]) / NS_PER_MS,
        "ideal_mem_ms": _unknown_is_inf(iv["memory_ns"].to_numpy()[keep]) / NS_PER_MS,
    }
    return pd.DataFrame(cols)


def rows(intervals: pd.DataFrame, done, which: str, columns: list[str] | None = None) -> pd.DataFrame:
    """The rows of :func:`frame` in the complete steps ``done`` (None: every step) that are
    ``which``: ``compute`` kernels, activities of ``modelled`` ops, or of ``gemm`` ops; only
    ``columns`` (:func:`~._common.narrow`: a third of the time of the frame's 19) if given."""
    f = frame(intervals)
    keep = f["m"].to_numpy() >= 0 if which == "gemm" else f[which].to_numpy()
    if done is not None:
        keep = keep & np.isin(f["step"].to_numpy(), done)
    return f[keep] if columns is None else narrow(f, columns, keep)


def _within_peak(iv: pd.DataFrame) -> np.ndarray:
    """``compute_ns``, 0 where the activity ran above its peak (kept out of MFU and % of peak:
    :func:`tracekit.pipeline.peak_checks.over_peak`)."""
    ns = iv["compute_ns"].to_numpy(np.float64)
    dur = (iv["end"].to_numpy() - iv["start"].to_numpy()).astype(np.float64)
    return np.where(over_peak(ns, dur), 0.0, ns)


def _unknown_is_inf(ns: np.ndarray) -> np.ndarray:
    return np.where(np.isnan(ns), np.inf, ns)


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
