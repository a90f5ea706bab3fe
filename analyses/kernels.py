"""Table X: device time by kernel category, with communication and idle.

Every instant of the step window is counted once: it belongs to compute when a compute kernel
runs, else to communication when one runs, else to memory copies/sets, else it is idle; the
instant is split equally among the activities of that group running then. So

* ``time_ms`` of the compute rows adds up to the union of compute kernels, the communication
  rows to the communication not hidden under compute, and with the memcpy and Idle rows the
  whole table adds up to the step window (``percent`` adds up to 100);
* ``kernel_ms`` is the plain sum of the kernels' durations, overlap included;
* ``count`` is the number of activities.

Compute categories (Element-wise, RoPE, Triton, GEMM, RMSNorm, Attention, Other) and
communication categories (AllReduce, AllGather, Other) come from the ordered kernel rules.

Inference traces with prefill and decode stages (:mod:`tracekit.stages`) get one block of rows
per step and ``stage``; a stage's window then runs from its first activity's start to its last
activity's end, and its rows (Idle included) add up to that window.
"""

from __future__ import annotations

import pandas as pd

from tracekit.taxonomy import COMM_CATEGORIES, KERNEL_CATEGORIES

from ._common import PHASES, ms, percent, share_column
from ._stages import has_stages, split

GROUPS = {"compute": KERNEL_CATEGORIES, "comm": COMM_CATEGORIES,
          "memcpy": ["Memcpy", "Memset"], "idle": ["Idle"]}


def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    staged = has_stages(intervals)
    cols = ["step"] + (["stage"] if staged else []) + \
        ["group", "category", "count", "time_ms", "kernel_ms", "percent"]
    by = dict(tuple(intervals.groupby("step", observed=True)))
    rows = []
    for s in steps[steps["complete"]].itertuples(index=False):
        for stage, iv in split(by.get(s.step, intervals.iloc[:0]), staged):
            window = ms(s.end - s.start) if stage is None else ms(iv["end"].max() - iv["start"].min())
            for r in _rows(iv, window):
                rows.append({"step": s.step, **({"stage": stage} if staged else {}), **r})
    return pd.DataFrame(rows, columns=cols)


def _rows(iv: pd.DataFrame, window: float) -> list[dict]:
    """The category rows of one step (or one stage of it) over a window of ``window`` ms."""
    share = sum(iv[share_column(p)] for p in PHASES) / 1e6 if len(iv) else pd.Series(dtype=float)
    group = iv["group"].astype(str).replace({"memset": "memcpy"})
    key = pd.DataFrame({"group": group, "category": iv["kernel_category"].astype(str),
                        "share": share, "dur": (iv["end"] - iv["start"]) / 1e6})
    agg = key.groupby(["group", "category"]).agg(count=("share", "size"),
                                                 time_ms=("share", "sum"),
                                                 kernel_ms=("dur", "sum"))
    busy = float(agg["time_ms"].sum()) if len(agg) else 0.0
    rows = []
    for g, cats in GROUPS.items():
        for c in cats:
            if g == "idle":
                t, n, k = max(window - busy, 0.0), 0, 0.0
            elif (g, c) in agg.index:
                r = agg.loc[(g, c)]
                t, n, k = float(r["time_ms"]), int(r["count"]), float(r["kernel_ms"])
            else:
                t, n, k = 0.0, 0, 0.0
            rows.append({"group": g, "category": c, "count": n, "time_ms": t, "kernel_ms": k,
                         "percent": float(percent(t, window))})
    return rows
