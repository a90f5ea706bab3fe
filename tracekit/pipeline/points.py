"""Points labelled as launches: memory events, idle-gap starts and critical-path pieces.

A point is a (process, thread, time) on the CPU timeline. Three steps label points the way a
launch there would be labelled (step, op stack, backward link, module, phase):
:func:`~tracekit.pipeline.memory.label_memory` (the allocator's events),
:func:`~tracekit.pipeline.host_idle.label_host_idle` (where the host was when the device went
idle) and the critical path's CPU pieces (:mod:`tracekit.pipeline.critical_pieces`). They all
call :func:`launch_view`, so the rules are the launches' own, applied once per point set.

Cost: what depends on the trace alone is derived once per trace (:meth:`Trace.once`): the
phase evidence's event scans, the order of the CPU ranges and the nesting sweep's stack as
parent links. A point set's op stack then costs O(points log ranges): each point finds its
thread's last range before it and walks the links (:func:`walked_points`), instead of sweeping
every CPU range again with the points (:func:`merged_order`, kept for what the walk cannot do).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .backward import link_backward
from .modules import work_module
from .nest import CONTEXT, op_columns
from .nesting import _nesting, native, sweep, sweep_order
from .phases import assign_phases
from .state import Trace, add_columns, distinct_rows, run_starts, take
from .steps import place_in_steps

#: Above this many distinct threads among a point set, the points are sorted with the ranges
#: (one sort) instead of merged thread by thread (a Python loop per thread).
MAX_MERGED_THREADS = 256


@dataclass
class RangeOrder:
    """The ranges of ``t.ranges`` in :func:`~tracekit.pipeline.nesting.sweep_order`, with each
    thread's run in that order: ``lo``/``hi`` bounds of the runs, ``pid``/``tid`` their thread."""

    order: np.ndarray
    starts: np.ndarray  # the ranges' starts in that order
    lo: np.ndarray
    hi: np.ndarray
    pid: np.ndarray
    tid: np.ndarray


def range_order(r: pd.DataFrame) -> RangeOrder | None:
    """:class:`RangeOrder` of the ranges ``r``; None when some range ends before it starts
    (then a point may sort before a range that starts with it: the full sort decides). The
    order is kept as int32 (with the walk's links, :func:`_parents`, what an int64 order held)."""
    pid, tid, start, end = (r[c].to_numpy(np.int64) for c in ("pid", "tid", "start", "end"))
    if (end < start).any() or len(r) >= 2**31:
        return None
    order = sweep_order(pid, tid, start, end, np.ones(len(r), bool))
    p, q = pid[order], tid[order]
    lo = np.flatnonzero(run_starts(p, q))
    hi = np.append(lo[1:], len(order)) if len(lo) else lo
    return RangeOrder(order.astype(np.int32), start[order], lo, hi, p[lo], q[lo])


def merged_order(t: Trace, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> np.ndarray | None:
    """``sweep_order`` of ``t.ranges`` followed by the points ``(pid, tid, ts)`` (point k is
    element ``len(t.ranges) + k``), built from the ranges' order (derived once per trace): a
    point goes after every range of its thread that starts at or before it (at equal starts a
    range sorts first: longest first, and a point lasts no time), points among themselves by
    thread, time and index. None when the full sort must decide (see :func:`range_order`)."""
    plan = t.once("range_order", t.ranges, lambda: range_order(t.ranges))
    placed = None if plan is None else _placed(plan, len(t.ranges), pid, tid, ts)
    if placed is None:
        return None
    by_point = np.lexsort((ts, tid, pid))  # stable: equal points keep their index order
    order = plan.order if len(t.ranges) + len(ts) < 2**31 else plan.order.astype(np.int64)
    return np.insert(order, placed[0][by_point], len(t.ranges) + by_point)


def _placed(plan: RangeOrder, n_r: int, pid, tid, ts) -> tuple[np.ndarray, np.ndarray] | None:
    """Per point, ``(pos, at)``: where it goes among the ranges' order (after every range of
    its thread that starts at or before it) and the last such range's sorted position (-1: no
    range of its thread starts at or before it). None above :data:`MAX_MERGED_THREADS`."""
    thread, first = distinct_rows(pid, tid)
    if len(first) > MAX_MERGED_THREADS:
        return None
    pos = np.empty(len(ts), np.int64)
    at = np.full(len(ts), -1, np.int64)
    for k, (p, q) in enumerate(zip(pid[first].tolist(), tid[first].tolist())):
        m = thread == k
        hit = np.flatnonzero((plan.pid == p) & (plan.tid == q))
        if not hit.size:  # no range on this thread: where the thread sorts among the ranges'
            after = np.count_nonzero((plan.pid < p) | ((plan.pid == p) & (plan.tid < q)))
            pos[m] = plan.lo[after] if after < len(plan.lo) else n_r
            continue
        lo, hi = plan.lo[hit[0]], plan.hi[hit[0]]
        pos[m] = here = lo + np.searchsorted(plan.starts[lo:hi], ts[m], side="right")
        at[m] = np.where(here > lo, here - 1, -1)
    return pos, at


def sweep_points(t: Trace, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> dict[str, np.ndarray]:
    """The context (:data:`~tracekit.pipeline.nest.CONTEXT` and ``ctx_bits``) of each point,
    exactly as :func:`~tracekit.pipeline.nest.sweep_with_points` gives it: from the ranges'
    own context (:func:`walked_points`) where it can, else by sweeping them with the points."""
    fast = walked_points(t, pid, tid, ts)
    if fast is not None:
        return fast
    r = t.ranges
    n_r = len(r)
    order = merged_order(t, pid, tid, ts)
    ctx = sweep(
        np.concatenate([r["pid"].to_numpy(), pid]),
        np.concatenate([r["tid"].to_numpy(), tid]),
        np.concatenate([r["start"].to_numpy(), ts]),
        np.concatenate([r["end"].to_numpy(), ts]),
        np.concatenate([np.ones(n_r, bool), np.zeros(len(ts), bool)]),
        np.concatenate([r["flags"].to_numpy(), np.zeros(len(ts), np.int64)]),
        order,
    )
    # the points' own copies: a slice would keep each column's ranges alive with the view
    # (6 columns of every CPU range, 35 MB on a 1 GB trace, for as long as the view lives)
    return {col: x[n_r:].copy() for col, x in zip(CONTEXT + ("ctx_bits",), ctx)}


def walked_points(t: Trace, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray) -> dict[str, np.ndarray] | None:
    """:func:`sweep_points` in O(points log ranges): the sweep reaches a point with the stack
    its thread's last range before it left, popped while the top ends at or before the point
    (points push nothing); that stack is a chain of parent links (``_nesting.parents``, once
    per trace), so the point's context is the context the first range on that chain that is
    still open gives its body (its own context with itself pushed): ``_nesting.walk``.
    None where the sweep must decide: no C extension, threads not integers or times not signed
    integers, a range ending before it starts, too many threads (see :func:`_placed`)."""
    if not native() or ts.dtype.kind != "i" or not all(x.dtype.kind in "iu" for x in (pid, tid)):
        return None
    r = t.ranges
    plan = t.once("range_order", r, lambda: range_order(r))
    placed = None if plan is None else _placed(plan, len(r), pid, tid, ts)
    if placed is None:
        return None
    at, ts = placed[1], np.ascontiguousarray(ts, np.int64)
    parent = t.once("range_parents", r, lambda: _parents(r, plan))
    ranges = t.once("range_context", r, lambda: _range_context(r))
    by = np.arange(len(ts)) if _ordered(at, ts) else np.lexsort((ts, at))  # walks reuse walks
    out = [np.empty(len(ts), np.int64) for _ in range(6)]
    _nesting.walk(by, at, ts, plan.order, parent, *ranges, *out)
    return dict(zip(CONTEXT + ("ctx_bits",), out))


def _ordered(at: np.ndarray, ts: np.ndarray) -> bool:
    """Whether the points are already sorted by (``at``, ``ts``)."""
    step = np.diff(at)
    return bool((step >= 0).all() and (ts[1:][step == 0] >= ts[:-1][step == 0]).all())


def _parents(r: pd.DataFrame, plan: RangeOrder) -> np.ndarray:
    """Per sorted position of the ranges, the sorted position of the range on top of the
    sweep's stack when it is pushed (-1 none), as int32: ``_nesting.parents``."""
    cols = [np.ascontiguousarray(r[c].to_numpy(), np.int64) for c in ("pid", "tid", "start", "end")]
    parent = np.empty(len(r), np.int32)
    _nesting.parents(plan.order, *cols, parent)
    return parent


def _range_context(r: pd.DataFrame) -> list[np.ndarray]:
    """What the walk reads of the ranges, as contiguous int64: ``end``, ``flags`` and their
    own enclosing context (:data:`CONTEXT` and ``bits``): the columns the link step gave them,
    or (a frame without them) the sweep of the ranges alone."""
    cols = CONTEXT + ("bits",)
    pid, tid, start, end, flags = (r[c].to_numpy() for c in ("pid", "tid", "start", "end", "flags"))
    if all(c in r for c in cols):
        ctx = [r[c].to_numpy() for c in cols]
    else:
        ctx = list(sweep(pid, tid, start, end, np.ones(len(r), bool), flags))
    return [np.ascontiguousarray(x, np.int64) for x in (end, flags, *ctx)]


def as_launches(t: Trace, pts: pd.DataFrame) -> Trace:
    """A view of ``t`` whose activity table is the points ``pts`` (``pid``, ``tid``, ``ts``)
    as launches, placed in steps and in the op stack; its warnings are its own (the linking
    functions' warnings about launches do not concern these points)."""
    pid, tid, ts = (pts[c].to_numpy() for c in ("pid", "tid", "ts"))
    in_file = np.ones(len(pts), bool)
    rng = t.step_ranges
    if len(rng):
        step = take(rng["step"].to_numpy(), place_in_steps(rng, pid, ts, in_file)[0], -1)
    else:  # no markers: the whole trace is one step (as find_steps numbers the activities)
        step = np.zeros(len(pts), np.int64)
    ctx = sweep_points(t, pid, tid, ts)
    view = copy.copy(t)  # the decoded names and derived facts are shared, not made again
    view.warnings, view.meta = [], {}
    view.acts = pd.DataFrame(
        {
            "launch_pid": pid.copy(),  # pts' own columns: not shared with the view
            "launch_tid": tid.copy(),
            "launch_ts": ts.copy(),
            "launched": in_file,
            "step": step,
            **ctx,
            **op_columns(view, ctx["op_r"], ctx["comm_r"]),
        },
        copy=False,  # fresh arrays, each kept as it is (not consolidated: copied again)
    )
    return view


def launch_view(t: Trace, pts: pd.DataFrame) -> Trace:
    """:func:`as_launches`, then the launches' own labelling: the backward link
    (:func:`link_backward`), the module (:func:`work_module`) and the phase
    (:func:`assign_phases`). The view's ``acts`` holds those columns per point, in ``pts``'
    order; module categories come from :func:`tracekit.pipeline.labels.module_categories`."""
    view = link_backward(as_launches(t, pts))
    view.acts = add_columns(view.acts, work_module(view, view.acts))
    return assign_phases(view)
