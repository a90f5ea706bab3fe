"""Communication per phase and collective (Tables XV, XVI; non-overlapped communication).

Per step, phase (of the launching op) and collective (from the kernel name, else the launching
``record_param_comms`` "Collective name" or ``nccl:*``/``gloo:*`` range):

* ``count``: number of communication kernels;
* ``time_ms``: sum of their durations;
* ``exposed_ms``: measure of (union of these kernels) minus (union of all compute kernels of the
  step): the part that no computation hides;
* ``percent``: time_ms / step window x 100.
"""

from __future__ import annotations

import pandas as pd

from tracekit.pipeline.intervals import minus_measure_by
from tracekit.pipeline.windows import Windows

from ._common import NS_PER_MS, as_text, narrow, percent, sums, text
from ._registry import COUNT, MS, PCT, register


@register(
    "comm",
    title="Communication per phase and collective",
    paper="XV, XVI",
    keys=("phase", "collective"),
    values={"count": COUNT, "time_ms": MS, "exposed_ms": MS, "percent": PCT},
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    cols = ["step", "phase", "collective", "count", "time_ms", "exposed_ms", "percent"]
    comm = narrow(
        intervals,
        ["step", "phase", "collective", "start", "end", "count"],
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
            "count": comm["count"].to_numpy(),
        }
    )
    c["dur"] = c["end"] - c["start"]
    compute = narrow(intervals, ["step", "start", "end"], (intervals["group"] == "compute").to_numpy())
    out = sums(c, keys, {"count": "count", "time_ns": "dur"}, observed=True)
    exposed = minus_measure_by(c, compute[["step", "start", "end"]], keys, ["step"])
    out["exposed_ms"] = exposed.reindex(out.index).to_numpy() / NS_PER_MS
    out = as_text(out.reset_index(), ["phase", "collective"])
    out["time_ms"] = out["time_ns"] / NS_PER_MS
    window = windows.steps.set_index("step")["window_ms"]
    out["percent"] = percent(out["time_ms"], window.reindex(out["step"]).to_numpy())
    return out[cols]
