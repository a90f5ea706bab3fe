"""Phases that run at the same time: when a step's phase windows stop being its phases' walls.

Phase windows tile a step (docs/metrics.md): forward until the first backward activity,
backward until the first optimizer activity... That is each phase's wall as long as phases
take turns. Some schedules run them at the same time: DualPipe (DeepSeek V3) runs the forward
chunk of one micro-batch beside the backward chunk of another, on other streams; then the
forward's compute runs far past "the first backward activity" and a window cannot hold it
(compute would exceed wall).

A step's **phases overlap** when the compute of two phases runs at the same instants for more
than :data:`OVERLAP_FRACTION` of the step window, or when some phase's compute (the union of
the compute kernels its ops launched) is longer than its window (the table would say compute
> wall). In such a step each phase's wall is the measure of the union of its own activities
(every device activity its ops launched), its window's edges the first start and last end of
them; the walls then add up to more than the step, by :func:`overlap` (the time counted in
two walls), and the output says so. Every other step keeps the tiling windows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import measure_by
from .state import codes_of, str_test

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
        comp = str_test(acts["group"], lambda s: s == "compute")[keep]
    else:  # a frame with no group yet: every activity counts as compute
        comp = np.ones(len(row), bool)
    n, k = len(ids), len(phases)
    key = row * k + np.maximum(ph, 0)
    frame = pd.DataFrame({"key": key, "row": row, "start": start, "end": end})
    ok = ph >= 0
    own = _by_key(measure_by(frame[ok], ["key"]), n * k)
    own_c = _by_key(measure_by(frame[ok & comp], ["key"]), n * k)
    lo = np.full(n * k, np.iinfo(np.int64).max, np.int64)
    hi = np.full(n * k, -1, np.int64)
    np.minimum.at(lo, key[ok], start[ok])
    np.maximum.at(hi, key[ok], end[ok])
    lo[hi < 0] = -1
    out = {
        "compute": _by_key(measure_by(frame[comp], ["row"]), n),
        "busy": _by_key(measure_by(frame, ["row"]), n),
    }
    for j, p in enumerate(phases):
        out[f"own_{p}"], out[f"compute_{p}"] = own[j::k], own_c[j::k]
        out[f"lo_{p}"], out[f"hi_{p}"] = lo[j::k], hi[j::k]
    return pd.DataFrame(out)


def _by_key(measured: pd.Series, n: int) -> np.ndarray:
    """A measure per integer key 0..n-1 (0 where a key has none)."""
    out = np.zeros(n, np.int64)
    out[measured.index.to_numpy(np.int64)] = measured.to_numpy(np.int64)
    return out


def overlapping(own: pd.DataFrame, steps: pd.DataFrame, bounds: list[str], phases: list[str]) -> np.ndarray:
    """Per step: its phases overlap (see the module docstring)."""
    window = (steps["end"] - steps["start"]).to_numpy(np.int64)
    both = sum(own[f"compute_{p}"].to_numpy(np.int64) for p in phases) - own["compute"].to_numpy(np.int64)
    flagged = both > OVERLAP_FRACTION * window
    for k, p in enumerate(phases):
        wall = steps[bounds[k + 1]].to_numpy(np.int64) - steps[bounds[k]].to_numpy(np.int64)
        flagged |= own[f"compute_{p}"].to_numpy(np.int64) > wall
    return flagged


def overlap(own: pd.DataFrame, phases: list[str]) -> np.ndarray:
    """Per step: the time (ns) counted in more than one phase's own wall (the walls' sum minus
    the union of all activity)."""
    total = sum(own[f"own_{p}"].to_numpy(np.int64) for p in phases)
    return np.maximum(total - own["busy"].to_numpy(np.int64), 0)
