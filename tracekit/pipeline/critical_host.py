"""The CPU side of the critical path (:mod:`tracekit.pipeline.critical`): one rank's threads.

Every thread's top-level ranges (the union of its ``cpu_op`` events and runtime calls), the time
spent in launching calls and in sync calls as prefix sums (so the time of each kind over any
span of a thread is two lookups), and the jumps a backward walk takes off a thread: at the end
of a sync call that waited on the device (to the activity waited on), and at a gap where the
thread ran nothing while another launching thread's work ended (the hand-off, to that thread).
Times are keyed by thread (:func:`~tracekit.pipeline.critical.keyed`): one sorted array serves
every thread.
"""

from __future__ import annotations

import numpy as np

from .critical import keyed

#: Jumps off a thread: to the device activity a sync waited on, to another thread.
JUMP_SYNC, JUMP_HANDOFF = 0, 1
SHIFT = 44


def by_thread_then_time(thread: np.ndarray, ts: np.ndarray) -> np.ndarray:
    """The order of events by (thread, time): a stable sort by time (linear on events that
    come nearly in time order, as traces write them), then by thread (a radix sort on the
    small thread codes)."""
    o = np.argsort(ts, kind="stable")
    small = thread.astype(np.int16) if len(thread) and thread.max() < 1 << 15 else thread
    return o[np.argsort(small[o], kind="stable")]


def _prefix(starts: np.ndarray, ends: np.ndarray, cum: np.ndarray, key: np.ndarray, mask=None) -> np.ndarray:
    """Per key, the total length of the (disjoint, sorted) spans ``[starts, ends)`` before it
    (``mask``: only those spans); ``cum``: their exclusive prefix sums."""
    if not len(starts):
        return np.zeros(len(key), np.int64)
    i = np.searchsorted(starts, key, "right") - 1
    j = np.maximum(i, 0)
    part = np.clip(key - starts[j], 0, ends[j] - starts[j])
    if mask is not None:
        part = np.where(mask[j], part, 0)
    return np.where(i >= 0, cum[j] + part, 0)


class Host:
    """See the module docstring. ``u``/``v``: keyed starts and ends of the top-level ranges."""

    def __init__(self, c_th: np.ndarray, c_start: np.ndarray, c_end: np.ndarray, rt: dict, t0: int):
        self.t0 = t0
        k0, k1 = keyed(c_th, c_start, t0), keyed(c_th, c_end, t0)
        o = by_thread_then_time(c_th, c_start)
        k0, k1 = k0[o], k1[o]
        reach = np.maximum.accumulate(k1) if len(k1) else k1
        first = np.flatnonzero(np.r_[True, k0[1:] >= reach[:-1]]) if len(k0) else np.zeros(0, np.int64)
        self.u = k0[first]
        self.v = np.r_[reach[first[1:] - 1], reach[-1:]] if len(first) else first
        self.cover = np.r_[0, np.cumsum(self.v - self.u)]
        o = by_thread_then_time(rt["thread"], rt["start"])
        self.r0 = rt["key"][o]
        dur = (rt["end"] - rt["start"])[o]
        self.r1 = self.r0 + dur
        self.launch, self.sync = rt["launch"][o], rt["sync"][o]
        self.cum_launch = np.r_[0, np.cumsum(np.where(self.launch, dur, 0))]
        self.cum_sync = np.r_[0, np.cumsum(np.where(self.sync, dur, 0))]

    def key(self, th, ts) -> np.ndarray:
        return keyed(np.asarray(th, np.int64), np.asarray(ts, np.int64), self.t0)

    def times(self, key_lo: np.ndarray, key_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over each span (keys on one thread): ns in a launching call, in a sync call, in any
        op or call."""
        launch = _prefix(self.r0, self.r1, self.cum_launch, key_hi, self.launch)
        launch = launch - _prefix(self.r0, self.r1, self.cum_launch, key_lo, self.launch)
        sync = _prefix(self.r0, self.r1, self.cum_sync, key_hi, self.sync)
        sync = sync - _prefix(self.r0, self.r1, self.cum_sync, key_lo, self.sync)
        busy = _prefix(self.u, self.v, self.cover, key_hi) - _prefix(self.u, self.v, self.cover, key_lo)
        return launch, sync, busy

    def range_of(self, th, ts) -> np.ndarray:
        """The top-level range (index into ``u``) open or last begun at each point, -1 none."""
        i = np.searchsorted(self.u, self.key(th, ts), "right") - 1
        ok = (
            (i >= 0) & ((self.u[np.maximum(i, 0)] >> SHIFT) == np.asarray(th, np.int64))
            if len(self.u)
            else i >= 0
        )
        return np.where(ok, i, -1)

    def jumps(self, rt: dict, syncs: tuple, end: np.ndarray, launching: np.ndarray) -> dict:
        """Every jump off a thread, sorted by the keyed time the walk leaves the thread at:
        ``key``, ``type`` (:data:`JUMP_SYNC`, :data:`JUMP_HANDOFF`), ``a`` (the sync's row of
        ``rt`` / the thread handed over to), ``b`` (the activity waited on / the time there)."""
        s, w = syncs
        s_key = keyed(rt["thread"][s], rt["end"][s], self.t0)
        g_th = self.u >> SHIFT
        g_hi = self.u - (g_th << SHIFT) + self.t0
        prev_same = np.r_[False, g_th[1:] == g_th[:-1]] if len(g_th) else g_th.astype(bool)
        g_lo = np.where(prev_same, np.r_[0, self.v[:-1]] - (g_th << SHIFT) + self.t0, np.iinfo(np.int64).min)
        v_th = self.v >> SHIFT
        on = np.isin(v_th, launching)  # hand-offs go to threads that launch device work
        e_raw = (self.v - (v_th << SHIFT) + self.t0)[on]
        e_th = v_th[on]
        o = np.argsort(e_raw, kind="stable")
        e_raw, e_th = e_raw[o], e_th[o]
        i = np.searchsorted(e_raw, g_hi, "right") - 1
        j = np.maximum(i, 0)
        hand = (i >= 0) & (e_th[j] != g_th) & (e_raw[j] > g_lo) if len(e_raw) else np.zeros(len(g_hi), bool)
        h = np.flatnonzero(hand)
        key = np.r_[s_key, keyed(g_th[h], e_raw[j[h]], self.t0)]
        o = np.argsort(key, kind="stable")
        return {
            "key": key[o],
            "type": np.r_[np.full(len(s), JUMP_SYNC), np.full(len(h), JUMP_HANDOFF)][o],
            "a": np.r_[s, e_th[j[h]]][o],
            "b": np.r_[w, e_raw[j[h]]][o],
        }
