"""The critical path of each step, per kind, phase and module (issue 35.3).

The path (:mod:`tracekit.pipeline.critical`): CPU work on each thread in order, launch to
device activity by correlation id, device activities in stream order, blocking synchronisations
and event waits, walked backward from the end of the step's device window (the ``idle`` table's
window), at each activity taking the dependency that gated it. Per step, per ``kind`` (``cpu``,
``launch``, ``kernel``, ``memcpy``, ``sync``, ``comm``, ``idle``), ``phase`` and ``module``:
``time_ms`` on the path. A step's rows sum to its window (``idle``: where the path waits with
nothing of its own running). A trace with no launching runtime call (CPU-only, or device
activity without launches) has no rows (the launch tables' notice says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._registry import CRITICAL_PIECES, INDEX, MS, PCT, STEP_WINDOW, Ratio, register

KEYS = ["step", "kind", "phase", "module"]
COLUMNS = [*KEYS, "time_ms"]


@register(
    "critical_path",
    title="Critical path per step",
    keys=("kind", "phase", "module"),
    values={"time_ms": MS, "percent": PCT, "waited_on_rank": INDEX},
    ratios={"percent": Ratio("time_ms", STEP_WINDOW)},
    reads=CRITICAL_PIECES,
    filters=frozenset({"phase", "module"}),
    sort_by="time_ms",
    top=20,
    chart="stacked",
)
def table(pieces: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    done = windows.steps["step"].to_numpy()
    if pieces is None or pieces.empty or not len(done):
        return pd.DataFrame(columns=COLUMNS)
    p = pieces[np.isin(pieces["step"].to_numpy(), done)]
    length = (p["end"].to_numpy(np.int64) - p["start"].to_numpy(np.int64)).astype(np.float64)
    # integer keys: the group-by of the pieces is cheap, the labels go on its few rows
    codes, labels = zip(*(pd.factorize(p[k]) for k in KEYS))
    key = np.zeros(len(p), np.int64)
    for c, lab in zip(codes, labels):
        key = key * (len(lab) + 1) + c
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    out = pd.DataFrame({k: np.asarray(lab, dtype=object)[c[first]] for k, c, lab in zip(KEYS, codes, labels)})
    out["step"] = out["step"].astype(np.int64)
    out["time_ms"] = np.bincount(inv.ravel(), weights=length, minlength=len(uniq)) / 1e6
    return out.sort_values(KEYS, kind="stable", ignore_index=True)[COLUMNS]
