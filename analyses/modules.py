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

The rows of a phase add up to its wall time, so ``percent`` adds up to 100. ``recompute_ms``:
the part of a row's ``time_ms`` that is activation recomputation (a forward module run again
inside backward, charged to the module it reruns); non-zero only in backward. The optimizer
column (not in the paper's Table VI) is there so every phase reconciles; its work is Other.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.taxonomy import MODULE_CATEGORIES

from ._common import percent, phase_windows, phases_present, window_shares
from ._registry import MS, PCT, register

ROWS = MODULE_CATEGORIES + ["Other", "Exposed communication", "Idle"]


@register(
    "modules",
    title="Module time per phase",
    paper="VI",
    keys=("phase", "module"),
    compare="time_ms",
    values={"time_ms": MS, "percent": PCT, "recompute_ms": MS},
)
def table(intervals: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    win = phase_windows(windows)
    win = win[win["phase"].isin(phases_present(intervals, windows)).to_numpy()].reset_index(drop=True)
    shares = window_shares(intervals)
    group = shares["group"].to_numpy()
    module = shares["module"].to_numpy()
    row = np.where(
        group == "compute",
        np.where(np.isin(module, MODULE_CATEGORIES), module, "Other"),
        np.where(group == "comm", "Exposed communication", "Other"),
    )
    summed = shares.groupby([shares["step"], shares["phase"], row])["share_ms"].sum()
    idx = pd.MultiIndex.from_tuples(
        [(s, p, m) for s, p in zip(win["step"], win["phase"]) for m in ROWS],
        names=["step", "phase", "module"],
    )
    out = summed.reindex(idx).fillna(0.0).rename("time_ms").reset_index()
    wall = np.repeat(win["wall_ms"].to_numpy(), len(ROWS))
    per_window = out.groupby(["step", "phase"], sort=False)["time_ms"].transform("sum").to_numpy()
    idle = out["module"].to_numpy() == "Idle"
    out.loc[idle, "time_ms"] = np.maximum(wall[idle] - per_window[idle], 0.0)
    out["percent"] = percent(out["time_ms"], wall)
    rec = shares["recompute"].to_numpy(bool) & (group == "compute")
    redone = shares[rec].groupby([shares["step"][rec], shares["phase"][rec], row[rec]])["share_ms"].sum()
    out["recompute_ms"] = redone.reindex(idx).fillna(0.0).to_numpy()
    out["module"] = pd.Categorical(out["module"], categories=ROWS)
    return out[["step", "phase", "module", "time_ms", "percent", "recompute_ms"]]
