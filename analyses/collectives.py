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

from tracekit.pipeline.state import codes_of
from tracekit.pipeline.windows import Windows

from ._common import NS_PER_MS, once_per_table
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
    "lead_op", "lead_module", "lead_phase", "lead_ms", "direction", "peer",
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
    every = _all_instances(intervals)
    done = np.isin(every["step"].to_numpy(), windows.steps["step"].to_numpy())
    return every if done.all() else every.loc[done].reset_index(drop=True)


@once_per_table
def _all_instances(intervals: pd.DataFrame) -> pd.DataFrame:
    """:func:`instances` of every step of ``intervals``, once per interval table (the tables
    that read it share it)."""
    if "comm_instance" not in intervals:
        return pd.DataFrame(columns=INSTANCE_COLUMNS)
    rows = np.flatnonzero(intervals["comm_instance"].to_numpy() >= 0)
    if not len(rows):
        return pd.DataFrame(columns=INSTANCE_COLUMNS)

    def labels(col: str) -> np.ndarray:
        codes, uniq = codes_of(intervals[col])
        return np.asarray(uniq, dtype=object)[codes[rows]]

    def values(col: str, dtype=None) -> np.ndarray:
        return intervals[col].to_numpy(dtype=dtype)[rows]

    f = pd.DataFrame(
        {
            "process_group": labels("process_group"),
            "instance": values("comm_instance"),
            "step": values("step"),
            "phase": labels("phase"),
            "collective": labels("collective"),
            "start": values("start"),
            "end": values("end"),
            "bytes": values("comm_bytes", float),
            "group_size": values("comm_group_size"),
            # a send's or receive's direction and peer (tracekit.pipeline.comm_peers)
            "direction": values("comm_direction") if "comm_direction" in intervals else 0,
            "peer": values("comm_peer") if "comm_peer" in intervals else -1,
        }
    )
    # The step is part of an instance's key: instance numbers restart in each file of a rank's
    # successive windows (no Seq recorded), and a collective never spans two steps.
    keys = ["step", "process_group", "collective", "instance"]
    if f.duplicated(keys).any():  # an instance in pieces (a CPU range split by the ops in it)
        g = f.groupby(keys, sort=False)
        f = g.agg(
            phase=("phase", "first"),
            start=("start", "min"),
            end=("end", "max"),
            bytes=("bytes", "first"),
            group_size=("group_size", "first"),
            direction=("direction", "first"),
            peer=("peer", "first"),
        ).reset_index()
    f = f.sort_values(["start", *keys], kind="stable").reset_index(drop=True)
    return _with_lead(f, intervals)[INSTANCE_COLUMNS]


def _with_lead(inst: pd.DataFrame, intervals: pd.DataFrame) -> pd.DataFrame:
    """``lead_op`` / ``lead_module`` / ``lead_phase`` / ``lead_ms``: of the compute rows that
    start after the previous arrival and before this one, the top-level op with most time
    (on integer codes: names are looked up for the winners only)."""
    comp = np.flatnonzero((intervals["group"] == "compute").to_numpy())
    start = intervals["start"].to_numpy()[comp]
    pos = np.searchsorted(inst["start"].to_numpy(), start, side="right")
    ok = pos < len(inst)
    if not ok.any():
        return inst.assign(lead_op="", lead_module="", lead_phase="", lead_ms=np.nan)
    rows, pos = comp[ok], pos[ok].astype(np.int64)
    op_codes, op_names = codes_of(intervals["top_op"])
    code = op_codes[rows].astype(np.int64)
    key = pos * (len(op_names) + 1) + code
    dur = (intervals["end"].to_numpy()[rows] - start[ok]).astype(float)
    order = np.argsort(key, kind="stable")
    k = key[order]
    cut = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
    total = np.add.reduceat(dur[order], cut)  # per (instance, op): its time
    first_row, group_pos = rows[order][cut], k[cut] // (len(op_names) + 1)
    best = np.lexsort((-total, group_pos))  # per instance, the op with most time first
    win = best[np.r_[True, group_pos[best][1:] != group_pos[best][:-1]]]
    idx, at = group_pos[win], first_row[win]

    def names(col: str) -> np.ndarray:
        codes, uniq = codes_of(intervals[col])
        out = np.full(len(inst), "", dtype=object)
        out[idx] = np.asarray(uniq, dtype=object)[codes[at]]
        return out

    lead_ms = np.full(len(inst), np.nan)
    lead_ms[idx] = total[win] / NS_PER_MS
    return inst.assign(
        lead_op=names("top_op"),
        lead_module=names("module_instance"),
        lead_phase=names("phase"),
        lead_ms=lead_ms,
    )


def _grouped(f: dict[str, np.ndarray], by: list[str], cols: list[str]) -> dict[str, np.ndarray]:
    """One row per ``by`` group (in sorted order) of the columns ``f``: ``calls`` (rows),
    ``dur`` (summed) and each of ``cols`` summed, NaN where any of the group's values is
    (unknown); on integer codes and ``np.bincount`` over arrays (tables of a few rows: pandas'
    per-operation cost would dominate)."""
    key = np.zeros(len(f["dur"]), np.int64)
    for c in by:
        codes, uniq = pd.factorize(f[c], sort=True)
        key = key * (len(uniq) + 1) + codes
    _, first, ids = np.unique(key, return_index=True, return_inverse=True)
    ids, n = ids.ravel(), len(first)
    out = {c: f[c][first] for c in by}
    out["calls"] = np.bincount(ids, minlength=n)
    for c in ["dur", *cols]:
        v = np.asarray(f[c], dtype=float)
        nan = np.isnan(v)
        total = np.bincount(ids, weights=np.where(nan, 0.0, v), minlength=n)
        out[c] = np.where(np.bincount(ids, weights=nan, minlength=n) > 0, np.nan, total)
    return out


def _arrays(inst: pd.DataFrame) -> dict[str, np.ndarray]:
    """The instances' columns as arrays, with ``dur`` (ns) and ``bus`` (bytes x bus factor)."""
    f = {c: inst[c].to_numpy() for c in inst.columns}
    f["dur"] = (f["end"] - f["start"]).astype(float)
    f["bus"] = f["bytes"].astype(float) * bus_factor(f["collective"], f["group_size"])
    return f


def summarise(inst: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """The collectives rows of instances (with ``wait_ns`` / ``transfer_ns`` when matched
    across ranks), one per ``by`` keys: sums, bandwidths from the sums."""
    cols = by + COLUMNS
    if inst.empty:
        return pd.DataFrame(columns=cols)
    f = _arrays(inst)
    for c in ("wait_ns", "transfer_ns"):
        f.setdefault(c, np.full(len(inst), np.nan))
    out = _grouped(f, by, ["bytes", "bus", "wait_ns", "transfer_ns"])
    time_ns = out["dur"]
    per_ns = np.where(time_ns > 0, time_ns, np.nan)
    out |= {
        "time_ms": time_ns / NS_PER_MS,
        "algbw_gbps": out["bytes"] / per_ns,
        "busbw_gbps": out["bus"] / per_ns,
        "wait_ms": out["wait_ns"] / NS_PER_MS,
        "transfer_ms": out["transfer_ns"] / NS_PER_MS,
    }
    return pd.DataFrame({c: out[c] for c in cols})


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
    if unknown.any():
        for c in ("bytes", "bus_bytes", "algbw_gbps", "busbw_gbps"):
            df[c] = np.where(unknown, np.nan, df[c].to_numpy(dtype=float))
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
    f = _arrays(inst)
    f["size_bucket"] = bucket(f["bytes"])
    out = _grouped(f, ["step", "collective", "size_bucket"], ["bytes", "bus"])
    out["time_ms"], out["bus_bytes"] = out["dur"] / NS_PER_MS, out["bus"]
    return pd.DataFrame({c: out[c] for c in cols})
