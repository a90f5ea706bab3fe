"""Step ``find_critical_path``: the chain of dependent work that sets each step's length.

The graph (HolisticTraceAnalysis 0.5's ``critical_path_analysis``, read, not copied):

* CPU work on each thread in time order (one thread runs one thing at a time);
* a launch (runtime call) before its device activity, joined by correlation id;
* device activities in stream order;
* a blocking synchronisation (:data:`SYNC_APIS`) ends after the last device activity it waits
  on: the device activity of the rank that ended last inside the call (the call's stream is not
  read, so any stream's);
* ``cudaStreamWaitEvent``: the next activity launched on the thread after the call depends on
  the activity launched on the thread, on another stream, last before the ``cudaEventRecord``
  that precedes the call (HTA's matching, without the ``cuda_sync`` events' stream arguments,
  which the reader does not decode);
* a collective is its kernel (kind ``comm``).

The path is walked backward from the step's end (the end of its device window, the ``idle``
table's window), taking at each activity the predecessor that finished last (the dependency
that gated it): its stream predecessor, the activity it waited on through an event, or its
launch call. From a launch the walk follows the launching thread back in time until a
synchronisation that waited on the device (it then continues at the activity waited on). Time
where the path waits with nothing of its own running is ``idle``. The walk hops once per run of
stream-ordered activities and once per CPU stretch: precomputed predecessor arrays make it
linear in the path's length (:mod:`tracekit.pipeline.critical_pieces` labels the pieces).
"""

from __future__ import annotations

import bisect

import numpy as np
import pandas as pd

from ..read.schema import RUNTIME
from .state import Trace, distinct_rows

#: Blocking synchronisations: the CPU waits in them until the device work ends.
SYNC_APIS = (
    "cudaStreamSynchronize",
    "cudaDeviceSynchronize",
    "cudaEventSynchronize",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
)
WAIT_APIS = ("cudaStreamWaitEvent", "hipStreamWaitEvent")
RECORD_APIS = ("cudaEventRecord", "hipEventRecord", "cudaEventRecordWithFlags", "hipEventRecordWithFlags")
#: A device activity's predecessor: none, its stream predecessor, an event, its launch call.
NONE, STREAM, WAIT, LAUNCH = range(4)
#: Walked segments: a run of stream-ordered activities, a launch, a CPU stretch, a sync's wait, idle.
RUN, SEG_LAUNCH, STRETCH, SYNC, IDLE = range(5)


def thread_codes(*pairs: tuple[np.ndarray, np.ndarray]) -> list[np.ndarray]:
    """One code per distinct (pid, tid) over every pair of arrays given, per array."""
    pid = np.concatenate([np.asarray(p, np.int64) for p, _ in pairs])
    tid = np.concatenate([np.asarray(t, np.int64) for _, t in pairs])
    key = distinct_rows(pid, tid)[0] if len(pid) else np.zeros(0, np.int64)
    cut = np.cumsum([len(p) for p, _ in pairs])[:-1]
    return np.split(key.astype(np.int64), cut)


def keyed(thread: np.ndarray, ts: np.ndarray, t0: int) -> np.ndarray:
    """A sort key of (thread, time): the thread in the high bits, the time since ``t0`` below."""
    return (thread.astype(np.int64) << 44) + (ts.astype(np.int64) - t0)


def predecessors(a: pd.DataFrame, wait_src: np.ndarray) -> dict:
    """Per device activity (rows of ``a``), sorted by stream then start: ``order`` (rows in that
    order), ``pos`` (each row's place in it), ``head`` (per place, the first place of its run of
    stream predecessors), ``reach`` (per place, the latest end so far on its stream), and
    per row ``ptype`` (:data:`STREAM`, :data:`WAIT`, :data:`LAUNCH`,
    :data:`NONE`): the launch when the call began after the device work before the activity
    had ended (the host was late), else the stream predecessor or event that ended last."""
    start, end = a["start"].to_numpy(np.int64), a["end"].to_numpy(np.int64)
    stream = a["stream"].to_numpy(np.int64)
    order = np.lexsort((start, stream))
    pos = np.empty(len(order), np.int64)
    pos[order] = np.arange(len(order))
    same = np.r_[False, stream[order][1:] == stream[order][:-1]]
    lowest = np.iinfo(np.int64).min
    prev_end = np.full(len(a), lowest)
    prev_end[order[same]] = end[order][:-1][same[1:]]
    has_wait = wait_src >= 0
    wait_end = np.where(has_wait, end[np.maximum(wait_src, 0)], lowest)
    launch_ts = a["launch_ts"].to_numpy(np.int64)
    launched = a["launched"].to_numpy(bool) & (launch_ts < start)
    # HTA's rule (and idle_causes' host wait): the launch gates the activity when the call
    # began after the device work it follows had ended; else the later of stream and event
    late = launched & (launch_ts >= np.maximum(prev_end, wait_end))
    on_device = np.where(wait_end > prev_end, WAIT, np.where(prev_end > lowest, STREAM, NONE))
    ptype = np.where(late, LAUNCH, np.where(on_device == NONE, np.where(launched, LAUNCH, NONE), on_device))
    head_mark = ptype[order] != STREAM
    head = np.maximum.accumulate(np.where(head_mark, np.arange(len(order)), 0))
    group = np.cumsum(~same)
    reach = pd.Series(end[order]).groupby(group).cummax().to_numpy(np.int64)
    return {"order": order, "pos": pos, "head": head, "ptype": ptype, "reach": reach}


def event_waits(t: Trace, a: pd.DataFrame, thread: np.ndarray, rt: dict) -> np.ndarray:
    """Per device activity, the activity it waits on through ``cudaStreamWaitEvent`` (-1: none)."""
    out = np.full(len(a), -1, np.int64)
    waits, records = rt["wait"], rt["record"]
    launched = np.flatnonzero(a["launched"].to_numpy(bool))
    if not waits.any() or not records.any() or not len(launched):
        return out
    t0 = rt["t0"]
    l_key = keyed(thread[launched], a["launch_ts"].to_numpy(np.int64)[launched], t0)
    o = np.argsort(l_key, kind="stable")
    l_key, l_row = l_key[o], launched[o]
    l_stream = a["stream"].to_numpy(np.int64)[l_row]
    run_start = np.maximum.accumulate(
        np.where(np.r_[True, l_stream[1:] != l_stream[:-1]], np.arange(len(o)), 0)
    )
    prev_other = run_start - 1  # the last launch before a place on another stream (or thread)
    r_key = np.sort(rt["key"][records])
    w_key = rt["key"][waits]
    nxt = np.searchsorted(l_key, w_key, "right")
    rec = np.searchsorted(r_key, w_key, "left") - 1
    ok = (nxt < len(l_key)) & (rec >= 0)
    nxt, rec, w_key = nxt[ok], rec[ok], w_key[ok]
    same_thread = ((l_key[nxt] >> 44) == (w_key >> 44)) & ((r_key[rec] >> 44) == (w_key >> 44))
    src = np.searchsorted(l_key, r_key[rec], "left") - 1
    src = np.where(
        (src >= 0) & (l_stream[np.maximum(src, 0)] == l_stream[nxt]), prev_other[np.maximum(src, 0)], src
    )
    good = same_thread & (src >= 0)
    good &= (l_key[np.maximum(src, 0)] >> 44) == (w_key >> 44)
    dest, source = l_row[nxt[good]], l_row[src[good]]
    keep = np.argsort(a["end"].to_numpy(np.int64)[source], kind="stable")  # the latest source wins
    out[dest[keep]] = source[keep]
    return out


def runtime_calls(t: Trace, launch_ev: np.ndarray) -> dict:
    """The runtime calls: their rows, threads, times and what they are (sync, wait, record, launch)."""
    ev = t.events
    rows = np.flatnonzero((ev["kind"].to_numpy() == RUNTIME) & (ev["dur"].to_numpy() > 0))
    names = pd.Series(t.names_of(rows), dtype=object)
    start = ev["ts"].to_numpy(np.int64)[rows]
    return {
        "rows": rows,
        "pid": ev["pid"].to_numpy()[rows],
        "tid": ev["tid"].to_numpy()[rows],
        "start": start,
        "end": start + ev["dur"].to_numpy(np.int64)[rows],
        "sync": names.isin(SYNC_APIS).to_numpy(),
        "wait": names.isin(WAIT_APIS).to_numpy(),
        "record": names.isin(RECORD_APIS).to_numpy(),
        "launch": np.isin(rows, launch_ev),
    }


def top_ranges(
    thread: np.ndarray, start: np.ndarray, end: np.ndarray, t0: int
) -> tuple[dict, np.ndarray, np.ndarray]:
    """Per thread, its top-level CPU ranges (the union of its ops and calls) as two sorted
    lists ``(starts, ends)``; and the sorted keys of every op's start with the latest keyed end
    so far (a point is inside some op of its thread when that reach passes it)."""
    k0, k1 = keyed(thread, start, t0), keyed(thread, end, t0)
    o = np.argsort(k0, kind="stable")
    k0, k1, th = k0[o], k1[o], thread[o]
    reach = np.maximum.accumulate(k1) if len(k1) else k1
    new = np.r_[True, k0[1:] >= reach[:-1]] if len(k0) else np.zeros(0, bool)
    first = np.flatnonzero(new)
    last_reach = np.r_[reach[first[1:] - 1], reach[-1:]] if len(first) else first
    tops: dict = {}
    for code in np.unique(th[first]).tolist():
        m = th[first] == code
        u = (k0[first][m] - (code << 44) + t0).tolist()
        v = (last_reach[m] - (code << 44) + t0).tolist()
        tops[code] = (u, v)
    return tops, k0, reach


def binding_syncs(rt: dict, a: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per sync call of ``rt`` that waited on the device: its row in ``rt`` and the device
    activity (row of ``a``) that ended last inside it."""
    s = np.flatnonzero(rt["sync"])
    end = a["end"].to_numpy(np.int64)
    by_end = np.argsort(end, kind="stable")
    i = np.searchsorted(end[by_end], rt["end"][s], "right") - 1
    w = by_end[np.maximum(i, 0)]
    ok = (i >= 0) & (end[w] > rt["start"][s]) if len(s) else np.zeros(0, bool)
    return s[ok], w[ok]


class Walker:
    """The backward walk over one rank's graph (see the module docstring): :meth:`walk` gives
    the segments of one step's path, ``(type, lo, hi, ref, ref2)`` each."""

    def __init__(self, a: pd.DataFrame, pred: dict, wait_src: np.ndarray, thread: np.ndarray, rt: dict):
        self.start = a["start"].to_numpy(np.int64).tolist()
        self.end = a["end"].to_numpy(np.int64).tolist()
        self.launch_ts = a["launch_ts"].to_numpy(np.int64).tolist()
        self.order, self.pos = pred["order"].tolist(), pred["pos"].tolist()
        self.head, self.ptype = pred["head"].tolist(), pred["ptype"].tolist()
        self.reach = pred["reach"].tolist()
        self.wait_src, self.thread = wait_src.tolist(), thread.tolist()
        s, w = binding_syncs(rt, a)
        o = np.lexsort((rt["end"][s], rt["thread"][s]))
        s, w = s[o], w[o]
        self.syncs: dict[int, tuple[list, list, list]] = {}
        for th in np.unique(rt["thread"][s]).tolist():
            m = rt["thread"][s] == th
            self.syncs[th] = (rt["end"][s][m].tolist(), s[m].tolist(), w[m].tolist())
        self.tops = rt["tops"]
        self.limit = 4 * (len(self.start) + len(s) + sum(len(u) for u, _ in self.tops.values())) + 8

    def _sync_before(self, th: int, t: int, lo: int) -> tuple[int, int, int] | None:
        """The last sync on thread ``th`` that waited on the device and ended by ``t`` (after
        ``lo``): (its end, its row, the activity waited on)."""
        ends, rows, acts = self.syncs.get(th, ((), (), ()))
        i = bisect.bisect_right(ends, t) - 1
        if i < 0 or ends[i] <= lo:
            return None
        return ends[i], rows[i], acts[i]

    def _handoff(self, th: int, lo: int, t: int) -> tuple[int, int]:
        """Thread ``th`` ran nothing over ``(lo, t]``: the other thread whose work ended last
        in there (it handed over), and that end; else ``th`` itself and ``lo``."""
        best, at = th, lo
        for other, (_, ends) in self.tops.items():
            if other == th:
                continue
            i = bisect.bisect_right(ends, t) - 1
            if i >= 0 and ends[i] > at:
                best, at = other, ends[i]
        return best, at

    def _on_thread(self, th: int, t: int, lo: int, segs: list) -> tuple[int, int, int]:
        """One hop back on thread ``th`` from ``t``: (time, activity or -1, thread or -1)."""
        starts, ends = self.tops.get(th, ((), ()))
        i = bisect.bisect_left(starts, t) - 1  # the last top-level range that began before t
        if i >= 0 and ends[i] >= t:  # inside it: back to its start or a sync that waited
            found = self._sync_before(th, t, max(starts[i], lo))
            if found is not None and self.start[found[2]] < found[0]:
                s_end, s_row, w = found
                w_end = min(self.end[w], s_end)
                segs.append((STRETCH, s_end, t, th, 0))
                segs.append((SYNC, w_end, s_end, s_row, th))
                return w_end, w, -1
            segs.append((STRETCH, max(starts[i], lo), t, th, 0))
            return max(starts[i], lo), -1, th
        gap_lo = max(ends[i] if i >= 0 else lo, lo)
        other, at = self._handoff(th, gap_lo, t)
        segs.append((STRETCH, at, t, th, 0))
        return at, -1, other

    def walk(
        self, root: int, lo: int, hi: int, thread: int | None = None
    ) -> list[tuple[int, int, int, int, int]]:
        """The segments of the path that ends at ``hi`` at activity ``root`` (or on ``thread``),
        back to ``lo``."""
        segs: list[tuple[int, int, int, int, int]] = []
        t, k, th = hi, root, -1  # at an activity (k >= 0) or on a thread (th >= 0)
        if thread is not None:
            k, th = -1, thread
        for _ in range(self.limit):
            if t <= lo:
                break
            if k >= 0:
                p = self.pos[k]
                h = self.head[p]
                first = self.order[h]
                if self.start[first] < lo:  # the run began before the window: only its part after lo
                    q = bisect.bisect_right(self.reach, lo, h, p + 1)
                    segs.append((RUN, lo, t, min(q, p), p))
                    t = lo
                    break
                segs.append((RUN, self.start[first], t, h, p))
                t, kind = self.start[first], self.ptype[first]
                if kind == LAUNCH and self.launch_ts[first] < t:
                    segs.append((SEG_LAUNCH, self.launch_ts[first], t, first, 0))
                    t, k, th = self.launch_ts[first], -1, self.thread[first]
                elif kind == WAIT and self.start[self.wait_src[first]] < t:
                    src = self.wait_src[first]
                    segs.append((IDLE, min(self.end[src], t), t, first, 0))
                    t, k = min(self.end[src], t), src
                else:
                    break
            else:
                before, was = t, th
                t, k, th = self._on_thread(th, t, lo, segs)
                if t >= before and k < 0 and th == was:
                    break
        if t > lo:
            segs.append((IDLE, lo, t, -1, 0))
        return segs
