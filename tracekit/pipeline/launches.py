"""Step ``join_launches``: the activity table, each activity joined to the call that launched it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..checks import TraceWarning
from ..read import ANNOTATION, CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME
from .state import Trace, lookup, take

DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)
#: Annotation ranges that are CPU-side collectives (gloo/nccl), activities of CPU-only traces.
CPU_COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


def join_launches(t: Trace) -> Trace:
    """Select the activities and join each to its launching runtime call.

    Needs: ``t.events`` (read's columns).
    Adds: ``t.mode`` ("gpu" when the trace has device activity, else "cpu") and ``t.acts`` with
    ``ev`` (event row), ``start``, ``end``, ``name``, ``kind``, ``stream``, ``bytes``, ``corr``
    (correlation id, -1 none), ``launch_ev`` (the runtime call's event row, -1 none),
    ``runtime`` (its name), ``launched``, ``launch_pid``, ``launch_tid``, ``launch_ts`` (the
    call's; for an activity with no launch: pid/tid -1 and its own start).
    Guarantees: a GPU activity is joined by the ``correlation`` arg only, never by flows or
    time; the first runtime call of a duplicated id is used (and a warning says so). In CPU mode
    the activities are the CPU leaf ops and CPU collective ranges, each its own launch.
    """
    ev = t.events
    kind = ev["kind"].to_numpy()
    is_device = np.isin(kind, DEVICE_KINDS)
    t.mode = "gpu" if is_device.any() else "cpu"
    if t.mode == "gpu":
        act, launch = _gpu_launches(t, kind, np.flatnonzero(is_device))
    else:
        act = _cpu_activities(t, kind)
        launch = act.copy()
    ts, end = ev["ts"].to_numpy(), ev["ts"].to_numpy() + ev["dur"].to_numpy()
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    no_launch = launch < 0
    safe = np.maximum(launch, 0)
    t.acts = pd.DataFrame(
        {
            "ev": act,
            "start": ts[act].astype(np.int64),
            "end": end[act].astype(np.int64),
            "name": pd.Categorical(t.names[act]),
            "kind": kind[act],
            "stream": ev["stream"].to_numpy()[act] if t.mode == "gpu" else tid[act],
            "bytes": ev["bytes"].to_numpy()[act],
            "corr": ev["corr"].to_numpy()[act] if t.mode == "gpu" else np.full(len(act), -1, np.int64),
            "launch_ev": launch,
            "runtime": pd.Categorical(
                take(t.names, launch, "") if t.mode == "gpu" else np.full(len(act), "", object)
            ),
            "launched": ~no_launch,
            "launch_pid": np.where(no_launch, -1, pid[safe]),
            "launch_tid": np.where(no_launch, -1, tid[safe]),
            "launch_ts": np.where(no_launch, ts[act], ts[safe]),
        }
    )
    return t


def _gpu_launches(t: Trace, kind: np.ndarray, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    corr = t.events["corr"].to_numpy()
    rt = np.flatnonzero(kind == RUNTIME)
    rt_corr = pd.Series(rt, index=corr[rt])
    dup = rt_corr.index.duplicated(keep="first")
    if dup.any():
        t.warnings.append(
            TraceWarning(
                "duplicate_correlation",
                f"{int(dup.sum())} duplicate "
                "correlation ids among runtime calls; the first call of "
                "each id is used",
            )
        )
        rt_corr = rt_corr[~dup]
    launch = lookup(rt_corr, corr[act])
    missing = int((launch < 0).sum())
    if missing and rt.size:
        dur = t.events["dur"].to_numpy()[act]
        share = float(dur[launch < 0].sum()) / float(dur.sum()) if dur.sum() > 0 else 0.0
        t.warnings.append(
            TraceWarning(
                "no_launch",
                f"{missing} of {len(act)} device activities ({share:.1%} of device time) have no "
                "launching runtime call in the file: launched before the profiler's CPU window "
                "began or after it ended, or by a runtime call the profiler dropped; a trace "
                "with step markers leaves them out of every step",
            )
        )
    return act, launch


def _cpu_activities(t: Trace, kind: np.ndarray) -> np.ndarray:
    """CPU leaf ops (ops with no op nested inside) and CPU collective ranges."""
    ev = t.events
    names = pd.Series(t.names)
    is_step = names.str.startswith("ProfilerStep#").to_numpy()
    cand = np.flatnonzero(
        (kind == CPU_OP) & ~is_step
        | ((kind == ANNOTATION) & names.str.startswith(CPU_COLLECTIVE_PREFIXES).to_numpy())
    )
    pid, tid, ts = ev["pid"].to_numpy(), ev["tid"].to_numpy(), ev["ts"].to_numpy()
    end = ts + ev["dur"].to_numpy()
    return cand[leaves(pid[cand], tid[cand], ts[cand], end[cand])]


def leaves(pid, tid, start, end) -> np.ndarray:
    """Mask of intervals that contain no other interval of the same thread."""
    n = len(start)
    order = np.lexsort((-end, start, tid, pid))
    leaf = np.ones(n, dtype=bool)
    p, t, s, e = pid[order], tid[order], start[order], end[order]
    # In (start, -end) order, i has a child iff the next interval of the thread starts before i ends.
    same = (p[1:] == p[:-1]) & (t[1:] == t[:-1])
    has_child = same & (s[1:] < e[:-1]) & (e[1:] <= e[:-1])
    leaf_sorted = np.ones(n, dtype=bool)
    leaf_sorted[:-1] = ~has_child
    leaf[order] = leaf_sorted
    return leaf
