"""Step ``find_windows``: the time engine. Each step's device window and phase windows, once."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .checks import TraceWarning
from .evidence import call_start
from .intervals import unique
from .overlap import overlap, own_activity, phase_modes, run_table
from .state import Trace, codes_of, spread, str_column

#: The phase windows of a step, in time order (unattributed: the tail with no phase evidence).
PHASES = ["forward", "backward", "unattributed", "optimizer"]
#: The steps-table columns that bound the phase windows, in order.
BOUNDS = ["start", "t_backward", "t_unattributed", "t_optimizer", "end"]
#: The windows of a step: the whole step, then its phases in order.
WINDOWS = ["step"] + PHASES
#: A first or last step shorter than this fraction of the median step was cut by the profiler.
CUT_FRACTION = 0.1
#: A step is judged against the median only when the file (or rank) has this many steps.
CUT_MIN_STEPS = 3
#: Nanoseconds per millisecond (window lengths are reported in ms).
NS_PER_MS = 1e6
CUT_MESSAGE = (
    "the step looks cut by the profiling window (under 10% of the median step); left out of the means"
)


def find_windows(t: Trace) -> Trace:
    """Compute every step's device window and phase wall windows.

    Needs: ``acts.step``, ``start``, ``end``, ``phase``, ``group``; ``t.step_ranges``.
    Adds: ``t.steps``: one row per step with activity: ``step``, ``start``, ``end``
    (first start to last end of its activities; on CPU-only traces, where the activities are
    the CPU ops themselves, its ProfilerStep range when it has one, widened to hold them),
    ``activities``, ``t_backward``,
    ``t_optimizer`` (first backward / optimizer activity start; an absent phase collapses onto
    the next boundary), ``t_unattributed`` (first start of an activity with no phase evidence,
    inside [t_backward, t_optimizer]; t_optimizer when there is none), ``complete``,
    ``cpu_start``, ``cpu_end`` (its ProfilerStep range, -1
    none); ``t.windows``: one row per (step, window) with window in ``step``, ``forward``,
    ``backward``, ``unattributed``, ``optimizer``: ``start``, ``end``, ``complete``.
    ``phases_overlap`` and ``overlap_ns`` (:mod:`tracekit.pipeline.overlap`: phases that run
    at the same time; the windows table's ``wall`` is then each phase's own activity),
    ``phases_interleave`` (phases that take turns more than once without overlapping, as in
    gradient accumulation: each ``wall`` is then the sum of the phase's runs; ``t.runs``: those
    steps' runs, ``step``, ``phase``, ``lo``, ``hi``).
    On CPU-only traces a ``backward()`` call's Python frame starts the backward window.
    Guarantees: a step's phase windows tile its step window in order, except in a step whose
    phases overlap; a phase's compute never exceeds its wall; times stay int64
    (epoch nanoseconds do not survive float64). The first/last step is incomplete when it is
    under 10% of the median step (cut by the profiling window; a warning names it); a file with
    fewer than 3 steps is judged with its rank's other files (:mod:`tracekit.ranks.grouping`).
    """
    a = t.acts
    keep = a["step"].to_numpy() >= 0
    # Per step (sorted) on the rows of a step: integer minima and maxima, by numpy.
    ids, row = unique(a["step"].to_numpy()[keep], return_inverse=True)
    start, end = a["start"].to_numpy(np.int64)[keep], a["end"].to_numpy(np.int64)[keep]
    codes, names = codes_of(a["phase"])
    edge = _edges(t, start, keep, spread(names == "backward", codes)[keep])
    first = {
        ph: _first_start(row, edge, spread(names == ph, codes)[keep], len(ids))
        for ph in ("backward", "unattributed", "optimizer")
    }
    last = np.full(len(ids), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(last, row, end)
    begin = _first_start(row, start, np.ones(len(row), bool), len(ids))
    cpu_start, cpu_end = _profiler_steps(t, ids)
    if t.mode == "cpu":  # the step is its ProfilerStep range (docs/metrics.md, "step window")
        ranged = cpu_start >= 0
        begin = np.where(ranged, np.minimum(begin, cpu_start), begin)
        last = np.where(ranged, np.maximum(last, cpu_end), last)
    t_opt = np.where(first["optimizer"] >= 0, first["optimizer"], last)
    t_bwd = np.where(first["backward"] >= 0, np.minimum(first["backward"], t_opt), t_opt)
    # The unattributed window: from the first activity with no phase evidence, clipped into
    # [t_backward, t_optimizer]; empty (at t_optimizer) when there is none.
    t_un = np.clip(np.where(first["unattributed"] >= 0, first["unattributed"], t_opt), t_bwd, t_opt)
    steps = pd.DataFrame(
        {
            "step": ids,
            "start": begin,
            "end": last,
            "activities": np.bincount(row, minlength=len(ids)).astype(np.int64),
            "t_backward": t_bwd.astype(np.int64),
            "t_unattributed": t_un.astype(np.int64),
            "t_optimizer": t_opt.astype(np.int64),
        }
    )
    steps["complete"] = _complete(steps, t.warnings)
    steps["cpu_start"], steps["cpu_end"] = cpu_start, cpu_end
    own = own_activity(a, steps, PHASES)
    of_phase = np.array([PHASES.index(x) if x in PHASES else -1 for x in names], dtype=np.int64)
    flagged, interleaved, runs, table = phase_modes(
        own, steps, BOUNDS, PHASES, lambda: run_table(row, edge, of_phase[codes[keep]], steps)
    )
    if table is not None:  # the runs of the steps whose walls are their runs (for add_shares)
        turns = table[interleaved[table["row"].to_numpy()]]
        t.runs = pd.DataFrame(
            {
                "step": ids[turns["row"].to_numpy()],
                "phase": np.array(PHASES, dtype=object)[turns["phase"].to_numpy()],
                "lo": turns["lo"].to_numpy(),
                "hi": turns["hi"].to_numpy(),
            }
        )
    steps["phases_overlap"] = flagged
    steps["phases_interleave"] = interleaved
    steps["overlap_ns"] = np.where(flagged, overlap(own, PHASES), 0).astype(np.int64)
    t.steps = steps
    t.windows = windows_of(steps, own, runs)
    return t


def _edges(t: Trace, start: np.ndarray, keep: np.ndarray, backward: np.ndarray) -> np.ndarray:
    """Where each activity (of ``keep``) starts its phase: its start; on CPU-only traces, whose
    windows are on the CPU clock, a backward activity inside a ``backward()`` call starts
    backward at the call's start (the Python time of the call before its first op is
    backward: :func:`tracekit.pipeline.evidence.call_start`)."""
    if t.mode != "cpu" or not backward.any():
        return start
    call = call_start(t)[keep]
    inside = backward & (call >= 0)
    return np.where(inside, np.minimum(call, start), start)


def _profiler_steps(t: Trace, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per step of ``ids``: its ProfilerStep range (start, end in ns), -1 where it has none."""
    if not len(t.step_ranges):
        none = np.full(len(ids), -1, np.int64)
        return none, none.copy()
    cpu = t.step_ranges.drop_duplicates("step").set_index("step")
    return tuple(
        cpu[col].reindex(ids).fillna(-1).astype(np.int64).to_numpy() for col in ("cpu_start", "cpu_end")
    )


def _first_start(row: np.ndarray, start: np.ndarray, mask: np.ndarray, n: int) -> np.ndarray:
    """Per step 0..n-1, the least ``start`` of its rows (``row``: their steps) in ``mask``; -1
    for a step with none."""
    out = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(out, row[mask], start[mask])
    return np.where(np.bincount(row[mask], minlength=n) > 0, out, -1)


def _complete(steps: pd.DataFrame, warnings: list) -> np.ndarray:
    """Steps whose window was not cut by the profiling window (see :func:`find_windows`)."""
    complete = np.ones(len(steps), bool)
    if len(steps) >= CUT_MIN_STEPS:
        dur = (steps["end"] - steps["start"]).to_numpy()
        med = float(np.median(dur))
        cut = np.zeros(len(steps), bool)
        cut[[0, -1]] = dur[[0, -1]] < CUT_FRACTION * med
        complete &= ~cut
        warnings += [TraceWarning("step_cut", CUT_MESSAGE, step=int(s)) for s in steps.loc[cut, "step"]]
    return complete


def windows_of(
    steps: pd.DataFrame, own: pd.DataFrame | None = None, runs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """The long windows table of a steps table (``start``, ``t_backward``, ``t_optimizer``,
    ``end``, ``complete`` per step): rows ``step`` then each phase, per step (sorted by step,
    stable), with ``wall`` (ns): the window's length, or in a step whose phases overlap
    (``phases_overlap``, :mod:`tracekit.pipeline.overlap`) the measure of the union of the
    phase's own activities (``own``), the window's edges then their first start and last end;
    in a step whose phases interleave (``phases_interleave``) the sum of the phase's runs
    (``runs``, :func:`tracekit.pipeline.overlap.phase_runs`), the edges their first start and
    last end."""
    n = len(steps)
    step = steps["step"].to_numpy()
    bounds = [steps[c].to_numpy(np.int64) for c in BOUNDS]
    lo, hi = bounds[:-1], bounds[1:]
    walls = [h - lo_ for lo_, h in zip(lo, hi)]
    if own is not None and "phases_overlap" in steps and steps["phases_overlap"].any():
        flag = steps["phases_overlap"].to_numpy(bool)
        for k, p in enumerate(PHASES):
            has = flag & (own[f"lo_{p}"].to_numpy() >= 0)
            lo[k] = np.where(has, own[f"lo_{p}"].to_numpy(), np.where(flag, bounds[0], lo[k]))
            hi[k] = np.where(has, own[f"hi_{p}"].to_numpy(), np.where(flag, bounds[0], hi[k]))
            walls[k] = np.where(flag, own[f"own_{p}"].to_numpy(np.int64), walls[k])
    if runs is not None and "phases_interleave" in steps and steps["phases_interleave"].any():
        turns = steps["phases_interleave"].to_numpy(bool)
        for k, p in enumerate(PHASES):
            lo[k] = np.where(turns, runs[f"rlo_{p}"].to_numpy(np.int64), lo[k])
            hi[k] = np.where(turns, runs[f"rhi_{p}"].to_numpy(np.int64), hi[k])
            walls[k] = np.where(turns, runs[f"run_{p}"].to_numpy(np.int64), walls[k])
    # Window k of every step is the k-th block of n rows (the step's whole window first).
    starts = np.concatenate([bounds[0]] + lo)
    ends = np.concatenate([bounds[-1]] + hi)
    wall = np.concatenate([bounds[-1] - bounds[0]] + walls)
    kind = np.repeat(np.arange(len(WINDOWS)), n)
    order = np.lexsort((kind, np.tile(step, len(WINDOWS))))
    return pd.DataFrame(
        {
            "step": np.tile(step, len(WINDOWS))[order],
            "window": str_column(np.array(WINDOWS, dtype=object), kind[order]),
            "start": starts[order],
            "end": ends[order],
            "wall": wall[order],
            "complete": np.tile(steps["complete"].to_numpy(bool), len(WINDOWS))[order],
        }
    )


@dataclass(frozen=True)
class Windows:
    """A rank's windows in the shapes the tables read, derived once (:func:`frame_windows`).

    ``table``: the long windows table (:func:`find_windows`); ``steps``: the complete steps'
    device windows (``step``, ``start``, ``end`` in ns, ``window_ms``); ``phases``: the complete
    steps' phase windows, long (``step``, ``phase``, ``lo``, ``hi`` in ns, ``wall_ms``, and
    ``window_ms``: the step's whole window).
    """

    table: pd.DataFrame
    steps: pd.DataFrame
    phases: pd.DataFrame

    def has_unattributed(self) -> bool:
        """Whether some complete step has a non-empty ``unattributed`` window."""
        p = self.phases
        return bool(((p["hi"] - p["lo"])[(p["phase"] == "unattributed").to_numpy()] > 0).any())


def frame_windows(windows: pd.DataFrame) -> Windows:
    """The step of the time engine that the tables start from: windows computed once.

    Needs: a windows table (``step``, ``window``, ``start``, ``end``, ``complete``; one rank's,
    after its files are merged and its steps cut, see :mod:`tracekit.ranks.grouping`).
    Adds: :class:`Windows`: its complete steps' device windows and phase windows.
    Guarantees: computed once per rank (and filter) by :class:`tracekit.analysis.Analysis`, and
    every table reads its windows from it: no table derives windows itself.
    """
    done = windows[windows["complete"].to_numpy()]
    is_step = (done["window"] == "step").to_numpy()
    whole = done[is_step]
    steps = pd.DataFrame(
        {
            "step": whole["step"].to_numpy(),
            "start": whole["start"].to_numpy(),
            "end": whole["end"].to_numpy(),
        }
    )
    steps["window_ms"] = (steps["end"] - steps["start"]) / NS_PER_MS
    ph = done[~is_step]
    phases = pd.DataFrame(
        {
            "step": ph["step"].to_numpy(),
            "phase": ph["window"].to_numpy(),
            "lo": ph["start"].to_numpy(),
            "hi": ph["end"].to_numpy(),
        }
    )
    wall = ph["wall"].to_numpy() if "wall" in ph else phases["hi"] - phases["lo"]
    phases["wall_ms"] = wall / NS_PER_MS
    span = steps.set_index("step")["window_ms"]
    phases["window_ms"] = span.reindex(phases["step"]).to_numpy()
    return Windows(table=windows, steps=steps, phases=phases)
