"""The critical path's synchronisation edges (:mod:`tracekit.pipeline.critical`), read from the
``cuda_sync`` events where the trace has them, inferred where it does not.

Recent Kineto records each synchronisation twice: its runtime call, and a ``cuda_sync`` event
(:data:`tracekit.read.schema.CUDA_SYNC`) with the call's correlation id, the ``stream`` it
synchronises (or that waits) and, for a CUDA event, ``wait_on_stream`` and
``wait_on_cuda_event_record_corr_id``. HolisticTraceAnalysis 0.5's rule (``critical_path_analysis``,
read, not copied):

* the work a CUDA event stands for: on ``wait_on_stream``, the last device activity whose
  launch began before the ``cudaEventRecord`` with that correlation id (any thread's launch);
* ``Stream Wait Event`` (``cudaStreamWaitEvent``): the next activity launched on the call's
  thread after it, on the event's ``stream``, waits for that work;
* ``Event Sync`` (``cudaEventSynchronize``, and ``cudaEventQuery``, which Kineto records so):
  the call ends after that work;
* ``Stream Sync``: the call ends after the activity on its ``stream`` that began last before
  the call's end;
* ``Context Sync``: after the rank's activity that ended last inside the call (the inference).

A call of a ``cuda_sync`` event but ``Stream Wait Event`` is a sync. A sync binds (the walk
jumps from its end to the work) only when that work ended inside the call. A call without a
``cuda_sync`` event, or whose event lacks the args (-1, or no ``cudaEventRecord`` of that
correlation id in the trace), keeps the inference (:func:`~tracekit.pipeline.critical.event_waits`,
:func:`~tracekit.pipeline.critical.binding_syncs`): old traces.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.schema import CUDA_SYNC
from .critical import binding_syncs, event_waits, keyed, thread_codes
from .state import Trace

SYNC_KINDS = ("Stream Wait Event", "Event Sync", "Stream Sync", "Context Sync")
WAIT_EV, EVENT_SYNC, STREAM_SYNC, CONTEXT_SYNC = range(4)


def sync_events(t: Trace, rt: dict) -> dict | None:
    """Per runtime call of ``rt``: ``kind`` (:data:`SYNC_KINDS`' index, -1: no ``cuda_sync``
    event), ``stream``, ``wait_stream`` and ``record_ts`` (the ``cudaEventRecord``'s start,
    -1: none); None when the trace has no ``cuda_sync`` event."""
    ev = t.events
    rows = np.flatnonzero(ev["kind"].to_numpy() == CUDA_SYNC)
    if not len(rows) or not len(rt["rows"]):
        return None
    codes, uniq = t.name_codes
    named = pd.Series(uniq, dtype=object).map({k: i for i, k in enumerate(SYNC_KINDS)})
    s_kind = named.fillna(-1).to_numpy(np.int64)[codes[rows]]
    corr = ev["corr"].to_numpy(np.int64)
    rt_corr = corr[rt["rows"]]
    call, found = _by_corr(rt_corr, corr[rows])
    found &= s_kind >= 0
    n = len(rt["rows"])
    out = {k: np.full(n, -1, np.int64) for k in ("kind", "stream", "wait_stream", "record_ts")}
    at = call[found]
    out["kind"][at] = s_kind[found]
    out["stream"][at] = ev["stream"].to_numpy(np.int64)[rows][found]
    out["wait_stream"][at] = ev["fwd_tid"].to_numpy(np.int64)[rows][found]  # wait_on_stream
    rec = np.flatnonzero(rt["record"])
    r_at, r_ok = _by_corr(rt_corr[rec], ev["seq"].to_numpy(np.int64)[rows][found])  # its record's
    out["record_ts"][at] = np.where(r_ok, rt["start"][rec[r_at]] if len(rec) else -1, -1)
    return out


def _by_corr(corr: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per wanted correlation id (>= 0), the index in ``corr`` that has it, and whether any."""
    o = np.argsort(corr, kind="stable")
    i = np.minimum(np.searchsorted(corr[o], wanted), max(len(o) - 1, 0))
    ok = (wanted >= 0) & (corr[o[i]] == wanted) if len(o) else np.zeros(len(wanted), bool)
    return (o[i] if len(o) else i), ok


def _last_before(stream: np.ndarray, ts: np.ndarray, q_stream: np.ndarray, q_ts: np.ndarray, t0: int):
    """Per query, the index of the last of (``stream``, ``ts``) on its stream before its time,
    -1: none."""
    code, q_code = thread_codes((stream, stream), (q_stream, q_stream))
    key = keyed(code, np.maximum(ts, t0), t0)
    o = np.argsort(key, kind="stable")
    q = keyed(q_code, np.maximum(q_ts, t0), t0)
    i = np.searchsorted(key[o], q, "left") - 1
    j = o[np.maximum(i, 0)] if len(o) else np.zeros(len(q), np.int64)
    ok = (i >= 0) & (code[j] == q_code) if len(o) else np.zeros(len(q), bool)
    return np.where(ok, j, -1)


def _event_work(a: pd.DataFrame, se: dict, calls: np.ndarray, t0: int) -> np.ndarray:
    """Per call, the device activity its CUDA event stands for (-1: none)."""
    launched = np.flatnonzero(a["launched"].to_numpy(bool))
    stream = a["stream"].to_numpy(np.int64)[launched]
    j = _last_before(
        stream,
        a["launch_ts"].to_numpy(np.int64)[launched],
        se["wait_stream"][calls],
        se["record_ts"][calls],
        t0,
    )
    return np.where(j >= 0, launched[np.maximum(j, 0)], -1)


def sync_edges(t: Trace, a: pd.DataFrame, thread: np.ndarray, rt: dict) -> tuple[tuple, np.ndarray]:
    """The binding syncs (rows of ``rt``, activities waited on) and, per device activity, the
    activity it waits on through an event (-1: none); widens ``rt["sync"]`` to the calls of
    ``cuda_sync`` events (see the module docstring)."""
    se = sync_events(t, rt)
    if se is None:
        return binding_syncs(rt, a), event_waits(t, a, thread, rt)
    t0, kind = rt["t0"], se["kind"]
    has_event = (se["wait_stream"] >= 0) & (se["record_ts"] >= 0)
    rt["sync"] = rt["sync"] | ((kind >= EVENT_SYNC) & (kind <= CONTEXT_SYNC))
    told = ((kind == EVENT_SYNC) & has_event) | ((kind == STREAM_SYNC) & (se["stream"] >= 0))
    s_inf, w_inf = binding_syncs({**rt, "sync": rt["sync"] & ~told}, a)
    s_arg = np.flatnonzero(told)
    w_arg = np.where(kind[s_arg] == EVENT_SYNC, _event_work(a, se, s_arg, t0), -1)
    ss = s_arg[kind[s_arg] == STREAM_SYNC]
    w_arg[kind[s_arg] == STREAM_SYNC] = _last_before(
        a["stream"].to_numpy(np.int64), a["start"].to_numpy(np.int64), se["stream"][ss], rt["end"][ss], t0
    )
    end = a["end"].to_numpy(np.int64)
    w_end = end[np.maximum(w_arg, 0)] if len(end) else w_arg
    ok = (w_arg >= 0) & (w_end > rt["start"][s_arg]) & (w_end <= rt["end"][s_arg])
    syncs = (np.r_[s_inf, s_arg[ok]], np.r_[w_inf, w_arg[ok]])
    w_told = (kind == WAIT_EV) & has_event & (se["stream"] >= 0)
    wait_src = event_waits(t, a, thread, {**rt, "wait": rt["wait"] & ~w_told})
    _stream_waits(a, thread, rt, se, np.flatnonzero(w_told), wait_src)
    return syncs, wait_src


def _stream_waits(a: pd.DataFrame, thread: np.ndarray, rt: dict, se: dict, calls: np.ndarray, out) -> None:
    """Into ``out``: per ``Stream Wait Event`` call with its args, the next activity launched on
    its thread after it, on its stream, waits on its event's work (the latest such wins)."""
    launched = np.flatnonzero(a["launched"].to_numpy(bool) & (thread >= 0))
    if not len(calls) or not len(launched):
        return
    t0 = rt["t0"]
    stream = a["stream"].to_numpy(np.int64)
    pair, q_pair = thread_codes(
        (thread[launched], stream[launched]), (rt["thread"][calls], se["stream"][calls])
    )
    key = keyed(pair, a["launch_ts"].to_numpy(np.int64)[launched], t0)
    o = np.argsort(key, kind="stable")
    i = np.searchsorted(key[o], keyed(q_pair, rt["start"][calls], t0), "right")
    j = o[np.minimum(i, len(o) - 1)]
    dest = np.where((i < len(o)) & (pair[j] == q_pair), launched[j], -1)
    src = _event_work(a, se, calls, t0)
    good = (dest >= 0) & (src >= 0) & (src != dest)
    dest, src = dest[good], src[good]
    keep = np.argsort(a["end"].to_numpy(np.int64)[src], kind="stable")
    out[dest[keep]] = src[keep]
