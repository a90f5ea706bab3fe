"""Step ``find_steps``: the ProfilerStep ranges, and the step of each activity."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.reader import ANNOTATION, CPU_OP
from .checks import TraceWarning
from .intervals import containing
from .state import Coded, Trace, add_columns, categorical, take

STEP_PREFIX = "ProfilerStep#"
OPTIMIZER_PREFIX = "Optimizer.step#"
_COLUMNS = ("step", "cpu_start", "cpu_end", "pid", "tid")


#: The values of ``acts.step_by`` where the trace has steps, in the order of their codes.
STEP_BY = np.array(["launch", "none", "time"], dtype=object)


def find_steps(t: Trace) -> Trace:
    """Number every activity with the step whose range holds its launch.

    Needs: ``acts.launch_pid``, ``launch_ts``, ``launched``.
    Adds: ``acts.step`` (-1 outside every step; 0 everywhere when the trace has no step
    markers) and ``acts.step_by``: ``"launch"`` (its launch is inside a step of its process),
    ``"time"`` (its launch is in the file, on a process that recorded no steps: placed by its
    launch time inside a step's range), ``"none"`` (outside every step, or its launch is not in
    the file) or ``"trace"`` (no markers: the whole trace is one window). ``t.step_ranges``:
    ``step``, ``cpu_start``, ``cpu_end``, ``pid``, ``tid`` per step range, by start. Meta:
    ``step_source`` (``ProfilerStep``, ``Optimizer.step`` or ``none``), ``has_profiler_steps``
    and ``unlaunched_activities``.
    Guarantees: a ``ProfilerStep#N`` range is a step whatever its category (``user_annotation``,
    ``cpu_op``, torch 1.8-1.13 ``Operator``); with none, repeated ``Optimizer.step#`` ranges
    bound inferred steps (a step ends where an Optimizer.step ends); an activity whose launch is
    not in the file is never placed into a step; steps of one process do not overlap (the
    latest-starting range wins).
    """
    a = t.acts
    rng, source = step_ranges(t)
    launched = a["launched"].to_numpy(bool)
    step_of, by = place_in_steps(rng, a["launch_pid"].to_numpy(), a["launch_ts"].to_numpy(), launched)
    unlaunched = int((~launched).sum()) if len(rng) else 0
    outside = int(((step_of < 0) & launched).sum()) if len(rng) else 0
    if outside:
        t.warnings.append(
            TraceWarning(
                "launched_outside_steps",
                f"{outside} of {len(a)} activities were launched outside every step and are left out",
            )
        )
    if len(rng):
        step, step_by = take(rng["step"].to_numpy(), step_of, -1), Coded(by, STEP_BY).categorical()
    else:
        step, step_by = np.zeros(len(a), dtype=np.int64), categorical(np.full(len(a), "trace", object))
    t.acts = add_columns(a, {"step": step, "step_by": step_by})
    t.step_ranges = rng
    t.meta["has_profiler_steps"] = source == "ProfilerStep"
    t.meta["step_source"] = source
    t.meta["unlaunched_activities"] = unlaunched
    return t


def place_in_steps(
    rng: pd.DataFrame, pid: np.ndarray, ts: np.ndarray, in_file: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The rule of :func:`find_steps` for CPU points (a launch, a memory event): per point, the
    row of ``rng`` (step ranges) holding it, -1 none, and how, as codes into :data:`STEP_BY`.
    A point of a process with steps is inside one of its own (``launch``); of a process with
    none, inside any by time (``time``); ``in_file`` False (a launch the file lacks): none."""
    r_pid, r_start, r_end = (rng[c].to_numpy() for c in ("pid", "cpu_start", "cpu_end"))
    step_of = containing(pid, ts, r_pid, r_start, r_end)
    by = np.where(step_of >= 0, 0, 1)  # codes into STEP_BY: launch, none
    other = in_file & ~np.isin(pid, r_pid)  # a process with no steps
    if other.any() and len(rng):
        step_of[other] = containing(
            np.zeros(int(other.sum()), np.int64), ts[other], np.zeros(len(rng), np.int64), r_start, r_end
        )
        by[other] = np.where(step_of[other] >= 0, 2, 1)  # time, none
    step_of[~in_file] = -1
    by[~in_file] = 1  # none
    return step_of, by


def step_ranges(t: Trace) -> tuple[pd.DataFrame, str]:
    """The step ranges of the trace and where they come from (see :func:`find_steps`)."""
    ev = t.events
    kind = ev["kind"].to_numpy()
    is_range = np.isin(kind, (ANNOTATION, CPU_OP))
    idx = np.flatnonzero(is_range & t.name_test(lambda s: s.str.startswith(STEP_PREFIX)))
    ts = ev["ts"].to_numpy()
    end = ts + ev["dur"].to_numpy()
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    if idx.size:
        num = pd.to_numeric(pd.Series(t.names_of(idx), dtype=object).str[len(STEP_PREFIX) :], errors="coerce")
        num = num.fillna(-1).astype(np.int64).to_numpy()
        source = STEP_PREFIX[:-1]
        start, stop = ts[idx], end[idx]
    else:
        idx = np.flatnonzero(is_range & t.name_test(lambda s: s.str.startswith(OPTIMIZER_PREFIX)))
        if idx.size < 2:
            return pd.DataFrame({c: np.zeros(0, np.int64) for c in _COLUMNS}), "none"
        idx = idx[np.argsort(end[idx], kind="stable")]
        stop = end[idx]
        start = np.concatenate([[ts.min()], stop[:-1]])
        num = np.arange(1, idx.size + 1, dtype=np.int64)
        source = OPTIMIZER_PREFIX[:-1]
    by = np.argsort(start, kind="quicksort")  # by start, as sort_values("cpu_start") orders them
    cols = {"step": num, "cpu_start": start, "cpu_end": stop, "pid": pid[idx], "tid": tid[idx]}
    return pd.DataFrame({c: x[by] for c, x in cols.items()}), source
