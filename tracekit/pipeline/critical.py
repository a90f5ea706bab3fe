"""The critical path's graph and its backward walk: the chain of dependent work that sets each
step's length (the step: :mod:`tracekit.pipeline.critical_step`).

The graph (HolisticTraceAnalysis 0.5's ``critical_path_analysis``, read, not copied):

* CPU work on each thread in time order (one thread runs one thing at a time);
* a launch (runtime call) before its device activity, joined by correlation id;
* device activities in stream order;
* a blocking synchronisation (:data:`SYNC_APIS`) ends after the last device activity it waits
  on; ``cudaStreamWaitEvent``: an activity launched after it waits on the event's work. What
  was waited on comes from the ``cuda_sync`` events' args where a call has them
  (:mod:`tracekit.pipeline.critical_sync`), else it is inferred here: a sync, on the rank's
  activity that ended last inside the call (any stream's); a wait, the next activity launched
  on the thread after the call depends on the activity launched on the thread, on another
  stream, last before the ``cudaEventRecord`` that precedes the call;
* a collective is its kernel (kind ``comm``).

The path is walked backward from the step's end (the end of its device window, the ``idle``
table's window). At an activity it takes the dependency that gated it: its launch when the call
began after the device work before it had ended (the host was late), else its stream
predecessor or the activity it waited on through an event, whichever ended last. From a launch
it follows the launching thread back to its last jump (:mod:`tracekit.pipeline.critical_host`):
a synchronisation that waited on the device (then the activity waited on), or a gap where the
thread ran nothing while another launching thread's work ended (then that thread). Time where
the path waits with nothing of its own running is ``idle``. The walk hops once per run of
stream-ordered activities and once per jump, over precomputed arrays: linear in the path's
length (:mod:`tracekit.pipeline.critical_pieces` cuts and labels the pieces).
"""

from __future__ import annotations

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
    codes, uniq = t.name_codes
    names = pd.Series(uniq, dtype=object)  # tested once per distinct name
    start = ev["ts"].to_numpy(np.int64)[rows]
    return {
        "rows": rows,
        "pid": ev["pid"].to_numpy()[rows],
        "tid": ev["tid"].to_numpy()[rows],
        "start": start,
        "end": start + ev["dur"].to_numpy(np.int64)[rows],
        "sync": names.isin(SYNC_APIS).to_numpy()[codes[rows]],
        "wait": names.isin(WAIT_APIS).to_numpy()[codes[rows]],
        "record": names.isin(RECORD_APIS).to_numpy()[codes[rows]],
        "launch": np.isin(rows, launch_ev),
    }


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
    the segments of one step's path, ``(type, lo, hi, ref, ref2)`` each. ``host``: the CPU side
    (:class:`tracekit.pipeline.critical_host.Host`), ``jumps`` its jumps off a thread."""

    def __init__(
        self, a: pd.DataFrame, pred: dict, wait_src: np.ndarray, thread: np.ndarray, host, jumps: dict
    ):
        self.start = a["start"].to_numpy(np.int64)
        self.end = a["end"].to_numpy(np.int64)
        self.launch_ts = a["launch_ts"].to_numpy(np.int64)
        self.order, self.pos, self.head = pred["order"], pred["pos"], pred["head"]
        self.ptype, self.reach = pred["ptype"], pred["reach"]
        self.wait_src, self.thread = wait_src, thread
        self.host, self.jumps = host, jumps
        self.limit = 4 * (len(self.start) + len(jumps["key"])) + 8

    def _device(self, k: int, t: int, lo: int, segs: list) -> tuple[int, int, int]:
        """One hop back from activity ``k`` (covered up to ``t``): (time, activity, thread)."""
        p = int(self.pos[k])
        h = int(self.head[p])
        first = int(self.order[h])
        if self.start[first] < lo:  # the run began before the window: only its part after lo
            q = int(np.searchsorted(self.reach[h : p + 1], lo, "right")) + h
            segs.append((RUN, lo, t, min(q, p), p))
            return lo, -1, -1
        top, t = t, int(self.start[first])
        segs.append((RUN, t, top, h, p))
        kind = self.ptype[first]
        if kind == LAUNCH and self.launch_ts[first] < t:
            ls = int(self.launch_ts[first])
            segs.append((SEG_LAUNCH, ls, t, first, 0))
            return ls, -1, int(self.thread[first])
        if kind == WAIT and self.start[self.wait_src[first]] < t:
            src = int(self.wait_src[first])
            at = min(int(self.end[src]), t)
            segs.append((IDLE, at, t, first, 0))
            return at, src, -1
        return t, -1, -1

    def _thread(self, th: int, t: int, lo: int, segs: list) -> tuple[int, int, int]:
        """One hop back on thread ``th`` from ``t``: to the last jump off it (a sync that waited
        on the device, a hand-off), or to ``lo``."""
        j = self.jumps
        key = int(self.host.key(th, t))
        i = int(np.searchsorted(j["key"], key, "right")) - 1
        leave = int(j["key"][i] - (th << 44) + self.host.t0) if i >= 0 else lo
        if i < 0 or (int(j["key"][i]) >> 44) != th or leave <= lo:
            segs.append((STRETCH, lo, t, th, 0))
            return lo, -1, -1
        segs.append((STRETCH, leave, t, th, 0))
        if j["type"][i] == 1:  # hand-off: the other thread, at its work's end
            return leave, -1, int(j["a"][i])
        w = int(j["b"][i])
        w_end = min(int(self.end[w]), leave)
        if self.start[w] >= w_end:
            return leave, -1, -1
        segs.append((SYNC, w_end, leave, int(j["a"][i]), th))
        return w_end, w, -1

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
            if t <= lo or (k < 0 and th < 0):
                break
            before, was = t, th
            if k >= 0:
                t, k, th = self._device(k, t, lo, segs)
            else:
                t, k, th = self._thread(th, t, lo, segs)
                if t >= before and k < 0 and th == was:
                    break
        if t > lo:
            segs.append((IDLE, lo, t, -1, 0))
        return segs
