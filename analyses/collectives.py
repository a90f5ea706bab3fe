"""Collectives: message sizes and bandwidth per rank, step, phase, collective and process group.

A collective *instance* is one communication kernel (GPU traces) or one ``gloo:*`` worker range
(CPU traces), numbered within its process group by the pipeline
(:mod:`tracekit.pipeline.comm_args`: ``comm_instance``, ``comm_bytes``, ``comm_group_size``,
``process_group``). Per step, phase (of the launching op), collective and process group:

* ``calls``: instances; ``time_ms``: the sum of their durations (kernel, or gloo range);
* ``bytes``: the sum of their message sizes, max(In, Out) elements x dtype size (NaN when
  some instance records no size: unknown, never guessed);
* ``algbw_gbps`` = bytes / time (10^9 bytes/s); ``busbw_gbps`` = algbw x the NCCL-tests factor
  of the collective over the group's size n (:func:`bus_factor`);
* ``wait_ms`` / ``transfer_ms``: filled across ranks (:mod:`tracekit.analyses.cross_rank`);
  NaN on one rank, which cannot tell waiting from moving bytes.

``collective_sizes`` is the same by collective and message-size bucket (:data:`BUCKETS`), mean
per step, its bandwidths ratios of the means.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._common import NS_PER_MS
from ._registry import BYTES, COUNT, GBPS, MS, PER_STEP, Ratio, register

KEYS = ["step", "phase", "collective", "process_group"]
COLUMNS = ["calls", "bytes", "time_ms", "algbw_gbps", "busbw_gbps", "wait_ms", "transfer_ms"]
#: The NCCL-tests bus bandwidth factors, by tracekit's collective label: f(n).
ALL = ("AllReduce",)
N_MINUS_1 = ("AllGather", "ReduceScatter", "AllToAll")
#: Message-size buckets (bytes, lower bounds) and their labels.
BUCKETS = [
    (0, "< 64 KiB"),
    (1 << 16, "64 KiB - 1 MiB"),
    (1 << 20, "1 - 16 MiB"),
    (1 << 24, "16 - 256 MiB"),
    (1 << 28, ">= 256 MiB"),
]
INSTANCE_COLUMNS = [
    "step", "phase", "collective", "process_group", "instance", "start", "end", "bytes", "group_size",
    "lead_op", "lead_module", "lead_phase", "lead_ms",
]  # fmt: skip


def bus_factor(collective: np.ndarray, n: np.ndarray) -> np.ndarray:
    """busbw / algbw: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
    broadcast, reduce, send/recv and the rest 1 (whatever n); NaN where n matters and is
    unknown (< 1)."""
    n = np.asarray(n, dtype=float)
    n = np.where(n >= 1, n, np.nan)
    c = np.asarray(collective, dtype=object)
    f = np.ones(len(c))
    f = np.where(np.isin(c, ALL), 2 * (n - 1) / n, f)
    return np.where(np.isin(c, N_MINUS_1), (n - 1) / n, f)


def instances(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    """One row per collective instance of the rank's complete steps (:data:`INSTANCE_COLUMNS`):
    its arrival (``start``, ns) and ``end``, bytes, group size, and the op that ran longest on
    the rank between the previous instance's arrival and this one (``lead_*``)."""
    if "comm_instance" not in intervals:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    done = windows.steps["step"].to_numpy()
    keep = (intervals["comm_instance"].to_numpy() >= 0) & np.isin(intervals["step"].to_numpy(), done)
    iv = intervals.loc[keep]
    if iv.empty:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    f = pd.DataFrame(
        {
            "process_group": iv["process_group"].astype(str).to_numpy(),
            "instance": iv["comm_instance"].to_numpy(),
            "step": iv["step"].to_numpy(),
            "phase": iv["phase"].astype(str).to_numpy(),
            "collective": iv["collective"].astype(str).to_numpy(),
            "start": iv["start"].to_numpy(),
            "end": iv["end"].to_numpy(),
            "bytes": iv["comm_bytes"].to_numpy(dtype=float),
            "group_size": iv["comm_group_size"].to_numpy(),
        }
    )
    g = f.groupby(["process_group", "collective", "instance"], sort=False)
    out = g.agg(
        step=("step", "first"),
        phase=("phase", "first"),
        start=("start", "min"),
        end=("end", "max"),
        bytes=("bytes", "first"),
        group_size=("group_size", "first"),
    ).reset_index()
    out = out.sort_values(["start", "process_group", "collective", "instance"], kind="stable")
    out = out.reset_index(drop=True)
    return _with_lead(out, intervals)[INSTANCE_COLUMNS]


def _with_lead(inst: pd.DataFrame, intervals: pd.DataFrame) -> pd.DataFrame:
    """``lead_op`` / ``lead_module`` / ``lead_phase`` / ``lead_ms``: of the compute rows that
    start after the previous arrival and before this one, the top-level op with most time."""
    arrivals = inst["start"].to_numpy()
    comp = intervals.loc[(intervals["group"] == "compute").to_numpy()]
    start = comp["start"].to_numpy()
    pos = np.searchsorted(arrivals, start, side="right")
    ok = pos < len(arrivals)
    if not ok.any():
        return inst.assign(lead_op="", lead_module="", lead_phase="", lead_ms=np.nan)
    c = pd.DataFrame(
        {
            "pos": pos[ok],
            "op": comp["top_op"].astype(str).to_numpy()[ok],
            "module": comp["module_instance"].astype(str).to_numpy()[ok],
            "phase": comp["phase"].astype(str).to_numpy()[ok],
            "dur": (comp["end"].to_numpy() - start)[ok],
        }
    )
    per = c.groupby(["pos", "op"], sort=False).agg(
        dur=("dur", "sum"), module=("module", "first"), phase=("phase", "first")
    )
    per = per.reset_index().sort_values(["pos", "dur"], ascending=[True, False], kind="stable")
    top = per.drop_duplicates("pos").set_index("pos")
    idx = np.arange(len(inst))
    return inst.assign(
        lead_op=top["op"].reindex(idx).fillna("").to_numpy(),
        lead_module=top["module"].reindex(idx).fillna("").to_numpy(),
        lead_phase=top["phase"].reindex(idx).fillna("").to_numpy(),
        lead_ms=top["dur"].reindex(idx).to_numpy(dtype=float) / NS_PER_MS,
    )


def summarise(inst: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The collectives rows of instances (with ``wait_ns`` / ``transfer_ns`` when matched
    across ranks), one per ``by`` keys: sums, bandwidths from the sums."""
    cols = by + COLUMNS
    if inst.empty:
        return pd.DataFrame(columns=cols)
    f = inst.assign(
        dur=(inst["end"] - inst["start"]).astype(float),
        bus=inst["bytes"] * bus_factor(inst["collective"].to_numpy(), inst["group_size"].to_numpy()),
    )
    for c in ("wait_ns", "transfer_ns"):
        if c not in f:
            f[c] = np.nan
    g = f.groupby(by, sort=True)
    out = g.agg(
        calls=("dur", "size"),
        time_ns=("dur", "sum"),
        bytes=("bytes", lambda v: v.sum(min_count=len(v))),
        bus=("bus", lambda v: v.sum(min_count=len(v))),
        wait_ns=("wait_ns", lambda v: v.sum(min_count=len(v))),
        transfer_ns=("transfer_ns", lambda v: v.sum(min_count=len(v))),
    ).reset_index()
    out["time_ms"] = out["time_ns"] / NS_PER_MS
    per_ns = out["time_ns"].where(out["time_ns"] > 0)
    out["algbw_gbps"] = out["bytes"] / per_ns
    out["busbw_gbps"] = out["bus"] / per_ns
    out["wait_ms"] = out["wait_ns"] / NS_PER_MS
    out["transfer_ms"] = out["transfer_ns"] / NS_PER_MS
    return out[cols]


@register(
    "collectives",
    title="Collectives: message size, bandwidth, wait and transfer",
    keys=("phase", "collective", "process_group"),
    values={
        "calls": COUNT,
        "bytes": BYTES,
        "time_ms": MS,
        "algbw_gbps": GBPS,
        "busbw_gbps": GBPS,
        "wait_ms": MS,
        "transfer_ms": MS,
    },
    aggregate=PER_STEP,
    cross_fill=True,
    chart="none",
    top=24,
    sort_by="time_ms",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    return summarise(instances(intervals, windows), KEYS)


def bucket(nbytes: np.ndarray) -> np.ndarray:
    """Each message's size bucket label (:data:`BUCKETS`), ``unknown`` where NaN."""
    b = np.asarray(nbytes, dtype=float)
    lows = np.array([lo for lo, _ in BUCKETS], dtype=float)
    labels = np.array([lab for _, lab in BUCKETS] + ["unknown"], dtype=object)
    i = np.searchsorted(lows, np.nan_to_num(b, nan=0.0), side="right") - 1
    return labels[np.where(np.isnan(b), len(BUCKETS), i)]


def _unknown_sizes(df: pd.DataFrame) -> pd.DataFrame:
    """The ``unknown`` bucket's bytes and bandwidths stay unknown after the mean (which counts a
    missing value as 0), as do bus bytes where the group's size is unknown."""
    unknown = (df["size_bucket"] == "unknown").to_numpy()
    df.loc[unknown, ["bytes", "bus_bytes", "algbw_gbps", "busbw_gbps"]] = np.nan
    return df


@register(
    "collective_sizes",
    title="Collectives by message size",
    keys=("collective", "size_bucket"),
    values={
        "calls": COUNT,
        "bytes": BYTES,
        "bus_bytes": BYTES,
        "time_ms": MS,
        "algbw_gbps": GBPS,
        "busbw_gbps": GBPS,
    },
    ratios={"algbw_gbps": Ratio("bytes", "time_ms", 1e-6), "busbw_gbps": Ratio("bus_bytes", "time_ms", 1e-6)},
    finish=_unknown_sizes,
    chart="none",
    sort_by="time_ms",
)
def sizes(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    cols = ["step", "collective", "size_bucket", "calls", "bytes", "bus_bytes", "time_ms"]
    inst = instances(intervals, windows)
    if inst.empty:
        return pd.DataFrame(columns=cols)
    f = inst.assign(
        size_bucket=bucket(inst["bytes"].to_numpy()),
        dur=(inst["end"] - inst["start"]) / NS_PER_MS,
        bus_bytes=inst["bytes"] * bus_factor(inst["collective"].to_numpy(), inst["group_size"].to_numpy()),
    )
    g = f.groupby(["step", "collective", "size_bucket"], sort=True)
    out = g.agg(
        calls=("dur", "size"),
        bytes=("bytes", lambda v: v.sum(min_count=len(v))),
        bus_bytes=("bus_bytes", lambda v: v.sum(min_count=len(v))),
        time_ms=("dur", "sum"),
    ).reset_index()
    return out[cols]
