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

from tracekit.intervals import minus_measure, union

from ._common import ms, percent
from ._registry import COUNT, MS, PCT, register


@register("comm", title="Communication per phase and collective", paper="XV, XVI",
          keys=("phase", "collective"),
          values={"count": COUNT, "time_ms": MS, "exposed_ms": MS, "percent": PCT})
def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    cols = ["step", "phase", "collective", "count", "time_ms", "exposed_ms", "percent"]
    comm = intervals[intervals["group"] == "comm"]
    if comm.empty:
        return pd.DataFrame(columns=cols)
    win = steps.set_index("step")
    rows = []
    for step, iv in intervals.groupby("step", observed=True):
        cmp = iv[iv["group"] == "compute"]
        cu = union(cmp["start"].to_numpy(), cmp["end"].to_numpy())
        c = iv[iv["group"] == "comm"]
        window = ms(win.at[step, "end"] - win.at[step, "start"])
        for (ph, coll), g in c.groupby([c["phase"].astype(str), c["collective"].astype(str)]):
            gu = union(g["start"].to_numpy(), g["end"].to_numpy())
            t = ms((g["end"] - g["start"]).sum())
            rows.append({"step": step, "phase": ph, "collective": coll, "count": len(g),
                         "time_ms": t, "exposed_ms": ms(minus_measure(gu, cu)),
                         "percent": float(percent(t, window))})
    return pd.DataFrame(rows, columns=cols)
