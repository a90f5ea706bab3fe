"""Tables V and VII: forward / backward / optimizer wall time and compute-kernel time.

Per step and phase:

* ``wall_ms``: the phase's span on the device timeline. Forward runs from the step's first
  device activity to the first backward activity, backward from there to the first activity
  with no phase evidence (``unattributed``, a row only where there is some) or else the first
  optimizer activity, optimizer from there to the step's last device end (absent phases are
  empty).
* ``percent``: wall_ms / step window x 100 (the rows add up to 100; for the mean, of the mean
  wall over the mean window: :class:`~analyses._registry.Ratio`).
* ``compute_ms``: measure of the union of the compute kernels launched by the phase's ops.
* ``comm_ms``: measure of the union of the communication kernels launched by the phase's ops.
* ``exposed_comm_ms``: measure, inside the phase window, of (union of all communication)
  minus (union of all compute): communication nothing hides.
* ``recompute_ms``: the part of ``compute_ms`` that is activation recomputation (forward
  modules run again inside backward); non-zero only in backward.
* ``idle_ms``: measure of the phase window minus the union of all device activities.
* ``gflop``: the perf model's FLOPs of the compute kernels launched by the phase's ops
  (docs/metrics.md); ``ideal_ms``: the time they take at the device's peak for their dtypes;
  ``mfu_pct`` = ideal_ms / wall_ms x 100: the model FLOPs utilisation of the phase (of the
  step: its rows' ideal_ms over their wall_ms), empty when the device's peak is unknown.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from . import _perf
from ._common import (
    WINDOW_PHASES,
    labelled_spans,
    phases_present,
    window_shares,
)
from ._groups import sums_at, unions_ms_at
from ._registry import GFLOP, MS, PCT, STEP_WINDOW, Ratio, register


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """``mfu_pct`` from the (mean) sums: a ratio of means (none in a run without the perf
    model: its FLOP columns are left out, :func:`table`)."""
    if "gflop" not in df:
        return df
    df = df.copy()
    df["ideal_ms"] = _perf.known(df["ideal_ms"], df["gflop"])
    df["mfu_pct"] = _perf.ratio(df["ideal_ms"], df["wall_ms"], 100.0)
    return df


def _flops(intervals: pd.DataFrame, idx: list) -> tuple[np.ndarray, np.ndarray]:
    """Per (step, phase) of ``idx``: GFLOP and their time at peak (ms, infinite if unknown)."""
    cols = ["step", "phase", "gflop", "ideal_ms"]
    s = sums_at(_perf.rows(intervals, None, "compute", cols), cols[:2], cols[2:], idx)
    return s["gflop"], s["ideal_ms"]


def _recomputed(iv: pd.DataFrame):
    return iv["recompute"].to_numpy(bool) if "recompute" in iv else np.zeros(len(iv), bool)


@register(
    "phases",
    title="Phases: forward / backward / optimizer",
    paper="V, VII",
    keys=("phase",),
    chart="stacked",
    compare="wall_ms",
    finish=_finish,
    ratios={"percent": Ratio("wall_ms", STEP_WINDOW)},
    values={
        "wall_ms": MS,
        "percent": PCT,
        "compute_ms": MS,
        "comm_ms": MS,
        "exposed_comm_ms": MS,
        "recompute_ms": MS,
        "idle_ms": MS,
        "gflop": GFLOP,
        "ideal_ms": MS,
        "mfu_pct": PCT,
    },
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    win = windows.phases
    win = win[win["phase"].isin(phases_present(intervals, windows)).to_numpy()]
    key = ["step", "phase"]
    shares = window_shares(intervals)
    labelled = labelled_spans(intervals)
    is_compute = (intervals["group"] == "compute").to_numpy()
    idx = list(zip(win["step"].to_numpy(), win["phase"].to_numpy()))
    is_comm = (intervals["group"] == "comm").to_numpy()
    compute, comm, recompute = unions_ms_at(
        labelled, key, idx, [is_compute, is_comm, is_compute & _recomputed(intervals)]
    )
    busy = sums_at(shares, key, ["share_ms"], idx)["share_ms"]
    exposed = sums_at(shares[(shares["group"] == "comm").to_numpy()], key, ["share_ms"], idx)["share_ms"]

    out = pd.DataFrame(
        {
            "step": win["step"].to_numpy(),
            "phase": win["phase"].to_numpy(),
            "wall_ms": win["wall_ms"].to_numpy(),
            "compute_ms": compute,
            "comm_ms": comm,
            "exposed_comm_ms": exposed,
            "recompute_ms": recompute,
            "idle_ms": (win["wall_ms"].to_numpy() - busy).clip(min=0.0),
        }
    )
    if "flops" in intervals:  # the perf model ran (a run that needs no perf table skips it)
        out["gflop"], out["ideal_ms"] = _flops(intervals, idx)
    out["phase"] = pd.Categorical(out["phase"], categories=WINDOW_PHASES)
    return _finish(out)
