"""GPU idle per step.

* ``window_ms``: the step's device window, first device activity start to last end;
* ``busy_ms``: measure of the union of all device activities (kernels, copies, sets);
* ``idle_ms``: window_ms - busy_ms;
* ``percent``: idle_ms / window_ms x 100.
"""

from __future__ import annotations

import pandas as pd

from ._common import ms, percent, union_ms
from ._registry import MS, PCT, register


@register("idle", title="Device idle per step", values={"window_ms": MS, "busy_ms": MS,
          "idle_ms": MS, "percent": PCT}, chart="none")
def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    by = dict(tuple(intervals.groupby("step", observed=True)))
    for s in steps[steps["complete"]].itertuples(index=False):
        window = ms(s.end - s.start)
        busy = union_ms(by.get(s.step, intervals.iloc[:0]))
        rows.append({"step": s.step, "window_ms": window, "busy_ms": busy,
                     "idle_ms": window - busy, "percent": float(percent(window - busy, window))})
    return pd.DataFrame(rows, columns=["step", "window_ms", "busy_ms", "idle_ms", "percent"])
