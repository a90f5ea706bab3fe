"""Step ``find_steps``: the ProfilerStep ranges, and the step of each activity."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..checks import TraceWarning
from ..intervals import containing
from ..read import ANNOTATION
from .state import Trace, take

STEP_PREFIX = "ProfilerStep#"


def find_steps(t: Trace) -> Trace:
    """Number every activity with the step whose range holds its launch.

    Needs: ``acts.launch_pid``, ``launch_ts``, ``launched``.
    Adds: ``acts.step`` (the N of ``ProfilerStep#N``; -1 outside every step; 0 everywhere when
    the trace records no ProfilerStep) and ``acts.step_by``: ``"launch"`` (its launch is inside
    a step of its process), ``"time"`` (placed by time against any process's steps: no launch
    in the file, or a launching process with no steps of its own), ``"none"`` (outside every
    step) or ``"trace"`` (no steps: the whole trace is one). ``t.step_ranges``: ``step``,
    ``cpu_start``, ``cpu_end``, ``pid``, ``tid`` per ProfilerStep range, by start.
    Guarantees: steps of one process do not overlap (the latest-starting range wins).
    """
    ev, a = t.events, t.acts
    kind = ev["kind"].to_numpy()
    pid, ts = ev["pid"].to_numpy(), ev["ts"].to_numpy()
    end = ts + ev["dur"].to_numpy()
    names = pd.Series(t.names)
    idx = np.flatnonzero((kind == ANNOTATION) & names.str.startswith(STEP_PREFIX).to_numpy())
    num = pd.to_numeric(names[idx].str[len(STEP_PREFIX):], errors="coerce")
    num = num.fillna(-1).astype(np.int64).to_numpy()

    a_pid, a_ts = a["launch_pid"].to_numpy(), a["launch_ts"].to_numpy()
    no_launch = ~a["launched"].to_numpy()
    step_of = containing(a_pid, a_ts, pid[idx], ts[idx], end[idx])
    by = np.where(step_of >= 0, "launch", "none").astype(object)
    any_pid = no_launch | ~np.isin(a_pid, pid[idx])
    if any_pid.any() and idx.size:
        zeros = np.zeros(int(any_pid.sum()), np.int64)
        step_of[any_pid] = containing(zeros, a_ts[any_pid], np.zeros(idx.size, np.int64),
                                      ts[idx], end[idx])
        by[any_pid] = np.where(step_of[any_pid] >= 0, "time", "none")
    outside = int((step_of < 0).sum()) if idx.size else 0
    if outside:
        t.warnings.append(TraceWarning("launched_outside_steps", f"{outside} of {len(a)} "
                                       "activities were launched outside every ProfilerStep "
                                       "and are left out"))
    if idx.size:
        a["step"] = take(num, step_of, -1)
        a["step_by"] = pd.Categorical(by)
    else:
        a["step"] = np.zeros(len(a), dtype=np.int64)
        a["step_by"] = pd.Categorical(np.full(len(a), "trace", object))
    t.step_ranges = pd.DataFrame({"step": num, "cpu_start": ts[idx], "cpu_end": end[idx],
                            "pid": pid[idx], "tid": ev["tid"].to_numpy()[idx]}).sort_values("cpu_start").reset_index(drop=True)
    t.meta["has_profiler_steps"] = bool(idx.size)
    return t
