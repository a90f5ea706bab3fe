"""Tables XIV: memory copies per step and direction.

Per step and copy kind (the memcpy event name, e.g. ``Memcpy HtoD (Pinned -> Device)``, reduced
to its direction HtoD / DtoH / DtoD / HtoH / PtoP, and Memset):

* ``count``, ``time_ms`` (sum of durations), ``bytes`` (sum, where the trace records it),
* ``percent``: time_ms / step window x 100.
"""

from __future__ import annotations

import re

import pandas as pd

from ._common import ms, percent
from ._registry import BYTES, COUNT, MS, PCT, register

_DIRECTION = re.compile(r"(HtoD|DtoH|DtoD|HtoH|PtoP)")


def direction(name: str) -> str:
    m = _DIRECTION.search(name)
    return m.group(1) if m else ("Memset" if "memset" in name.lower() else "Other")


@register("memcpy", title="Memory copies", paper="XIV", keys=("kind",), chart="none",
          values={"count": COUNT, "time_ms": MS, "bytes": BYTES, "percent": PCT})
def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    cols = ["step", "kind", "count", "time_ms", "bytes", "percent"]
    mem = intervals[intervals["group"].isin(["memcpy", "memset"])]
    if mem.empty:
        return pd.DataFrame(columns=cols)
    win = steps.set_index("step")
    kind = mem["name"].astype(str).map(direction)
    rows = []
    for (step, k), g in mem.groupby([mem["step"], kind]):
        t = ms((g["end"] - g["start"]).sum())
        window = ms(win.at[step, "end"] - win.at[step, "start"])
        rows.append({"step": step, "kind": k, "count": len(g), "time_ms": t,
                     "bytes": float(g["bytes"].fillna(0).sum()), "percent": float(percent(t, window))})
    return pd.DataFrame(rows, columns=cols)
