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

from tracekit.pipeline.taxonomy import MODULE_CATEGORIES
from tracekit.pipeline.windows import Windows

from ._common import phases_present, window_shares
from ._groups import numbered
from ._registry import MS, PCT, PHASE_WALL, Ratio, register

ROWS = MODULE_CATEGORIES + ["Other", "Exposed communication", "Idle"]
_OTHER, _EXPOSED = ROWS.index("Other"), ROWS.index("Exposed communication")


def _rows(shares: pd.DataFrame, compute: np.ndarray) -> np.ndarray:
    """Per share, its row (position in ROWS): a compute kernel's module category (Other
    outside the categories), exposed communication, else Other (copies)."""
    module = shares["module"].astype("category")
    known = pd.Index(MODULE_CATEGORIES).get_indexer(module.cat.categories)
    known = np.append(known, -1)[module.cat.codes.to_numpy()]
    comm = (shares["group"] == "comm").to_numpy()
    return np.where(compute, np.where(known >= 0, known, _OTHER), np.where(comm, _EXPOSED, _OTHER))


def _sum_at(values: np.ndarray, keys: list[np.ndarray], idx: list) -> np.ndarray:
    """``at(pd.Series(values).groupby(keys).sum(), idx)`` for integer ``keys``: pandas' sums
    over one array of the same group numbers (:func:`numbered`: the same floats), read by a
    dict of the groups' labels, with no MultiIndex built."""
    if not len(values):
        return np.zeros(len(idx))
    group, first = numbered(keys)
    summed = pd.Series(values).groupby(group).sum().to_numpy(dtype=float)
    found = dict(zip(zip(*(k[first].tolist() for k in keys)), summed))
    out = np.fromiter((found.get(k, np.nan) for k in idx), dtype=float, count=len(idx))
    out[np.isnan(out)] = 0.0
    return out


@register(
    "modules",
    title="Module time per phase",
    paper="VI",
    keys=("phase", "module"),
    compare="time_ms",
    values={"time_ms": MS, "percent": PCT, "recompute_ms": MS},
    ratios={"percent": Ratio("time_ms", PHASE_WALL)},
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    win = windows.phases
    win = win[win["phase"].isin(phases_present(intervals, windows)).to_numpy()].reset_index(drop=True)
    shares = window_shares(intervals)
    compute = (shares["group"] == "compute").to_numpy()
    row = _rows(shares, compute)  # positions in ROWS
    phase = shares["phase"].astype("category")
    keys = [shares["step"].to_numpy(), phase.cat.codes.to_numpy(), row]
    p_code = pd.Index(phase.cat.categories).get_indexer(win["phase"].to_numpy())
    steps = np.repeat(win["step"].to_numpy(), len(ROWS))
    idx = list(zip(steps, np.repeat(p_code, len(ROWS)), np.tile(np.arange(len(ROWS)), len(win))))
    out = pd.DataFrame(
        {
            "step": steps,
            "phase": np.repeat(win["phase"].to_numpy(), len(ROWS)),
            "module": np.tile(np.array(ROWS, dtype=object), len(win)),
            "time_ms": _sum_at(shares["share_ms"].to_numpy(), keys, idx),
        }
    )
    wall = np.repeat(win["wall_ms"].to_numpy(), len(ROWS))
    per_window = out.groupby(["step", "phase"], sort=False)["time_ms"].transform("sum").to_numpy()
    idle = out["module"].to_numpy() == "Idle"
    time_ms = out["time_ms"].to_numpy().copy()
    time_ms[idle] = np.maximum(wall[idle] - per_window[idle], 0.0)
    out["time_ms"] = time_ms
    rec = shares["recompute"].to_numpy(bool) & compute
    out["recompute_ms"] = _sum_at(shares["share_ms"].to_numpy()[rec], [k[rec] for k in keys], idx)
    out["module"] = pd.Categorical(out["module"], categories=ROWS)
    return out[["step", "phase", "module", "time_ms", "recompute_ms"]]
