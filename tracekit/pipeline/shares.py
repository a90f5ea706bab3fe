"""Step ``add_shares``: each activity's exclusive share of busy time in each phase window."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .intervals import ShareClock
from .state import Trace, add_columns, str_column
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
    :func:`_own_phase_shares`). At each instant the highest-priority group active there
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
        own = _own_walls(st)
        if own.any():
            _own_phase_shares(a, ok, own[r], s + shift, e + shift, level, cols)
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
    activities, :mod:`tracekit.pipeline.overlap`) or interleave (the sum of its runs), an
    activity's share of its phase's wall is
    its share among that phase's own activities, and it has none in the other phases: so a
    phase's shares add up to its own wall, as in every other step."""
    phase = a["phase"].astype(str).to_numpy()[ok]
    for ph in PHASES:
        col = cols[ph][ok]
        col[flagged] = 0.0
        mine = flagged & (phase == ph)
        if mine.any():
            col[mine] = ShareClock(s[mine], e[mine], level[mine]).shares()
        cols[ph][ok] = col


def _own_walls(steps: pd.DataFrame) -> np.ndarray:
    """Per step: its phase walls are not its tiling windows (its phases overlap, or interleave:
    :mod:`tracekit.pipeline.overlap`), so a phase's shares are among its own activities."""
    out = np.zeros(len(steps), bool)
    for col in ("phases_overlap", "phases_interleave"):
        if col in steps:
            out |= steps[col].to_numpy(bool)
    return out


def _stretches(steps: pd.DataFrame) -> np.ndarray:
    """Per step (in ``steps`` order), the shift that moves its window onto its own stretch of
    one clock: step k starts where step k-1's window ends, plus 1 ns."""
    start = steps["start"].to_numpy(np.int64)
    span = np.maximum(steps["end"].to_numpy(np.int64) - start, 0) + 1
    base = np.concatenate([[0], np.cumsum(span)[:-1]]).astype(np.int64)
    return base - start
