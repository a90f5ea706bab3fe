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

from ..intervals import measure_by

#: Compute of two phases at the same instants beyond this share of the step window: overlap.
OVERLAP_FRACTION = 0.01


def own_activity(acts: pd.DataFrame, steps: pd.DataFrame, phases: list[str]) -> pd.DataFrame:
    """Per step (rows of ``steps``, same order) and phase: the measure (ns) of the union of
    the phase's own activities (``own_<p>``), of its compute (``compute_<p>``), its first
    start and last end (``lo_<p>``, ``hi_<p>``; -1 none), and of all compute (``compute``)."""
    keep = acts["step"].to_numpy() >= 0
    frame = pd.DataFrame(
        {
            "step": acts["step"].to_numpy()[keep],
            "phase": acts["phase"].astype(str).to_numpy()[keep],
            "start": acts["start"].to_numpy(np.int64)[keep],
            "end": acts["end"].to_numpy(np.int64)[keep],
            # (a frame with no group yet: every activity counts as compute)
            "compute": (
                (acts["group"].astype(str).to_numpy() == "compute")[keep]
                if "group" in acts
                else np.ones(keep.sum(), bool)
            ),
        }
    )
    ids = steps["step"].to_numpy()
    out = pd.DataFrame(index=pd.Index(ids, name="step"))
    comp = frame[frame["compute"].to_numpy()]
    out["compute"] = measure_by(comp, ["step"]).reindex(ids).fillna(0).to_numpy(np.int64)
    own = measure_by(frame, ["step", "phase"])
    own_c = measure_by(comp, ["step", "phase"])
    lo = frame.groupby(["step", "phase"])["start"].min()
    hi = frame.groupby(["step", "phase"])["end"].max()
    for p in phases:
        idx = pd.MultiIndex.from_arrays([ids, np.full(len(ids), p, dtype=object)])
        out[f"own_{p}"] = own.reindex(idx).fillna(0).to_numpy(np.int64)
        out[f"compute_{p}"] = own_c.reindex(idx).fillna(0).to_numpy(np.int64)
        out[f"lo_{p}"] = lo.reindex(idx).fillna(-1).to_numpy(np.int64)
        out[f"hi_{p}"] = hi.reindex(idx).fillna(-1).to_numpy(np.int64)
    return out.reset_index(drop=True)


def overlapping(own: pd.DataFrame, steps: pd.DataFrame, bounds: list[str], phases: list[str]) -> np.ndarray:
    """Per step: its phases overlap (see the module docstring)."""
    window = (steps["end"] - steps["start"]).to_numpy(np.int64)
    both = sum(own[f"compute_{p}"].to_numpy(np.int64) for p in phases) - own["compute"].to_numpy(np.int64)
    flagged = both > OVERLAP_FRACTION * window
    for k, p in enumerate(phases):
        wall = steps[bounds[k + 1]].to_numpy(np.int64) - steps[bounds[k]].to_numpy(np.int64)
        flagged |= own[f"compute_{p}"].to_numpy(np.int64) > wall
    return flagged


def overlap(own: pd.DataFrame, busy: np.ndarray, phases: list[str]) -> np.ndarray:
    """Per step: the time (ns) counted in more than one phase's own wall (the walls' sum minus
    the union of all activity, ``busy``)."""
    total = sum(own[f"own_{p}"].to_numpy(np.int64) for p in phases)
    return np.maximum(total - busy, 0)
