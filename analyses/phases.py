"""Tables V and VII: forward / backward / optimizer wall time and compute-kernel time.

Per step and phase:

* ``wall_ms``: the phase's span on the device timeline. Forward runs from the step's first
  device activity to the first backward activity, backward from there to the first optimizer
  activity, optimizer from there to the step's last device end (absent phases are empty).
* ``percent``: wall_ms / step window x 100 (the three rows add up to 100).
* ``compute_ms``: measure of the union of the compute kernels launched by the phase's ops.
* ``comm_ms``: measure of the union of the communication kernels launched by the phase's ops.
* ``exposed_comm_ms``: measure, inside the phase window, of (union of all communication)
  minus (union of all compute): communication nothing hides.
* ``idle_ms``: measure of the phase window minus the union of all device activities.
"""

from __future__ import annotations

import pandas as pd

from ._common import PHASES, percent, phase_windows, share_column, union_ms


def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    win = phase_windows(steps)
    rows = []
    by_step = dict(tuple(intervals.groupby("step", observed=True)))
    for w in win.itertuples(index=False):
        iv = by_step.get(w.step, intervals.iloc[:0])
        labelled = iv[iv["phase"] == w.phase]
        share = iv[share_column(w.phase)]
        busy = share.sum() / 1e6
        exposed = share[iv["group"] == "comm"].sum() / 1e6
        rows.append({
            "step": w.step, "phase": w.phase, "wall_ms": w.wall_ms,
            "percent": float(percent(w.wall_ms, w.window_ms)),
            "compute_ms": union_ms(labelled[labelled["group"] == "compute"]),
            "comm_ms": union_ms(labelled[labelled["group"] == "comm"]),
            "exposed_comm_ms": exposed,
            "idle_ms": max(w.wall_ms - busy, 0.0),
        })
    out = pd.DataFrame(rows, columns=["step", "phase", "wall_ms", "percent", "compute_ms",
                                      "comm_ms", "exposed_comm_ms", "idle_ms"])
    out["phase"] = pd.Categorical(out["phase"], categories=PHASES)
    return out
