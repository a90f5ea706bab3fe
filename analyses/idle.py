"""GPU idle per step.

* ``window_ms``: the step's device window, first device activity start to last end;
* ``busy_ms``: measure of the union of all device activities (kernels, copies, sets);
* ``idle_ms``: window_ms - busy_ms;
* ``percent``: idle_ms / window_ms x 100.
"""

from __future__ import annotations

import pandas as pd

from tracekit.pipeline.windows import Windows

from ._common import union_ms_by
from ._registry import MS, PCT, Ratio, register


@register(
    "idle",
    title="Device idle per step",
    values={"window_ms": MS, "busy_ms": MS, "idle_ms": MS, "percent": PCT},
    ratios={"percent": Ratio("idle_ms", "window_ms")},
    chart="none",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    win = windows.steps
    busy = union_ms_by(intervals, ["step"]).reindex(win["step"]).fillna(0.0).to_numpy()
    window = win["window_ms"].to_numpy()
    idle = window - busy
    return pd.DataFrame(
        {
            "step": win["step"].to_numpy(),
            "window_ms": window,
            "busy_ms": busy,
            "idle_ms": idle,
        },
        columns=["step", "window_ms", "busy_ms", "idle_ms"],
    )
