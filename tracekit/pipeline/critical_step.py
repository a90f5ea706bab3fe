"""Step ``find_critical_path`` (:mod:`tracekit.pipeline.critical` says what the path is): one
rank's graph built once, each complete step's path walked and labelled
(:mod:`tracekit.pipeline.critical_pieces`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.schema import CPU_OP, RUNTIME
from .critical import Walker, keyed, predecessors, runtime_calls, thread_codes
from .critical_host import Host
from .critical_pieces import Vocab, merged, pieces
from .critical_sync import sync_edges
from .state import Trace, codes_of
from .taxonomy import ModuleTaxonomy


def find_critical_path(t: Trace, taxonomy: ModuleTaxonomy) -> Trace:
    """The critical path of every complete step.

    Needs: ``acts`` (device activities with their launches, ``step``, ``phase``, ``module``,
    ``group``), ``t.events`` (CPU ops and runtime calls), ``t.ranges``, ``t.steps`` (device
    windows, ``complete``).
    Adds: ``t.critical``: the pieces of each complete step's path
    (:func:`~tracekit.pipeline.critical_pieces.pieces`: step, kind, phase, module, start, end).
    Guarantees: a step's pieces tile its device window exactly; a trace with no launching
    runtime call (CPU-only, or device activity without launches) has no pieces (never a guess),
    nor one over 2.4 hours (``meta.critical_path_skipped``; the run's notices say so).
    """
    t.critical = merged()
    if t.steps.empty or not _has_graph(t):
        return t
    g = graph(t)
    if g is None:  # a notice of the run says so (tracekit.ranks.meta): no rows, never a guess
        t.meta["critical_path_skipped"] = True
        return t
    a = t.acts
    done = t.steps[t.steps["complete"].to_numpy(bool)] if "complete" in t.steps else t.steps
    step_of, end = a["step"].to_numpy(), a["end"].to_numpy(np.int64)
    walked = []
    for step, lo, hi in zip(done["step"].tolist(), done["start"].tolist(), done["end"].tolist()):
        mine = np.flatnonzero(step_of == step)
        if not len(mine) or hi <= lo:
            continue
        root = int(mine[np.argmax(end[mine])])
        walked.append((step, lo, hi, g["walker"].walk(root, lo, hi)))
    t.critical = pieces(t, taxonomy, walked, a, g)
    return t


def _has_graph(t: Trace) -> bool:
    a = t.acts
    return t.mode == "gpu" and not a.empty and bool(a["launched"].to_numpy(bool).any())


def path_over(t: Trace, taxonomy: ModuleTaxonomy, lo: int, hi: int) -> pd.DataFrame:
    """The critical path over ``[lo, hi)`` (ns) instead of a step's window, walked back from
    the last device activity or CPU range to end by ``hi`` (the comparison with HTA over a
    whole trace, tests/test_critical_path_hta.py): its pieces, as ``pieces`` gives them."""
    if not _has_graph(t):
        return merged()
    g = graph(t)
    if g is None:
        return merged()
    a = t.acts
    end = a["end"].to_numpy(np.int64)
    inside = np.flatnonzero(end <= hi)
    root = int(inside[np.argmax(end[inside])])
    host = g["host"]
    th = host.v >> 44
    raw = host.v - (th << 44) + host.t0
    last = int(np.argmax(np.where(raw <= hi, raw, np.iinfo(np.int64).min))) if len(raw) else -1
    thread = int(th[last]) if last >= 0 and raw[last] > end[root] else None
    segs = g["walker"].walk(root, lo, hi, thread)
    return pieces(t, taxonomy, [(0, lo, hi, segs)], a, g)


def graph(t: Trace) -> dict | None:
    """The rank's graph: threads, runtime calls, the host side, predecessors, the walker; None
    for a trace longer than the thread-keyed times hold (2.4 hours) or of 2^19 threads."""
    a, ev = t.acts, t.events
    launch_ev = a["launch_ev"].to_numpy(np.int64)
    rt = runtime_calls(t, launch_ev[launch_ev >= 0])
    work = np.isin(ev["kind"].to_numpy(), (RUNTIME, CPU_OP)) & (ev["dur"].to_numpy() > 0)
    work &= ~t.name_test(lambda n: n.str.startswith("ProfilerStep#"))  # a step marker, not work
    cpu = np.flatnonzero(work)
    del work
    c_start = ev["ts"].to_numpy(np.int64)[cpu]
    c_end = c_start + ev["dur"].to_numpy(np.int64)[cpu]
    c_th, a_th, threads = _threads(t, cpu, launch_ev)
    launched = a["launched"].to_numpy(bool)
    rt["thread"] = c_th[np.searchsorted(cpu, rt["rows"])]  # every runtime call is a CPU event
    del cpu
    launch_ts = a["launch_ts"].to_numpy(np.int64)[launched]
    rt["t0"] = t0 = int(min(x.min() for x in (launch_ts, c_start) if len(x)))
    latest = max(int(a["end"].max()), int(c_end.max()) if len(c_end) else t0)
    if latest - t0 >= 1 << 43 or len(threads[0]) >= 1 << 19:  # beyond the keys' bits (2.4 h)
        return None
    rt["key"] = keyed(rt["thread"], rt["start"], t0)
    syncs, wait_src = sync_edges(t, a, a_th, rt)  # the cuda_sync events' args, else inferred
    host = Host(c_th, c_start, c_end, rt, t0)
    del c_th, c_start, c_end  # the host keeps its own keyed copies
    jumps = host.jumps(rt, syncs, a["end"].to_numpy(np.int64), np.unique(a_th[launched]))
    pred = predecessors(a, wait_src)
    phases, modules = Vocab("unattributed"), Vocab("Other")
    p_codes, p_uniq = codes_of(a["phase"])
    m_codes, m_uniq = codes_of(a["module"])
    return {
        "phases": phases,
        "modules": modules,
        "a_phase": phases.encode(p_uniq)[p_codes],
        "a_module": modules.encode(m_uniq)[m_codes],
        "host": host,
        "pred": pred,
        "walker": Walker(a, pred, wait_src, a_th, host, jumps),
        "threads": threads,
        "a_th": a_th,
    }


def _threads(t: Trace, cpu: np.ndarray, launch_ev: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Thread codes: per CPU event of ``cpu`` (rows of ``t.events``), per activity (its launch's;
    -1 none), and per code its (pid, tid). A launch's thread is its runtime call's; a call of
    no duration is not a CPU event: its thread is by pid and tid."""
    a, ev = t.acts, t.events
    launched = a["launched"].to_numpy(bool)
    at = np.searchsorted(cpu, np.maximum(launch_ev, 0))
    found = (
        launched & (cpu[np.minimum(at, max(len(cpu) - 1, 0))] == launch_ev) if len(cpu) else launched & False
    )
    extra = np.flatnonzero(launched & ~found)
    pairs = [
        (ev["pid"].to_numpy()[cpu], ev["tid"].to_numpy()[cpu]),
        (a["launch_pid"].to_numpy()[extra], a["launch_tid"].to_numpy()[extra]),
    ]
    c_th, x_th = thread_codes(*pairs)
    a_th = np.full(len(a), -1, np.int64)
    a_th[found] = c_th[at[found]]
    a_th[extra] = x_th
    code = np.concatenate([c_th, x_th])
    threads = (np.zeros(code.max() + 1, np.int64), np.zeros(code.max() + 1, np.int64))
    threads[0][code] = np.concatenate([p for p, _ in pairs])
    threads[1][code] = np.concatenate([q for _, q in pairs])
    return c_th, a_th, threads
