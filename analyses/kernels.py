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

from ._common import narrow, text, text_index
from ._groups import flat_sums, group_numbers, labels_of
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
    flat = flat_sums(frame, keys + ["group", "category"], named)
    return _laid_out(flat, keys, present, dict(zip(window.index, window.to_numpy())))[cols]


def _laid_out(flat: pd.DataFrame, keys: list[str], present: list, window: dict) -> pd.DataFrame:
    """One row per window of ``present`` and row of :data:`ROWS`: the group's sums from ``flat``
    (0 where it has none), Idle's time the rest of its ``window`` (ms) after the busy time (the
    group's time_ms summed per window by pandas, in ``flat``'s order), count empty on Idle:
    the reindexed group-by, from the arrays."""
    prefix = [k if isinstance(k, tuple) else (k,) for k in present]
    full = [p + r for p in prefix for r in ROWS]
    labels = zip(*(labels_of(flat[k]) for k in [*keys, "group", "category"]))
    at = {label: i for i, label in enumerate(labels)}
    pos = np.fromiter((at.get(k, -1) for k in full), np.intp, count=len(full))
    out = pd.DataFrame({"step": np.array([p[0] for p in prefix], dtype=np.int64).repeat(len(ROWS))})
    if len(keys) > 1:  # the stage
        out["stage"] = np.array([p[1] for p in prefix], dtype=object).repeat(len(ROWS))
    out["group"] = np.array([g for g, _ in ROWS] * len(prefix), dtype=object)
    out["category"] = np.array([c for _, c in ROWS] * len(prefix), dtype=object)
    for name in ("count", "time_ms", "kernel_ms"):
        v = np.zeros(len(full))
        v[pos >= 0] = flat[name].to_numpy(dtype=float)[pos[pos >= 0]]
        v[np.isnan(v)] = 0.0
        out[name] = v
    got = group_numbers(flat, keys)
    busy = {}
    if got is not None:
        summed = pd.Series(flat["time_ms"].to_numpy()).groupby(got[0]).sum().to_numpy()
        busy = dict(zip(zip(*(labels_of(flat[k], got[1]) for k in keys)), summed))
    b = np.array([busy.get(p, 0.0) for p in prefix], dtype=float)
    b[np.isnan(b)] = 0.0
    win = np.array([window[k] for k in present], dtype=float).repeat(len(ROWS))
    idle = out["group"].to_numpy() == "idle"
    t = out["time_ms"].to_numpy().copy()
    t[idle] = np.maximum(win[idle] - b.repeat(len(ROWS))[idle], 0.0)
    out["time_ms"] = t
    out["count"] = np.where(idle, np.nan, out["count"].to_numpy(dtype=float))
    return out
