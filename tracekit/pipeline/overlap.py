"""Phases that run at the same time: when a step's phase windows stop being its phases' walls.

Phase windows tile a step (docs/metrics.md): forward until the first backward activity,
backward until the first optimizer activity... That is each phase's wall as long as phases
take turns. Some schedules run them at the same time: DualPipe (DeepSeek V3) runs the forward
chunk of one micro-batch beside the backward chunk of another, on other streams; then the
forward's compute runs far past "the first backward activity" and a window cannot hold it
(compute would exceed wall).

Phases can also take turns more than once: gradient accumulation runs forward and backward
of each micro-batch in a row (F B F B F B F B, then the optimizer). The first backward
activity then ends the forward window although three more forwards follow, and forward's
compute is longer than its window; yet no two phases run at the same instants. Such a step's
phase **runs** are the stretches of the step in which activities of one phase follow each
other in time order (activities starting at one instant in phase order; each run from its
first activity's start, the first from the step's start, to the next run's start, the last
to the step's end): :func:`phase_runs`.

A step's **phases overlap** only when they really do: the compute of two phases runs at the
same instants for more than :data:`OVERLAP_FRACTION` of the step window, or some phase's
compute is longer than its runs can hold (which needs an activity of that phase still running
when another phase's run has started: measured overlap, never 0). In such a step each phase's wall is
the measure of the union of its own activities (every device activity its ops launched), its
window's edges the first start and last end of them; the walls then add up to more than the
step, by :func:`overlap` (the time counted in two walls), and the output says so.

A step whose phases do not overlap but whose compute does not fit its tiling windows (some
phase's compute is longer than its window: the phases **interleave**) has as each phase's wall
the sum of its runs; the walls still tile the step. Every other step keeps the tiling windows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import measure_by_key
from .state import codes_of, run_starts, str_in

#: Compute of two phases at the same instants beyond this share of the step window: overlap.
OVERLAP_FRACTION = 0.01


def own_activity(acts: pd.DataFrame, steps: pd.DataFrame, phases: list[str]) -> pd.DataFrame:
    """Per step (rows of ``steps``, same order) and phase: the measure (ns) of the union of
    the phase's own activities (``own_<p>``), of its compute (``compute_<p>``), its first
    start and last end (``lo_<p>``, ``hi_<p>``; -1 none), of all compute (``compute``) and of
    all activity (``busy``)."""
    keep = acts["step"].to_numpy() >= 0
    ids = steps["step"].to_numpy()
    row = np.searchsorted(ids, acts["step"].to_numpy()[keep])  # steps are sorted by number
    codes, names = codes_of(acts["phase"])
    of_phase = np.array([phases.index(n) if n in phases else -1 for n in names], dtype=np.int64)
    ph = of_phase[codes[keep]]
    start, end = acts["start"].to_numpy(np.int64)[keep], acts["end"].to_numpy(np.int64)[keep]
    if "group" in acts:
        comp = str_in(acts["group"], ("compute",))[keep]
    else:  # a frame with no group yet: every activity counts as compute
        comp = np.ones(len(row), bool)
    n, k = len(ids), len(phases)
    key = row * k + np.maximum(ph, 0)
    ok = ph >= 0
    own = measure_by_key(key[ok], start[ok], end[ok], n * k)
    own_c = measure_by_key(key[ok & comp], start[ok & comp], end[ok & comp], n * k)
    lo = np.full(n * k, np.iinfo(np.int64).max, np.int64)
    hi = np.full(n * k, -1, np.int64)
    np.minimum.at(lo, key[ok], start[ok])
    np.maximum.at(hi, key[ok], end[ok])
    lo[hi < 0] = -1
    out = {
        "compute": measure_by_key(row[comp], start[comp], end[comp], n),
        "busy": measure_by_key(row, start, end, n),
    }
    for j, p in enumerate(phases):
        out[f"own_{p}"], out[f"compute_{p}"] = own[j::k], own_c[j::k]
        out[f"lo_{p}"], out[f"hi_{p}"] = lo[j::k], hi[j::k]
    return pd.DataFrame(out)


def phase_modes(
    own: pd.DataFrame, steps: pd.DataFrame, bounds: list[str], phases: list[str], runs_of
) -> tuple[np.ndarray, np.ndarray, pd.DataFrame | None, pd.DataFrame | None]:
    """Per step: (its phases overlap, its phases interleave), and the runs (``runs_of()``: a
    :func:`run_table`, called only when some step's compute does not fit its tiling windows;
    else None) with their per-step summary (:func:`phase_runs`). See the module docstring."""
    window = (steps["end"] - steps["start"]).to_numpy(np.int64)
    both = sum(own[f"compute_{p}"].to_numpy(np.int64) for p in phases) - own["compute"].to_numpy(np.int64)
    beyond = np.zeros(len(steps), bool)  # some phase's compute longer than its tiling window
    for k, p in enumerate(phases):
        wall = steps[bounds[k + 1]].to_numpy(np.int64) - steps[bounds[k]].to_numpy(np.int64)
        beyond |= own[f"compute_{p}"].to_numpy(np.int64) > wall
    real = both > OVERLAP_FRACTION * window
    if not (beyond & ~real).any():
        return real, np.zeros(len(steps), bool), None, None
    table = runs_of()
    runs = phase_runs(table, steps, phases)
    fits = np.ones(len(steps), bool)  # every phase's compute fits in its runs
    for p in phases:
        fits &= own[f"compute_{p}"].to_numpy(np.int64) <= runs[f"run_{p}"].to_numpy(np.int64)
    overlap = real | (beyond & ~fits)  # not fitting its runs: some activity runs into another phase's
    return overlap, beyond & ~overlap, runs, table


def run_table(row: np.ndarray, edge: np.ndarray, ph: np.ndarray, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per phase run (see the module docstring): ``row`` (its step's row of ``steps``),
    ``phase`` (index into the phases), ``lo``, ``hi`` (ns). ``row``: each activity's step row
    (-1 none); ``edge``: where it starts its phase (its start); ``ph``: its phase (-1 none)."""
    s0, s1 = steps["start"].to_numpy(np.int64), steps["end"].to_numpy(np.int64)
    ok = (row >= 0) & (ph >= 0)
    r, e, p = row[ok], edge[ok], ph[ok]
    order = np.lexsort((p, e, r))  # equal starts: in phase order, whatever the events' order
    r, e, p = r[order], e[order], p[order]
    heads = np.flatnonzero(run_starts(r, p))
    run_row = r[heads]
    first = np.r_[True, run_row[1:] != run_row[:-1]] if len(heads) else np.zeros(0, bool)
    last = np.r_[run_row[1:] != run_row[:-1], True] if len(heads) else np.zeros(0, bool)
    lo = np.where(first, s0[run_row], e[heads])
    hi = np.where(last, s1[run_row], np.r_[lo[1:], 0] if len(lo) else lo)
    return pd.DataFrame({"row": run_row, "phase": p[heads], "lo": lo, "hi": np.maximum(hi, lo)})


def phase_runs(runs: pd.DataFrame, steps: pd.DataFrame, phases: list[str]) -> pd.DataFrame:
    """Per step (rows of ``steps``) and phase: the summed length (ns) of the phase's runs
    (``run_<p>``), their first start and last end (``rlo_<p>``, ``rhi_<p>``; the step's start
    where it has none), from :func:`run_table`."""
    n, k = len(steps), len(phases)
    key = runs["row"].to_numpy(np.int64) * k + runs["phase"].to_numpy(np.int64)
    lo, hi = runs["lo"].to_numpy(np.int64), runs["hi"].to_numpy(np.int64)
    walls = np.zeros(n * k, np.int64)
    np.add.at(walls, key, hi - lo)
    rlo = np.full(n * k, np.iinfo(np.int64).max, np.int64)
    rhi = np.full(n * k, -1, np.int64)
    np.minimum.at(rlo, key, lo)
    np.maximum.at(rhi, key, hi)
    none = rhi < 0
    start = np.repeat(steps["start"].to_numpy(np.int64), k)
    rlo[none], rhi[none] = start[none], start[none]
    out = {}
    for j, q in enumerate(phases):
        out[f"run_{q}"], out[f"rlo_{q}"], out[f"rhi_{q}"] = walls[j::k], rlo[j::k], rhi[j::k]
    return pd.DataFrame(out)


def overlap(own: pd.DataFrame, phases: list[str]) -> np.ndarray:
    """Per step: the time (ns) counted in more than one phase's own wall (the walls' sum minus
    the union of all activity)."""
    total = sum(own[f"own_{p}"].to_numpy(np.int64) for p in phases)
    return np.maximum(total - own["busy"].to_numpy(np.int64), 0)


#: How a step's phase walls are measured when they are not its tiling windows (its flag column
#: in the steps table -> what ``tracekit explain`` says).
WALL_MODES = {
    "phases_overlap": "phases overlap (DualPipe): wall = union of the phase's own activity",
    "phases_interleave": "micro-batches, no overlap: wall = sum of the phase's runs",
}


def wall_modes(steps: pd.DataFrame) -> dict[int, str]:
    """``{step: text}`` for the steps whose walls are not their tiling windows (:data:`WALL_MODES`)."""
    out = {}
    for col, text in WALL_MODES.items():
        if col in steps:
            out.update({int(s): text for s in steps.loc[steps[col].to_numpy(bool), "step"]})
    return out
