"""Why each stream was idle, per step and phase: HolisticTraceAnalysis 0.5's idle-time rules.

Per stream (a device activity is a kernel, memcpy or memset), in start order: a gap runs from
the end of the activity that ended last so far to the start of the next activity B. There is
no gap before a stream's first activity or after its last. Each gap has one cause, from B:

* ``host_wait``: B's launching runtime call began after the gap began (the host had not yet
  asked for B); an activity with no launching call is never a host wait;
* ``kernel_wait``: otherwise, a gap shorter than :data:`KERNEL_WAIT_US` (30 us; HTA's
  ``consecutive_kernel_delay=30`` is compared with microsecond times, though its docs say ns);
* ``other``: everything else (B waited on another stream, an event, a collective...).

Each gap is clipped to the phase windows of the complete steps it overlaps (the ``idle``
table's step windows, split at the phase walls): ``idle_ms`` per step, phase, stream, cause.
A trace without runtime calls (CPU-only, or device activity with no launch at all) has no rows:
without launches there is no host side to tell a host wait from the others (a notice says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._common import text
from ._groups import whole_sums
from ._registry import MS, register

#: Gaps under this (microseconds) whose activity was launched before the gap are kernel waits.
KERNEL_WAIT_US = 30.0
CAUSES = np.array(["host_wait", "kernel_wait", "other"], dtype=object)
COLUMNS = ["step", "phase", "stream", "cause", "idle_ms"]
#: Device activity kinds (:mod:`tracekit.read.schema`: kernel, memcpy, memset).
DEVICE_KINDS = (0, 1, 2)


def has_launches(intervals: pd.DataFrame) -> bool:
    """Whether the intervals are device activities some of which have a launching call."""
    if intervals.empty or "launched" not in intervals:
        return False
    device = np.isin(intervals["kind"].to_numpy(), DEVICE_KINDS)
    return bool(device.all() and intervals["launched"].to_numpy(bool).any())


def stream_gaps(intervals: pd.DataFrame, kernel_wait_us: float = KERNEL_WAIT_US) -> pd.DataFrame:
    """Every gap of every stream: ``stream``, ``lo``, ``hi`` (ns), ``cause`` (index into
    :data:`CAUSES`), vectorised over the activities (sorted by stream, then start)."""
    stream = intervals["stream"].to_numpy()
    start = intervals["start"].to_numpy(np.int64)
    order = np.lexsort((start, stream))
    s, st = stream[order], start[order]
    en = intervals["end"].to_numpy(np.int64)[order]
    group = np.cumsum(np.r_[True, s[1:] != s[:-1]]) if len(s) else np.zeros(0, np.int64)
    # the end of the activity that ended last so far on the stream, before each activity
    reach = pd.Series(en).groupby(group).cummax().to_numpy(np.int64)
    prev = np.r_[np.int64(0), reach[:-1]] if len(s) else reach
    gap = np.r_[False, group[1:] == group[:-1]] & (st > prev)
    launched = intervals["launched"].to_numpy(bool)[order][gap]
    call = intervals["launch_ts"].to_numpy(np.int64)[order][gap]
    lo, hi = prev[gap], st[gap]
    host = launched & (call > lo)
    short = (hi - lo) < round(kernel_wait_us * 1000)
    cause = np.where(host, 0, np.where(short, 1, 2))
    return pd.DataFrame({"stream": s[gap], "lo": lo, "hi": hi, "cause": cause})


def clip_to_windows(lo: np.ndarray, hi: np.ndarray, wlo: np.ndarray, whi: np.ndarray) -> tuple:
    """Pieces of the spans ``[lo, hi)`` inside the windows ``[wlo, whi)`` (which may overlap):
    (span index, window index, length in ns) per piece. Spans are cut at every window edge into
    elementary segments; each segment joins the windows that cover it."""
    bounds = np.unique(np.concatenate([wlo, whi]))
    if not len(bounds) or not len(lo):
        none = np.zeros(0, np.int64)
        return none, none, none
    a = np.searchsorted(bounds, lo, "right")
    b = np.searchsorted(bounds, hi, "left")
    n = np.maximum(b - a, 0) + 1
    span = np.repeat(np.arange(len(lo)), n)
    j = np.arange(len(span)) - np.repeat(np.cumsum(n) - n, n)
    seg = a[span] - 1 + j
    p_lo = np.where(j == 0, lo[span], bounds[np.clip(seg, 0, len(bounds) - 1)])
    p_hi = np.where(j == n[span] - 1, hi[span], bounds[np.clip(seg + 1, 0, len(bounds) - 1)])
    # the segments each window covers: [bounds[first], bounds[last + 1])
    first = np.searchsorted(bounds, wlo, "left")
    count = np.maximum(np.searchsorted(bounds, whi, "left") - first, 0)
    win = np.repeat(np.arange(len(wlo)), count)
    w_seg = np.repeat(first, count) + np.arange(len(win)) - np.repeat(np.cumsum(count) - count, count)
    if len(np.unique(w_seg)) == len(w_seg):  # windows that tile: a segment has one window
        of_seg = np.full(len(bounds) + 1, -1, np.int64)
        of_seg[w_seg] = win
        w = of_seg[np.where(seg >= 0, seg, len(bounds))]
        piece = np.flatnonzero(w >= 0)
        return span[piece], w[piece], (p_hi - p_lo)[piece]
    pieces = pd.DataFrame({"seg": seg, "piece": np.arange(len(seg))})
    joined = pieces.merge(pd.DataFrame({"seg": w_seg, "win": win}), on="seg", how="inner")
    piece = joined["piece"].to_numpy()
    return span[piece], joined["win"].to_numpy(), (p_hi - p_lo)[piece]


def causes(intervals: pd.DataFrame, windows: Windows, kernel_wait_us: float = KERNEL_WAIT_US) -> pd.DataFrame:
    """The ``idle_causes`` rows (see the module docstring) with a settable kernel-wait threshold."""
    if not has_launches(intervals) or windows.phases.empty:
        return pd.DataFrame(columns=COLUMNS)
    gaps = stream_gaps(intervals, kernel_wait_us)
    ph = windows.phases
    g, w, length = clip_to_windows(
        gaps["lo"].to_numpy(), gaps["hi"].to_numpy(), ph["lo"].to_numpy(np.int64), ph["hi"].to_numpy(np.int64)
    )
    keep = length > 0
    # integer keys: the pieces summed by key, the labels go on the few rows
    (win, stream, cause), ns = whole_sums(
        [w[keep], gaps["stream"].to_numpy()[g[keep]], gaps["cause"].to_numpy()[g[keep]]], length[keep]
    )
    out = pd.DataFrame(
        {
            "step": ph["step"].to_numpy()[win],
            "phase": ph["phase"].astype(str).to_numpy()[win],
            "stream": stream,
            "cause": CAUSES[cause],
            "idle_ms": ns / 1e6,
        }
    )
    out = out.sort_values(["step", "phase", "stream", "cause"], kind="stable", ignore_index=True)
    out["phase"] = text(out["phase"])
    out["stream"] = out["stream"].astype(str)
    return out[COLUMNS]


@register(
    "idle_causes",
    title="Idle causes per stream (HTA rules)",
    keys=("phase", "stream", "cause"),
    values={"idle_ms": MS},
    chart="stacked",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    return causes(intervals, windows)
