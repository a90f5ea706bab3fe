"""Table VI: time per module category in the forward and backward phases.

A compute kernel belongs to the module category of the op that launched it; a kernel launched
in backward belongs to the category of the forward op its backward node links to (sequence
number, else fwdbwd flow). Each kernel contributes its *share* of busy time inside the phase
wall window: at an instant when k compute kernels run at once each gets 1/k of it (one compute
stream: share = duration inside the window). Rows per phase column:

* the paper's categories (Embedding ... Linear; Attention for fused attention kernels);
* ``Other``: compute kernels outside every category, and memory copies/sets not hidden under
  compute or communication;
* ``Exposed communication``: communication not hidden under compute (Table VI's
  "non-overlapping communication");
* ``Idle``: no device activity.

The rows of a phase add up to its wall time, so ``percent`` adds up to 100. The optimizer
column (not in the paper's Table VI) is there so every phase reconciles; its work is Other.
"""

from __future__ import annotations

import pandas as pd

from tracekit.taxonomy import MODULE_CATEGORIES

from ._common import percent, phase_windows, share_column

ROWS = MODULE_CATEGORIES + ["Other", "Exposed communication", "Idle"]


def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    win = phase_windows(steps)
    by_step = dict(tuple(intervals.groupby("step", observed=True)))
    rows = []
    for w in win.itertuples(index=False):
        iv = by_step.get(w.step, intervals.iloc[:0])
        share = iv[share_column(w.phase)] / 1e6
        group = iv["group"].astype(str)
        compute = share[group == "compute"].groupby(iv.loc[group == "compute", "module"].astype(str)).sum()
        times = {m: float(compute.get(m, 0.0)) for m in MODULE_CATEGORIES}
        times["Other"] = float(compute.drop(MODULE_CATEGORIES, errors="ignore").sum()) + \
            float(share[group.isin(["memcpy", "memset"])].sum())
        times["Exposed communication"] = float(share[group == "comm"].sum())
        times["Idle"] = max(w.wall_ms - sum(times.values()), 0.0)
        for m in ROWS:
            rows.append({"step": w.step, "phase": w.phase, "module": m, "time_ms": times[m],
                         "percent": float(percent(times[m], w.wall_ms))})
    out = pd.DataFrame(rows, columns=["step", "phase", "module", "time_ms", "percent"])
    out["module"] = pd.Categorical(out["module"], categories=ROWS)
    return out
