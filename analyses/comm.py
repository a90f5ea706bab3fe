"""Communication per phase and collective (Tables XV, XVI; non-overlapped communication).

Per step, phase (of the launching op) and collective (from the kernel name, else the launching
``record_param_comms`` "Collective name" or ``nccl:*``/``gloo:*`` range):

* ``count``: number of communication kernels (CPU traces: collective calls, ``comm_calls``: a
  gloo worker's range and the ops inside a call or range are parts of the call, counted once);
* ``time_ms``: sum of their durations;
* ``busy_ms``: measure of the union of these kernels: the time at least one of them runs
  (``time_ms`` when they never overlap each other);
* ``exposed_ms``: measure of (union of these kernels) minus (union of all compute kernels of the
  step): the part that no computation hides;
* ``percent``: busy_ms / step window x 100: the share of the step during which this collective
  runs, at most 100 (a sum of durations over a window is not a share: two overlapping
  all-reduces summed to 192%).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.intervals import measure, measure_by, minus_measure_by
from tracekit.pipeline.windows import Windows

from ._common import NS_PER_MS, as_text, narrow, sums, text
from ._groups import group_numbers
from ._registry import COUNT, MS, PCT, STEP_WINDOW, Ratio, register

#: Most groups :func:`_few_groups` measures one at a time (beyond: the vectorised measures).
FEW_GROUPS = 32


def _few_groups(c: pd.DataFrame, compute: pd.DataFrame, keys: list[str]) -> pd.DataFrame | None:
    """The table (its columns unordered) of at most :data:`FEW_GROUPS` groups, each measured
    on its own rows: ``busy`` the union of the group, ``exposed`` the union of the group and
    its step's compute minus the union of that compute (as :func:`minus_measure_by` measures
    it: the same integers), with no group-by index built or reindexed. None for more groups
    (or keys :func:`group_numbers` leaves to pandas)."""
    got = group_numbers(c, keys)
    if got is None or len(got[1]) > FEW_GROUPS:
        return None
    group, first = got
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(first) + 1))
    start, end, step = (c[k].to_numpy(np.int64) for k in ("start", "end", "step"))
    c_step, c_start, c_end = (compute[k].to_numpy(np.int64) for k in ("step", "start", "end"))
    busy, exposed = np.zeros(len(first), np.int64), np.zeros(len(first), np.int64)
    for g in range(len(first)):
        rows = order[bounds[g] : bounds[g + 1]]
        hidden = c_step == step[first[g]]
        busy[g] = measure(start[rows], end[rows])
        both = (np.concatenate([start[rows], c_start[hidden]]), np.concatenate([end[rows], c_end[hidden]]))
        exposed[g] = measure(*both) - measure(c_start[hidden], c_end[hidden])
    out = pd.DataFrame({k: c[k].to_numpy()[first] if k == "step" else c[k].array.take(first) for k in keys})
    out = as_text(out, ["phase", "collective"])
    out["count"] = np.add.reduceat(c["count"].to_numpy()[order], bounds[:-1])
    out["time_ms"] = np.add.reduceat(c["dur"].to_numpy()[order], bounds[:-1]) / NS_PER_MS
    out["busy_ms"], out["exposed_ms"] = busy / NS_PER_MS, exposed / NS_PER_MS
    return out


@register(
    "comm",
    title="Communication per phase and collective",
    paper="XV, XVI",
    keys=("phase", "collective"),
    values={"count": COUNT, "time_ms": MS, "busy_ms": MS, "exposed_ms": MS, "percent": PCT},
    ratios={"percent": Ratio("busy_ms", STEP_WINDOW)},
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    cols = ["step", "phase", "collective", "count", "time_ms", "busy_ms", "exposed_ms"]
    comm = narrow(
        intervals,
        ["step", "phase", "collective", "start", "end", "comm_calls"],
        (intervals["group"] == "comm").to_numpy(),
    )
    if comm.empty:
        return pd.DataFrame(columns=cols)
    keys = ["step", "phase", "collective"]
    c = pd.DataFrame(
        {
            "step": comm["step"].to_numpy(),
            "phase": text(comm["phase"]),
            "collective": text(comm["collective"]),
            "start": comm["start"].to_numpy(),
            "end": comm["end"].to_numpy(),
            "count": comm["comm_calls"].to_numpy(),
        }
    )
    c["dur"] = c["end"] - c["start"]
    compute = narrow(intervals, ["step", "start", "end"], (intervals["group"] == "compute").to_numpy())
    few = _few_groups(c, compute, keys)
    if few is not None:
        return few[cols]
    out = sums(c, keys, {"count": "count", "time_ns": "dur"}, observed=True)
    exposed = minus_measure_by(c, compute[["step", "start", "end"]], keys, ["step"])
    out["busy_ms"] = measure_by(c, keys).reindex(out.index).to_numpy() / NS_PER_MS
    out["exposed_ms"] = exposed.reindex(out.index).to_numpy() / NS_PER_MS
    out = as_text(out.reset_index(), ["phase", "collective"])
    out["time_ms"] = out["time_ns"] / NS_PER_MS
    return out[cols]
