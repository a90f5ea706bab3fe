"""One file, several ranks: split a trace that merging tools wrote from the ranks of a job.

A rank is a process (docs/metrics.md, "Files and ranks"). Kineto records one process and the
devices it drives, so a file whose CPU side holds several processes that each launch device
work, each onto devices of its own, is several ranks merged into one file (TraceLens'
TraceFusion offsets every rank's pids, correlation ids and flow ids and drops
``distributedInfo``; other merge scripts do the same). Such a file is split into one trace per
launching process: its CPU events, and the events of the devices it launches onto.

What is not a merged file: one process with helper processes (DataLoader workers, a
compile worker) has CPU events in several processes but only one of them launches device work;
one process driving several devices (model parallel in one process) launches from one process.
Neither is split.

:func:`split_ranks`: Needs: a :class:`~tracekit.read.RawTrace`. Adds: one RawTrace per rank
(in process id order, with ``meta["rank_split"]`` saying how the file was split, no
``distributedInfo`` rank), or None when the file is one rank. Guarantees: every device
activity whose device a rank owns is in that rank's trace only; a device owned by no rank, or
by several, means the file is not split (the processes are not separable by device); a file
of more ranks than :func:`rank_cap` allows is a :class:`~tracekit.errors.TraceError`.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..read.reader import KERNEL, MEMCPY, MEMSET, RUNTIME, RawTrace

#: A device's activities must be launched by one process for this share of them (the rest:
#: correlation ids that happen to collide across ranks a merge tool did not offset).
OWNER_SHARE = 0.9

#: The cost cap of a split: every rank pays the whole pipeline and its tables (~0.5 s of fixed
#: cost even when tiny), so a merged file may hold at most this many ranks, or one per
#: :data:`EVENTS_PER_RANK` events when that is more. A file of more ranks than its events can
#: pay for (500 ranks in 600 KB took 365 s) is refused in one line (docs/security.md).
FREE_RANKS = 16
EVENTS_PER_RANK = 10_000


def rank_cap(n_events: int) -> int:
    """The most ranks a merged file of ``n_events`` events may be split into."""
    return max(FREE_RANKS, n_events // EVENTS_PER_RANK)


def device_owners(events: pd.DataFrame) -> pd.Series:
    """Device pid -> the process that launches onto it (by ``correlation``), for the devices
    whose activities one process launches (:data:`OWNER_SHARE`); empty when some device's
    activities have no dominant launcher."""
    kind = events["kind"].to_numpy()
    corr, pid = events["corr"].to_numpy(), events["pid"].to_numpy()
    dev = np.isin(kind, (KERNEL, MEMCPY, MEMSET)) & (corr >= 0)
    rt = (kind == RUNTIME) & (corr >= 0)
    if not dev.any() or not rt.any() or np.unique(pid[rt]).size < 2:  # one launching process
        return pd.Series(dtype=np.int64)
    calls = pd.DataFrame({"corr": corr[rt], "launcher": pid[rt]}).drop_duplicates()
    # A correlation id names one call of one process: an id that several processes call is
    # ambiguous and votes for none of them. Each id is then one call, so the join below has at
    # most one row per device activity (K processes x M activities of one id asked for K*M).
    calls = calls[~calls["corr"].duplicated(keep=False)]
    acts = pd.DataFrame({"corr": corr[dev], "device": pid[dev]})
    joined = acts.merge(calls, on="corr", how="inner")
    if joined.empty:
        return pd.Series(dtype=np.int64)
    counts = joined.groupby(["device", "launcher"]).size()
    per_device = counts.groupby(level="device")
    top = counts[counts == per_device.transform("max")].reset_index().drop_duplicates("device")
    share = top.set_index("device")[0] / per_device.sum()
    if (share < OWNER_SHARE).any():
        return pd.Series(dtype=np.int64)
    return top.set_index("device")["launcher"].astype(np.int64)


def split_ranks(raw: RawTrace) -> list[RawTrace] | None:
    """The ranks merged into ``raw`` (see the module docstring), or None when it is one."""
    owners = device_owners(raw.events)
    launchers = np.unique(owners.to_numpy()) if len(owners) else np.empty(0, np.int64)
    if launchers.size < 2:
        return None
    ev = raw.events
    n_events = len(ev) + (0 if raw.memory is None else len(raw.memory))
    if launchers.size > rank_cap(n_events):
        raise TraceError(
            raw.path,
            f"{launchers.size} ranks merged into one file of {n_events} events: more than the "
            f"{rank_cap(n_events)} ranks its events pay for (at most {FREE_RANKS}, or one per "
            f"{EVENTS_PER_RANK:,} events); refused (give one file per rank)",
        )
    pid = ev["pid"].to_numpy()
    kind = ev["kind"].to_numpy()
    device = np.isin(kind, (KERNEL, MEMCPY, MEMSET))
    # A device pid is its launching process's own; CPU events go by their own pid.
    on_device = pd.Series(owners.to_numpy(), index=owners.index.to_numpy()).reindex(pid).to_numpy(np.float64)
    is_launcher = np.isin(pid, launchers)
    own_device = np.isin(pid, owners.index.to_numpy()) & ~is_launcher
    rank_pid = np.where(device | own_device, on_device, np.where(is_launcher, pid, np.nan))
    others = np.setdiff1d(np.unique(pid[~device & np.isnan(rank_pid)]), launchers).size
    how = (
        f"one file held {launchers.size} processes that each launch device work onto devices of "
        f"their own (ranks merged into one file, e.g. by TraceLens TraceFusion): split into "
        f"{launchers.size} ranks by process"
        + (f"; {others} process(es) that launch no device work belong to none" if others else "")
    )
    out = []
    mem = raw.memory  # memory events (split off at read) go by their own pid, as CPU events
    for p in launchers:
        mine = rank_pid == p
        meta = {**raw.meta, "rank": None, "world_size": None, "rank_split": how}
        own = None if mem is None else mem[mem["pid"].to_numpy() == p].reset_index(drop=True)
        events = ev[mine].reset_index(drop=True)
        out.append(replace(raw, events=events, meta=meta, warnings=list(raw.warnings), memory=own))
    return out
