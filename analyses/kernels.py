"""Table X: device time by kernel category, with communication and idle.

Every instant of the step window is counted once: it belongs to compute when a compute kernel
runs, else to communication when one runs, else to memory copies/sets, else it is idle; the
instant is split equally among the activities of that group running then. So

* ``time_ms`` of the compute rows adds up to the union of compute kernels, the communication
  rows to the communication not hidden under compute, and with the memcpy and Idle rows the
  whole table adds up to the step window (``percent`` adds up to 100);
* ``kernel_ms`` is the plain sum of the kernels' durations, overlap included;
* ``count`` is the number of activities (empty on the Idle row: idle is no activity);
* ``percent``: time_ms / the total of the step's rows (of its stage) x 100, that is of the
  step (stage) window.

Compute categories (the paper's Element-wise, RoPE, Triton, GEMM, RMSNorm, Attention, then
Convolution, Normalization, Reduction, Data movement, Quantization, MoE routing, Embedding,
Other) and communication categories (AllReduce, AllGather, AllToAll, Other) come from the
ordered kernel rules (tracekit.pipeline.taxonomy.KERNEL_CATEGORIES / COMM_CATEGORIES).

Inference traces with prefill and decode stages (:mod:`tracekit.pipeline.stages`) get one block of rows
per step and ``stage``; a stage's window then runs from its first activity's start to its last
activity's end, and its rows (Idle included) add up to that window.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.taxonomy import COMM_CATEGORIES, KERNEL_CATEGORIES
from tracekit.pipeline.windows import Windows

from ._common import narrow, sums, text, text_index
from ._registry import COUNT, MS, PCT, STAGE_MEAN, Ratio, register
from ._stages import ORDER, has_stages


def _idle_has_no_count(df: pd.DataFrame) -> pd.DataFrame:
    """The Idle row's count is empty in the mean too (idle is no activity; a sum made it 0)."""
    df = df.copy()
    df["count"] = df["count"].astype(float).where(df["group"].astype(str) != "idle")
    return df


GROUPS = {
    "compute": KERNEL_CATEGORIES,
    "comm": COMM_CATEGORIES,
    "memcpy": ["Memcpy", "Memset"],
    "idle": ["Idle"],
}


ROWS = [(g, c) for g, cats in GROUPS.items() for c in cats]


@register(
    "kernels",
    title="Kernel categories",
    paper="X",
    keys=("group", "category"),
    aggregate=STAGE_MEAN,
    compare="time_ms",
    values={"count": COUNT, "time_ms": MS, "kernel_ms": MS, "percent": PCT},
    ratios={"percent": Ratio("time_ms", "time_ms", within=("stage",))},
    finish=_idle_has_no_count,
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    staged = has_stages(intervals)
    keys = ["step"] + (["stage"] if staged else [])
    cols = keys + ["group", "category", "count", "time_ms", "kernel_ms"]
    done = windows.steps
    used = ["step", "stage", "group", "kernel_category", "count", "start", "end"]
    used += ["share_step"]
    iv = narrow(intervals, used, intervals["step"].isin(done["step"]).to_numpy())
    frame = pd.DataFrame(
        {
            "step": iv["step"].to_numpy(),
            "group": text(iv["group"], {"memset": "memcpy"}),
            "category": text(iv["kernel_category"]),
            "share": iv["share_step"].to_numpy() / 1e6,
            "dur": (iv["end"] - iv["start"]).to_numpy() / 1e6,
            "count": iv["count"].to_numpy(),
            "start": iv["start"].to_numpy(),
            "end": iv["end"].to_numpy(),
        }
    )
    if staged:
        frame["stage"] = text(iv["stage"], {"": "other"})
        span = frame.groupby(keys, observed=True)
        window = (span["end"].max() - span["start"].min()) / 1e6
        window.index = text_index(window.index)
        order = {s: i for i, s in enumerate(ORDER)}
        present = sorted(window.index, key=lambda k: (k[0], order.get(k[1], len(order))))
    else:
        window = pd.Series(
            ((done["end"] - done["start"]) / 1e6).to_numpy(),
            index=pd.Index(done["step"].to_numpy(), name="step"),
        )
        present = list(window.index)
    if not present:
        return pd.DataFrame(columns=cols)
    named = {"count": "count", "time_ms": "share", "kernel_ms": "dur"}
    agg = sums(frame, keys + ["group", "category"], named, observed=True)
    agg.index = text_index(agg.index)
    busy = agg["time_ms"].groupby(level=keys).sum()
    prefix = [k if isinstance(k, tuple) else (k,) for k in present]
    idx = pd.MultiIndex.from_tuples([p + r for p in prefix for r in ROWS], names=keys + ["group", "category"])
    out = agg.reindex(idx).fillna(0.0).reset_index()
    win = window.reindex(present).to_numpy().repeat(len(ROWS))
    idle = (out["group"] == "idle").to_numpy()
    b = busy.reindex(present).fillna(0.0).to_numpy().repeat(len(ROWS))
    out.loc[idle, "time_ms"] = np.maximum(win[idle] - b[idle], 0.0)
    out["count"] = np.where(idle, np.nan, out["count"].to_numpy(dtype=float))
    return out[cols]
