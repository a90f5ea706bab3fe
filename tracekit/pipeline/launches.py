"""Step ``join_launches``: the activity table, each activity joined to the call that launched it."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.reader import ANNOTATION, CPU_OP, KERNEL, MEMCPY, MEMSET, RUNTIME
from .checks import TraceWarning
from .self_time import self_pieces
from .state import Trace, lookup
from .worker_comm import worker_launches

DEVICE_KINDS = (KERNEL, MEMCPY, MEMSET)
#: The reader's id of an event with no ``correlation`` arg (MTIA's executor ranges, its event
#: records): never a join key.
NO_ID = -1
#: Annotation ranges that are CPU-side collectives (gloo/nccl), activities of CPU-only traces.
CPU_COLLECTIVE_PREFIXES = ("gloo:", "nccl:")


def join_launches(t: Trace) -> Trace:
    """Select the activities and join each to its launching runtime call.

    Needs: ``t.events`` (read's columns).
    Adds: ``t.mode`` ("gpu" when the trace has device activity, else "cpu") and ``t.acts`` with
    ``ev`` (event row), ``start``, ``end``, ``count``, ``comm_calls``, ``name``, ``kind``,
    ``stream``, ``bytes``,
    ``corr`` (correlation id, -1 none), ``launch_ev`` (the runtime call's event row, -1 none),
    ``runtime`` (its name; CPU mode: the op that queued a worker's collective range, else ""),
    ``launched``, ``launch_pid``, ``launch_tid``, ``launch_ts`` (the
    call's; for an activity with no launch: pid/tid -1 and its own start), ``launch_end`` (the
    call's end: launch delay and host-bound launches are measured from it, analyses/launches.py;
    for an activity with no launch: its own start, as ``launch_ts``).
    Guarantees: a GPU activity is joined by the ``correlation`` arg only, never by flows or
    time; a call or activity with no ``correlation`` joins nothing; the first runtime call of a
    duplicated id is used (and a warning says so when an activity has that id). In CPU mode
    (DESIGN.md: tables over CPU op self time) the activities are the self-time pieces of every
    CPU op and CPU collective range: the op's interval minus the ops nested in it, so each
    instant of a thread inside a top-level op lands in exactly one op. An op with children has
    several pieces (rows with the same ``ev``); ``count`` is 1 on one piece per op and 0 on the
    others, so counts sum it; ``comm_calls`` (1 where the row counts one collective call, else
    0; GPU traces: 1) is ``count`` except as below. Each piece is launched by its own op
    (``launch_ts``: the op's start),
    except a collective range that runs outside every op of its thread (gloo's worker threads
    run the collective a c10d op queued) and the ops nested in it: they are launched by the
    collective op (``c10d::*``, ``record_param_comms``) of its process that started last at or
    before the range, so their step, phase and context are the issuing op's, as a GPU
    collective's are its launching call's; in ``comm_calls`` they and the ops inside a call
    count 0: one collective counts once, on its call (:mod:`tracekit.pipeline.worker_comm`).
    """
    ev = t.events
    kind = ev["kind"].to_numpy()
    is_device = np.isin(kind, DEVICE_KINDS)
    t.mode = "gpu" if is_device.any() else "cpu"
    ts, end = ev["ts"].to_numpy(), ev["ts"].to_numpy() + ev["dur"].to_numpy()
    if t.mode == "gpu":
        act, launch = _gpu_launches(t, kind, np.flatnonzero(is_device))
        start, stop, count = ts[act], end[act], np.ones(len(act), np.int64)
        calls = count
    else:
        act, start, stop, first = _cpu_self_pieces(t, kind)
        count = first.astype(np.int64)
        launch, calls = worker_launches(t, kind, act, first)
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    no_launch = launch < 0
    safe = np.maximum(launch, 0)
    t.acts = pd.DataFrame(
        {
            "ev": act,
            "start": start.astype(np.int64),
            "end": stop.astype(np.int64),
            "count": count,
            "comm_calls": calls,
            "name": t.name_categorical(act),
            "kind": kind[act],
            "stream": ev["stream"].to_numpy()[act] if t.mode == "gpu" else tid[act],
            "bytes": np.where(count > 0, ev["bytes"].to_numpy()[act], 0),
            "corr": ev["corr"].to_numpy()[act] if t.mode == "gpu" else np.full(len(act), -1, np.int64),
            "launch_ev": launch,
            # CPU mode: the issuing collective op of a worker thread's range, else none
            "runtime": t.name_categorical(launch if t.mode == "gpu" else np.where(launch != act, launch, -1)),
            "launched": ~no_launch,
            "launch_pid": np.where(no_launch, -1, pid[safe]),
            "launch_tid": np.where(no_launch, -1, tid[safe]),
            "launch_ts": np.where(no_launch, ts[act], ts[safe]),
            "launch_end": np.where(no_launch, ts[act], end[safe]),
        }
    )
    return t


def _gpu_launches(t: Trace, kind: np.ndarray, act: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    corr = t.events["corr"].to_numpy()
    rt = np.flatnonzero((kind == RUNTIME) & (corr != NO_ID))  # a call with no id launches nothing
    rt_corr = pd.Series(rt, index=corr[rt])
    dup = rt_corr.index.duplicated(keep="first")
    if dup.any():
        used = dup & np.isin(rt_corr.index.to_numpy(), corr[act])  # an id no activity has is moot
        if used.any():
            t.warnings.append(
                TraceWarning(
                    "duplicate_correlation",
                    f"{int(used.sum())} duplicate correlation ids among runtime calls; the first "
                    "call of each id is used",
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


def _cpu_self_pieces(t: Trace, kind: np.ndarray) -> tuple[np.ndarray, ...]:
    """The self-time pieces of the CPU ops (not ProfilerStep ranges) and CPU collective ranges:
    (event row, start, end, first piece of its op) per piece."""
    ev = t.events
    is_step = t.name_test(lambda s: s.str.startswith("ProfilerStep#"))
    cand = np.flatnonzero(
        (kind == CPU_OP) & ~is_step
        | ((kind == ANNOTATION) & t.name_test(lambda s: s.str.startswith(CPU_COLLECTIVE_PREFIXES)))
    )
    ts = ev["ts"].to_numpy()[cand]
    owner, start, stop, first = self_pieces(
        ev["pid"].to_numpy()[cand], ev["tid"].to_numpy()[cand], ts, ts + ev["dur"].to_numpy()[cand]
    )
    return cand[owner], start, stop, first
