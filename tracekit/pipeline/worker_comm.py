"""CPU traces: a collective's work on gloo's worker thread, and the call that queued it.

How gloo's work appears in a Kineto trace (torch 2.13, CPU, DDP / FSDP1 / FSDP2 on 2 ranks):

* the call is a ``c10d::*`` op on the calling thread (``c10d::allreduce_``,
  ``c10d::_allgather_base_``, ``c10d::_reduce_scatter_base_``, ``c10d::allgather_``); gloo
  records no ``record_param_comms``, no ``Seq`` and no process group;
* the work is a ``gloo:<op>`` ``user_annotation`` range on one of the process group's worker
  threads (``pt_gloo_runloop``, though the thread's name may say ``python``), outside every op of
  that thread, starting after the call started (usually while it runs);
* the range holds the CPU ops gloo runs for it: an all-gather's ``aten::view`` / ``empty`` /
  ``select`` / ``copy_``, a reduce-scatter's ``aten::div_`` / ``to`` / ``copy_``;
* the range is named by what gloo runs, not by what was called: ``c10d::_reduce_scatter_base_``
  runs as ``gloo:all_reduce``.

So one collective is one call, one worker range and the ops inside it. The rule here: the
range and every op nested in it are launched by the call (its step, phase and context are the
call's, as a GPU collective's are its launching call's) and count 0: the call counts the
collective once. A range with no call in the trace (queued before the profiler's window, or
a trace of a torch that records none) launches itself and counts once, and the ops inside it
are still its own (launched by it, counted 0).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.reader import ANNOTATION, CPU_OP
from .intervals import containing, ends_before
from .state import Trace, row_codes

#: CPU ops that issue a collective (the c10d dispatcher op, DeepSpeed/torch's comms record).
ENQUEUE_PREFIXES = ("c10d::", "record_param_comms")


def worker_launches(
    t: Trace, kind: np.ndarray, act: np.ndarray, first: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Per CPU self-time piece (event rows ``act``; ``first``: the op's counted piece), the event
    row that launched it and the collective calls it counts (module docstring): its own op
    and its ``first`` flag, except that

    * the pieces of a worker's collective range (a collective range outside every op of its own
      thread) and of the ops nested in it are launched by the call that queued the range (the
      collective op of its process that started last at or before the range; the range itself
      when there is none);
    * one collective counts once: an op nested in a collective op or range (the c10d op's own
      ``aten::chunk``/``empty``, gloo's ``aten::copy_``) counts 0, and so does a worker's range
      that has a call (the call counts it). A collective record nested in another
      (``record_param_comms`` in a ``c10d::`` op, an ``nccl:*`` range in it) keeps its count."""
    launch, count = act.copy(), first.astype(np.int64)  # count: collective calls
    ev = t.events
    pid, tid, ts = (ev[c].to_numpy() for c in ("pid", "tid", "ts"))
    end = ts + ev["dur"].to_numpy()
    ops = np.flatnonzero(kind == CPU_OP)
    rng = np.unique(act[kind[act] == ANNOTATION])
    calls = ops[t.name_test(lambda s: s.str.startswith(ENQUEUE_PREFIXES))[ops]]
    if not len(rng) and not len(calls):
        return launch, count
    thr = _thread_codes(pid, tid, np.concatenate([ops, rng, calls, act]))
    op_thr, rng_thr, call_thr, act_thr = np.split(thr, np.cumsum([len(ops), len(rng), len(calls)]))
    worker = containing(rng_thr, ts[rng], op_thr, ts[ops], end[ops]) < 0
    outer = _outermost(np.append(call_thr, rng_thr[worker]), np.append(calls, rng[worker]), ts, end)
    part = containing(act_thr, ts[act], *outer) >= 0  # inside a collective call: its part
    count[part & (kind[act] == CPU_OP) & ~np.isin(act, calls)] = 0
    if worker.any():
        queued = _queued_by(pid, ts, rng[worker], calls)
        w = rng[worker]
        holder = containing(act_thr, ts[act], rng_thr[worker], ts[w], end[w])
        held = holder >= 0
        launch[held] = np.where(queued >= 0, queued, w)[holder[held]]
        count[held & (queued[np.maximum(holder, 0)] >= 0)] = 0
    return launch, count


def _outermost(thr: np.ndarray, rows: np.ndarray, ts: np.ndarray, end: np.ndarray) -> tuple:
    """(thread, start + 1, end) of the event ``rows`` (threads ``thr``) that no other of them
    encloses on their thread: the ranges whose inside (after their first instant) is theirs."""
    order = np.lexsort((-end[rows], ts[rows], thr))
    thr, rows = thr[order], rows[order]
    first = np.ones(len(thr), bool)
    first[1:] = thr[1:] != thr[:-1]
    top = ts[rows] >= ends_before(end[rows], first, -1)
    return thr[top], ts[rows][top] + 1, end[rows][top]


def _thread_codes(pid: np.ndarray, tid: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """One int64 code per (pid, tid) of the event ``rows``, so containment is per thread."""
    return row_codes(pid[rows], tid[rows])


def _queued_by(pid: np.ndarray, ts: np.ndarray, worker: np.ndarray, calls: np.ndarray) -> np.ndarray:
    """Per worker range, the collective op (``calls``) of its process that started last at or
    before it (the work cannot start before it is queued), -1 none."""
    if not len(calls):
        return np.full(len(worker), -1, np.int64)
    never = np.full(len(calls), np.iinfo(np.int64).max)
    last = containing(pid[worker], ts[worker], pid[calls], ts[calls], never)
    return np.where(last >= 0, calls[np.maximum(last, 0)], -1)


def collective_evidence(mode: str, row: pd.Series) -> dict | None:
    """``tracekit explain``'s evidence of a CPU trace's communication activity (a labelled
    row): its collective, the text that named it (``call``: the collective op that queued or
    holds it), and whether this activity counts it (a worker's range and the ops in a call
    don't: the call counts it once); None for other rows."""
    if mode != "cpu" or str(row["group"]) != "comm":
        return None
    src = str(row["rule"]).removeprefix("comm:")
    text = {"call": row["comm_text"], "kernel": row["name"]}.get(src, row["op"])
    return {
        "collective": str(row["collective"]),
        "named_by": src,
        "text": str(text),
        "counted": bool(row["comm_calls"] > 0),
    }
