"""The critical path's walked segments (:mod:`tracekit.pipeline.critical`) as labelled pieces.

Each piece is one kind (:data:`KINDS`) over ``[start, end)`` with a phase and a module category:

* a device activity on the path: ``kernel``, ``memcpy`` (copies and sets) or ``comm`` (a
  collective), with its own phase and module; the gap before the next activity of its run is
  ``idle``, labelled as that next activity;
* a launch (the call's start to its activity's start): ``launch``, labelled as its activity;
* a CPU stretch, cut at every op and runtime call boundary on its thread: inside a sync call
  ``sync``, inside a call that launched device work ``launch``, inside any other op or call
  ``cpu``, in no op ``idle``; each piece labelled as a launch at its midpoint would be (the
  functions :mod:`tracekit.pipeline.host_idle` uses);
* a sync's wait (the waited activity's end to the call's end): ``sync``, labelled as its thread;
* where the walk stopped before the window's start: ``idle``, labelled as the piece after it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.schema import CPU_OP, MEMCPY, MEMSET, RUNTIME
from . import labels
from .backward import link_backward
from .critical import (
    IDLE,
    RUN,
    SEG_LAUNCH,
    STRETCH,
    SYNC,
    Walker,
    event_waits,
    keyed,
    predecessors,
    runtime_calls,
    thread_codes,
    top_ranges,
)
from .memory import _as_launches
from .modules import work_module
from .phases import assign_phases
from .state import Trace, add_columns, as_str
from .taxonomy import ModuleTaxonomy

KINDS = np.array(["cpu", "launch", "kernel", "memcpy", "sync", "comm", "idle"], dtype=object)
CPU, LAUNCH_K, KERNEL, MEMCPY_K, SYNC_K, COMM, IDLE_K = range(7)


def _device_kind(a: pd.DataFrame) -> np.ndarray:
    kind = a["kind"].to_numpy()
    comm = as_str(a["group"]) == "comm" if "group" in a else np.zeros(len(a), bool)
    return np.where(comm, COMM, np.where(np.isin(kind, (MEMCPY, MEMSET)), MEMCPY_K, KERNEL))


def run_pieces(segs: np.ndarray, a: pd.DataFrame, order: np.ndarray) -> dict:
    """The activities of the ``RUN`` segments and the idle gaps between them: ``lo``, ``hi``,
    ``kind``, ``act`` (the row of ``a`` whose labels the piece takes)."""
    first, last, top = segs[:, 3], segs[:, 4], segs[:, 2]
    n = last - first + 1
    place = np.repeat(first, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    seg = np.repeat(np.arange(len(segs)), n)
    row = order[place]
    start, end = a["start"].to_numpy(np.int64)[row], a["end"].to_numpy(np.int64)[row]
    is_last = place == last[seg]
    nxt = np.where(
        is_last, top[seg], a["start"].to_numpy(np.int64)[order[np.minimum(place + 1, len(order) - 1)]]
    )
    own_hi = np.minimum(end, nxt)
    gap_row = order[np.minimum(place + 1, len(order) - 1)]
    kind = _device_kind(a)[row]
    return {
        "lo": np.concatenate([start, own_hi]),
        "hi": np.concatenate([own_hi, np.where(is_last, own_hi, nxt)]),
        "kind": np.concatenate([kind, np.full(len(row), IDLE_K)]),
        "act": np.concatenate([row, gap_row]),
        "seg": np.concatenate([seg, seg]),
    }


def stretch_pieces(segs: np.ndarray, bounds: np.ndarray, t0: int) -> tuple[np.ndarray, ...]:
    """The ``STRETCH`` segments cut at every boundary of their thread (``bounds``: sorted
    :func:`~tracekit.pipeline.critical.keyed` keys): (segment, thread, lo, hi) per piece."""
    th, lo, hi = segs[:, 3], segs[:, 1], segs[:, 2]
    i0 = np.searchsorted(bounds, keyed(th, lo, t0), "right")
    i1 = np.searchsorted(bounds, keyed(th, hi, t0), "left")
    n = np.maximum(i1 - i0, 0) + 1
    seg = np.repeat(np.arange(len(segs)), n)
    j = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    inner = (
        (bounds[np.minimum(i0[seg] + j - 1, max(len(bounds) - 1, 0))] - (th[seg] << 44)) + t0
        if len(bounds)
        else lo[seg]
    )
    p_lo = np.where(j == 0, lo[seg], inner)
    after = (
        (bounds[np.minimum(i0[seg] + j, max(len(bounds) - 1, 0))] - (th[seg] << 44)) + t0
        if len(bounds)
        else hi[seg]
    )
    p_hi = np.where(j == n[seg] - 1, hi[seg], after)
    keep = p_hi > p_lo
    return seg[keep], th[seg][keep], p_lo[keep], p_hi[keep]


def label_points(
    t: Trace, taxonomy: ModuleTaxonomy, pid, tid, ts
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Phase, module category and whether an op is open, at each point (pid, tid, ts), as a
    launch there would get them."""
    if not len(ts):
        none = np.zeros(0, object)
        return none, none, np.zeros(0, bool)
    pts = pd.DataFrame({"pid": pid, "tid": tid, "ts": ts})
    view = link_backward(_as_launches(t, pts))
    view.acts = add_columns(view.acts, work_module(view, view.acts))
    view.acts = assign_phases(view).acts
    mod = labels.module_categories(view, taxonomy)[0]
    return as_str(view.acts["phase"]), mod.values[mod.codes], view.acts["op_r"].to_numpy() >= 0


def cpu_kinds(th: np.ndarray, mid: np.ndarray, rt: dict) -> np.ndarray:
    """The kind of each CPU piece (thread ``th``, midpoint ``mid``): the runtime call open there
    (sync, launch, other), else an op (cpu), else none (idle)."""
    key = keyed(th, mid, rt["t0"])
    n = len(key)
    i = np.searchsorted(rt["key_sorted"], key, "right") - 1
    r = rt["by_key"][np.maximum(i, 0)] if len(rt["by_key"]) else np.zeros(n, np.int64)
    inside = (
        (i >= 0) & (rt["thread"][r] == th) & (rt["end"][r] > mid) if len(rt["by_key"]) else np.zeros(n, bool)
    )
    call = (
        np.where(rt["sync"][r], SYNC_K, np.where(rt["launch"][r], LAUNCH_K, CPU)) if len(rt["by_key"]) else r
    )
    j = np.searchsorted(rt["cover_key"], key, "right") - 1
    in_op = (
        (j >= 0) & (rt["cover_reach"][np.maximum(j, 0)] > key) if len(rt["cover_key"]) else np.zeros(n, bool)
    )
    return np.where(inside, call, np.where(in_op, CPU, IDLE_K))


def pieces(
    t: Trace, taxonomy: ModuleTaxonomy, walked: list, a: pd.DataFrame, pred: dict, rt: dict, bounds, threads
):
    """Every piece of every step's path: a frame ``step``, ``kind``, ``phase``, ``module``,
    ``start``, ``end`` (ns), clipped to the step's window, in time order per step."""
    if not walked:
        return merged(None)
    n_seg = [len(w[3]) for w in walked]
    s = np.asarray([seg for w in walked for seg in w[3]], dtype=np.int64).reshape(-1, 5)
    of = np.repeat(np.arange(len(walked)), n_seg)
    wlo, whi = (np.array([w[i] for w in walked], np.int64) for i in (1, 2))
    a_phase = np.where(as_str(a["phase"]) == "", "unattributed", as_str(a["phase"])).astype(object)
    a_module = as_str(a["module"]).astype(object)
    got: list[tuple] = []  # (segment, lo, hi, kind, phase, module)
    m = np.flatnonzero(s[:, 0] == RUN)
    run = run_pieces(s[m], a, pred["order"])
    got.append((m[run["seg"]], run["lo"], run["hi"], run["kind"], a_phase[run["act"]], a_module[run["act"]]))
    for typ, kind in ((SEG_LAUNCH, LAUNCH_K), (IDLE, IDLE_K)):
        m = np.flatnonzero((s[:, 0] == typ) & (s[:, 3] >= 0))
        g = s[m]
        got.append((m, g[:, 1], g[:, 2], np.full(len(g), kind), a_phase[g[:, 3]], a_module[g[:, 3]]))
    m = np.flatnonzero(s[:, 0] == STRETCH)
    seg, th, c_lo, c_hi = stretch_pieces(s[m], bounds, rt["t0"])
    sy = np.flatnonzero(s[:, 0] == SYNC)
    p_th = np.concatenate([th, s[sy, 4]])
    mid = np.concatenate([(c_lo + c_hi) // 2, (s[sy, 1] + s[sy, 2]) // 2])
    phase, module, _ = label_points(t, taxonomy, threads[0][p_th], threads[1][p_th], mid)
    kinds = np.concatenate([cpu_kinds(th, mid[: len(th)], rt), np.full(len(sy), SYNC_K)])
    got.append(
        (
            np.concatenate([m[seg], sy]),
            np.concatenate([c_lo, s[sy, 1]]),
            np.concatenate([c_hi, s[sy, 2]]),
            kinds,
            phase,
            module,
        )
    )
    m = np.flatnonzero((s[:, 0] == IDLE) & (s[:, 3] < 0))
    none = np.full(len(m), None, dtype=object)
    got.append((m, s[m, 1], s[m, 2], np.full(len(m), IDLE_K), none, none))
    cols = [np.concatenate([np.asarray(g[i]) for g in got]) for i in range(6)]
    step_i = of[cols[0]]
    lo, hi = np.clip(cols[1], wlo[step_i], whi[step_i]), np.clip(cols[2], wlo[step_i], whi[step_i])
    keep = np.flatnonzero(hi > lo)
    keep = keep[np.lexsort((lo[keep], step_i[keep]))]
    p = pd.DataFrame(
        {
            "step": np.array([w[0] for w in walked])[step_i[keep]],
            "kind": cols[3][keep].astype(np.int64),
            "phase": pd.Series(cols[4][keep], dtype=object),
            "module": pd.Series(cols[5][keep], dtype=object),
            "lo": lo[keep],
            "hi": hi[keep],
        }
    )
    p[["phase", "module"]] = p.groupby("step")[["phase", "module"]].bfill()
    return merged(p)


def merged(p: pd.DataFrame | None) -> pd.DataFrame:
    """The pieces with neighbours of the same step, kind, phase and module joined."""
    cols = ["step", "kind", "phase", "module", "start", "end"]
    if p is None or p.empty:
        return pd.DataFrame({c: pd.Series(dtype=object if c in cols[1:4] else np.int64) for c in cols})
    p["module"] = p["module"].where(p["module"].astype(str) != "", "Other").fillna("Other")
    p["phase"] = p["phase"].fillna("unattributed")
    v = {c: p[c].to_numpy() for c in ("step", "kind", "lo", "hi")}
    for c in ("phase", "module"):  # compared as codes, not strings
        v[c + "_code"], uniq = pd.factorize(p[c])
        v[c] = np.asarray(uniq, dtype=object)[v[c + "_code"]]
    same = np.logical_and.reduce(
        [np.r_[False, v[c][1:] == v[c][:-1]] for c in ("step", "kind", "phase_code", "module_code")]
    )
    same &= np.r_[False, v["lo"][1:] == v["hi"][:-1]]
    first = np.flatnonzero(~same)
    last = np.r_[first[1:] - 1, len(same) - 1]
    return pd.DataFrame(
        {
            "step": v["step"][first],
            "kind": KINDS[v["kind"][first]],
            "phase": v["phase"][first] if len(first) else v["phase"][:0],
            "module": v["module"][first] if len(first) else v["module"][:0],
            "start": v["lo"][first],
            "end": v["hi"][last],
        }
    )[cols]


def find_critical_path(t: Trace, taxonomy: ModuleTaxonomy) -> Trace:
    """The critical path of every complete step (:mod:`tracekit.pipeline.critical`).

    Needs: ``acts`` (device activities with their launches, ``step``, ``phase``, ``module``,
    ``group``), ``t.events`` (runtime calls), ``t.ranges``, ``t.steps`` (device windows).
    Adds: ``t.critical``: the pieces of each complete step's path (:func:`pieces`).
    Guarantees: a step's pieces tile its device window exactly; a trace with no launching
    runtime call (CPU-only, or device activity without launches) has no pieces (never a guess).
    """
    t.critical = merged(None)
    if t.steps.empty or not _has_graph(t):
        return t
    g = graph(t)
    a = t.acts
    done = t.steps[t.steps["complete"]] if "complete" in t.steps else t.steps
    step_of, end = a["step"].to_numpy(), a["end"].to_numpy(np.int64)
    walked = []
    for step, lo, hi in zip(done["step"].tolist(), done["start"].tolist(), done["end"].tolist()):
        mine = np.flatnonzero(step_of == step)
        if not len(mine) or hi <= lo:
            continue
        root = int(mine[np.argmax(end[mine])])
        walked.append((step, lo, hi, g["walker"].walk(root, lo, hi)))
    t.critical = pieces(t, taxonomy, walked, a, g["pred"], g["rt"], g["bounds"], g["threads"])
    return t


def _has_graph(t: Trace) -> bool:
    a = t.acts
    return t.mode == "gpu" and not a.empty and bool(a["launched"].to_numpy(bool).any())


def path_over(t: Trace, taxonomy: ModuleTaxonomy, lo: int, hi: int) -> pd.DataFrame:
    """The critical path over ``[lo, hi)`` (ns) instead of a step's window, walked back from
    the last device activity or CPU range to end there (the comparison with HTA over a whole
    trace, :mod:`tests.test_critical_path_hta`): its pieces, as :func:`pieces` gives them."""
    if not _has_graph(t):
        return merged(None)
    g = graph(t)
    a = t.acts
    end = a["end"].to_numpy(np.int64)
    inside = np.flatnonzero(end <= hi)
    root = int(inside[np.argmax(end[inside])])
    last_cpu = max(((v[-1], th) for th, (_, v) in g["rt"]["tops"].items() if v), default=(lo, -1))
    segs = g["walker"].walk(root, lo, hi, None if last_cpu[0] <= end[root] else last_cpu[1])
    return pieces(t, taxonomy, [(0, lo, hi, segs)], a, g["pred"], g["rt"], g["bounds"], g["threads"])


def graph(t: Trace) -> dict:
    """The rank's graph: runtime calls, thread codes, predecessors and the walker."""
    a = t.acts
    launch_ev = a["launch_ev"].to_numpy(np.int64)
    rt = runtime_calls(t, launch_ev[launch_ev >= 0])
    ev, r = t.events, t.ranges
    work = np.isin(ev["kind"].to_numpy(), (RUNTIME, CPU_OP)) & (ev["dur"].to_numpy() > 0)
    work &= ~t.name_test(lambda n: n.str.startswith("ProfilerStep#"))  # a step marker, not work
    cpu = np.flatnonzero(work)
    c_start = ev["ts"].to_numpy(np.int64)[cpu]
    c_end = c_start + ev["dur"].to_numpy(np.int64)[cpu]
    pairs = [
        (a["launch_pid"].to_numpy(), a["launch_tid"].to_numpy()),
        (rt["pid"], rt["tid"]),
        (r["pid"].to_numpy(), r["tid"].to_numpy()),
        (ev["pid"].to_numpy()[cpu], ev["tid"].to_numpy()[cpu]),
    ]
    a_th, rt["thread"], r_th, c_th = thread_codes(*pairs)
    code = np.concatenate([a_th, rt["thread"], r_th, c_th])
    threads = (np.zeros(code.max() + 1, np.int64), np.zeros(code.max() + 1, np.int64))
    threads[0][code] = np.concatenate([p for p, _ in pairs])
    threads[1][code] = np.concatenate([q for _, q in pairs])
    times = [
        a["launch_ts"].to_numpy(np.int64)[a["launched"].to_numpy(bool)],
        c_start,
        r["start"].to_numpy(np.int64),
    ]
    rt["t0"] = t0 = int(min(x.min() for x in times if len(x)))
    rt["key"] = keyed(rt["thread"], rt["start"], t0)
    rt["by_key"] = np.argsort(rt["key"], kind="stable")
    rt["key_sorted"] = rt["key"][rt["by_key"]]
    rt["tops"], rt["cover_key"], rt["cover_reach"] = top_ranges(c_th, c_start, c_end, t0)
    r_start, r_end = r["start"].to_numpy(np.int64), r["end"].to_numpy(np.int64)
    bounds = np.sort(
        np.concatenate(
            [
                keyed(c_th, c_start, t0),
                keyed(c_th, c_end, t0),
                keyed(r_th, r_start, t0),
                keyed(r_th, r_end, t0),
            ]
        )
    )
    wait_src = event_waits(t, a, a_th, rt)
    pred = predecessors(a, wait_src)
    walker = Walker(a, pred, wait_src, a_th, rt)
    return {"rt": rt, "pred": pred, "walker": walker, "bounds": bounds, "threads": threads}
