"""Step ``add_shares``: each activity's exclusive share of busy time in each phase window."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import ShareClock
from .state import Trace, add_columns, as_str, str_column
from .windows import BOUNDS, PHASES

#: The values of ``acts.window``, in the order of their codes ("": outside every step).
WINDOW_VALUES = np.array([""] + list(PHASES), dtype=object)

#: Priority of a group when activities overlap: compute hides communication hides copies.
GROUP_LEVEL = {"compute": 0, "comm": 1, "memcpy": 2, "memset": 2}


def share_column(phase: str) -> str:
    return f"share_{phase}"


def add_shares(t: Trace) -> Trace:
    """Split every instant of busy time among the activities of its step running then.

    Needs: ``acts.step``, ``start``, ``end``, ``group``; ``t.steps`` (``start``,
    ``t_backward``, ``t_unattributed``, ``t_optimizer``, ``end`` per step).
    Adds: ``acts.window`` (the phase window the activity starts in; "" outside every step) and
    ``acts.share_forward``, ``share_backward``, ``share_unattributed``, ``share_optimizer``
    (ns, float): its share inside
    each phase window of its step, and ``acts.share_step``: its share of the whole step window
    (in a step whose phases overlap, a phase's shares are among its own activities: see
    :func:`_own_phase_shares`; in one whose phases interleave, inside the phase's runs:
    :func:`_run_shares`). At each instant the highest-priority group active there
    (compute, then communication, then copies) owns the instant, split equally among its
    active activities.
    Guarantees: per step and window, the shares of compute activities add up to the measure
    of their union, communication's to (union of comm) minus (union of compute), and all shares
    to the union of all activities. Steps never compete: each is placed on its own stretch of one
    clock, so the work is one vectorised pass whatever the number of steps.
    """
    a = t.acts
    n = len(a)
    st = t.steps.set_index("step")
    row = st.index.get_indexer(a["step"].to_numpy())
    ok = row >= 0
    cols = {ph: np.zeros(n, dtype=np.float64) for ph in PHASES}
    whole = np.zeros(n, dtype=np.float64)
    window = np.zeros(n, dtype=np.intp)  # codes into WINDOW_VALUES
    if ok.any():
        r = row[ok]
        bounds = [st[c].to_numpy(np.int64)[r] for c in BOUNDS]
        shift = _stretches(st)[r]
        s = a["start"].to_numpy(np.int64)[ok]
        e = a["end"].to_numpy(np.int64)[ok]
        level = a["group"].map(GROUP_LEVEL).to_numpy(np.int64)[ok]
        clock = ShareClock(s + shift, e + shift, level)
        for k, ph in enumerate(PHASES):
            cols[ph][ok] = clock.shares(bounds[k] + shift, bounds[k + 1] + shift)
        whole[ok] = clock.shares(bounds[0] + shift, bounds[-1] + shift)
        k = (s[:, None] >= np.stack(bounds[1:-1], axis=1)).sum(axis=1)
        window[ok] = k + 1
        if "phases_interleave" in st and st["phases_interleave"].any():
            _run_shares(t.runs, st, r, shift, clock, ok, cols)
        if "phases_overlap" in st and st["phases_overlap"].any():
            flagged = st["phases_overlap"].to_numpy(bool)[r]
            _own_phase_shares(a, ok, flagged, s + shift, e + shift, level, cols)
    new = {share_column(ph): cols[ph] for ph in PHASES}
    new["share_step"] = whole
    new["window"] = str_column(WINDOW_VALUES, window)
    t.acts = add_columns(a, new)
    return t


def _own_phase_shares(
    a: pd.DataFrame,
    ok: np.ndarray,
    flagged: np.ndarray,
    s: np.ndarray,
    e: np.ndarray,
    level: np.ndarray,
    cols: dict[str, np.ndarray],
) -> None:
    """In a step whose phases overlap (its wall per phase is the union of the phase's own
    activities, :mod:`tracekit.pipeline.overlap`), an activity's share of its phase's wall is
    its share among that phase's own activities, and it has none in the other phases: so a
    phase's shares add up to its own wall, as in every other step."""
    phase = as_str(a["phase"])[ok]
    for ph in PHASES:
        col = cols[ph][ok]
        col[flagged] = 0.0
        mine = flagged & (phase == ph)
        if mine.any():
            col[mine] = ShareClock(s[mine], e[mine], level[mine]).shares()
        cols[ph][ok] = col


def _run_shares(
    runs: pd.DataFrame,
    st: pd.DataFrame,
    r: np.ndarray,
    shift: np.ndarray,
    clock: ShareClock,
    ok: np.ndarray,
    cols: dict[str, np.ndarray],
) -> None:
    """In a step whose phases interleave (its wall per phase is the sum of the phase's runs,
    :mod:`tracekit.pipeline.overlap`), an activity's share of a phase is its share inside that
    phase's runs: the tiling windows' rule, run by run, so a phase's shares add up to its wall."""
    flagged = st["phases_interleave"].to_numpy(bool)[r]
    at = st.index.get_indexer(runs["step"].to_numpy())
    for ph in PHASES:
        col = cols[ph][ok]
        col[flagged] = 0.0
        mine = runs[(runs["phase"] == ph).to_numpy()]
        nth = mine.groupby("step").cumcount().to_numpy()
        pos = at[(runs["phase"] == ph).to_numpy()]
        for j in range(int(nth.max()) + 1 if len(nth) else 0):
            lo = np.zeros(len(st), np.int64)
            hi = np.zeros(len(st), np.int64)
            sel = nth == j
            lo[pos[sel]], hi[pos[sel]] = mine["lo"].to_numpy()[sel], mine["hi"].to_numpy()[sel]
            col[flagged] += clock.shares(lo[r] + shift, hi[r] + shift)[flagged]
        cols[ph][ok] = col


def _stretches(steps: pd.DataFrame) -> np.ndarray:
    """Per step (in ``steps`` order), the shift that moves its window onto its own stretch of
    one clock: step k starts where step k-1's window ends, plus 1 ns."""
    start = steps["start"].to_numpy(np.int64)
    span = np.maximum(steps["end"].to_numpy(np.int64) - start, 0) + 1
    base = np.concatenate([[0], np.cumsum(span)[:-1]]).astype(np.int64)
    return base - start
