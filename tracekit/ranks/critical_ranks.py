"""The critical path across ranks: each rank's collective waits split off its ``comm`` time.

On several ranks, the ``critical_path`` table's ``comm`` rows are cut at each matched
collective instance's last arrival (:mod:`tracekit.analyses.critical_wait`): the part before it
becomes a ``wait`` row naming the last-arriving rank (``waited_on_rank``; -1 on every other
row); a step's rows still sum to its window. ``critical_path_timeline``'s ``comm`` bars are cut
the same way. ``critical_path_ranks``: per step, the path across ranks through each wait to the
waited-on rank, and the rank, phase and module that set its length. One rank: the tables are as
the rank computed them, and there is no ``critical_path_ranks``.

Needs: a run (``Analysis``) with ``ranks``, ``filters``, ``_computed``,
``_n_steps`` and the collectives' instances (:mod:`tracekit.ranks.collective_ranks`).
Guarantees: the matching and the cut run at most once per run; the parent reads one rank's path
pieces at a time and keeps only the wait segments (a few per collective); a rank with no wait
is never read.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyses import REGISTRY, critical_wait, cross_rank

from . import collective_ranks

#: The tables whose rows, on several ranks, are split here.
SPLIT = ("critical_path", "critical_path_timeline")
NAME = "critical_path"
RANKS = "critical_path_ranks"
TIMELINE = "critical_path_timeline"


def matched(run: Any) -> tuple[pd.DataFrame, dict[int, int]]:
    """The matched instances in which a rank waited (:func:`critical_wait.waited`) and the
    clock offsets in whole ns, once."""
    key = ("cross", "critical_match", -1)
    if key not in run._computed:
        inst = collective_ranks.all_instances(run)
        if len(inst):
            f, off = cross_rank.match(inst)
            whole = critical_wait.ns_offsets(off)
            run._computed[key] = (critical_wait.waited(f, inst, whole), whole)
        else:
            run._computed[key] = (pd.DataFrame(columns=["rank"]), {})
    return run._computed[key]


def comm_pieces(run: Any, rank: int) -> pd.DataFrame:
    """One rank's ``comm`` path pieces, as the ``critical_path`` table reads them (filters)."""
    p = run.filters.intervals(run.ranks[rank].critical, REGISTRY[NAME])
    return p[(p["kind"].astype(str) == "comm").to_numpy()] if len(p) else p


def segments(run: Any) -> pd.DataFrame:
    """Every rank's waits on its path (:func:`critical_wait.wait_segments`), computed once."""
    key = ("cross", "critical_wait", -1)
    if key not in run._computed:
        waits, off = matched(run)
        parts = [
            critical_wait.wait_segments(r, comm_pieces(run, r), waits, off.get(r, 0))
            for r in sorted(set(waits["rank"].tolist()) & set(run.ranks))
        ]
        parts = [p for p in parts if len(p)]
        empty = pd.DataFrame(columns=critical_wait.SEGMENT_COLUMNS)
        run._computed[key] = pd.concat(parts, ignore_index=True) if parts else empty
    return run._computed[key]


def split(run: Any, name: str, table: pd.DataFrame, per_step: bool) -> pd.DataFrame:
    """Table ``name`` (every rank's rows, a ``rank`` column) with the waits split off its
    ``comm`` rows (per step, or as each rank's mean over its complete steps) and its
    ``percent`` derived again for the rows that changed."""
    segs = segments(run)
    if name == TIMELINE:
        return _timeline(run, table, segs)
    parts = []
    for r in sorted(set(segs["rank"].tolist()) & set(run.ranks)):
        steps = _bounds(run, r)["step"].to_numpy()
        n = None if per_step else run._n_steps(run.ranks[r])
        parts.append(critical_wait.wait_rows(segs[segs["rank"].to_numpy() == r], steps, n))
    parts = [p for p in parts if len(p)]
    if not parts:
        return table.assign(waited_on_rank=np.int64(-1))
    out = critical_wait.split_table(table, pd.concat(parts, ignore_index=True))
    win = _window_ms(run, out, per_step)
    pct = np.zeros(len(out))
    out["percent"] = np.divide(out["time_ms"].to_numpy(float) * 100.0, win, out=pct, where=win > 0)
    spec = REGISTRY[name]
    lead = [c for c in out.columns if c not in spec.values]
    return out[lead + [c for c in spec.values if c in out.columns]]


def _timeline(run: Any, table: pd.DataFrame, segs: pd.DataFrame) -> pd.DataFrame:
    """The path timeline's ``comm`` rows cut at the waits (:func:`critical_wait.split_timeline`),
    the waits placed since their rank's step window began (own clock)."""
    off = matched(run)[1]
    parts = []
    for r in sorted(set(segs["rank"].tolist()) & set(run.ranks)):
        mine = segs[segs["rank"].to_numpy() == r]
        t0 = _bounds(run, r).set_index("step")["start"]
        base = t0.reindex(mine["step"].to_numpy()).to_numpy()
        ok = ~pd.isna(base)
        at = base[ok].astype(np.int64) - off.get(r, 0)
        lo = mine["start"].to_numpy(np.int64)[ok] - at
        hi = mine["end"].to_numpy(np.int64)[ok] - at
        parts.append(mine[ok].assign(lo=lo, hi=hi))
    rel = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["rank", "step"])
    out = critical_wait.split_timeline(table, rel)
    spec = REGISTRY[TIMELINE]
    lead = [c for c in out.columns if c not in spec.values]
    return out[lead + [c for c in spec.values if c in out.columns]]


def _bounds(run: Any, rank: int) -> pd.DataFrame:
    """The rank's complete steps' windows (``step``, ``start``, ``end``, own clock, ns; the
    step filter applied), read from its windows without framing or keeping them."""
    w = run.filters.windows(run.ranks[rank].windows)
    w = w[(w["window"] == "step").to_numpy() & w["complete"].to_numpy(bool)]
    return pd.DataFrame({"step": w["step"].to_numpy(np.int64), "start": w["start"], "end": w["end"]})


def _window_ms(run: Any, rows: pd.DataFrame, per_step: bool) -> np.ndarray:
    """Per row, its rank's step window (ms): the step's, or the mean over complete steps."""
    out = np.zeros(len(rows))
    rank = rows["rank"].to_numpy()
    for r in np.unique(rank):
        st = _bounds(run, int(r))
        win = pd.Series((st["end"] - st["start"]).to_numpy(float) / 1e6, index=st["step"])
        at = rank == r
        if per_step:
            out[at] = win.reindex(rows.loc[at, "step"].to_numpy()).fillna(0.0).to_numpy(float)
        else:
            out[at] = win.sum() / max(run._n_steps(run.ranks[int(r)]), 1)
    return out


def wanted(run: Any) -> bool:
    """Whether the run has the cross-rank path table."""
    return RANKS in run.names()


def path_ranks(run: Any) -> dict[str, pd.DataFrame]:
    """``critical_path_ranks``: per step, the ranks on its path across ranks
    (:func:`critical_wait.stitched`, :func:`critical_wait.setters`), computed once; the path
    pieces of the ranks it visits only, read once each and dropped after."""
    key = ("cross", RANKS, -1)
    if key not in run._computed:
        off = matched(run)[1]
        segs = segments(run)
        parts = [_bounds(run, r).assign(rank=r) for r in run.ranks]
        b = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["rank", "step"])
        shift = np.array([off.get(int(r), 0) for r in b["rank"].to_numpy()], np.int64)
        b["start"] = b["start"].to_numpy(np.int64) - shift
        b["end"] = b["end"].to_numpy(np.int64) - shift
        held: dict[int, pd.DataFrame] = {}

        def pieces_of(r: int) -> pd.DataFrame:
            if r not in held:
                held[r] = run.filters.intervals(run.ranks[r].critical, REGISTRY[NAME])
            return held[r]

        steps = sorted(set(b["step"].tolist()))
        walked = [
            critical_wait.stitched(s, b[b["step"] == s], segs[segs["step"] == s], pieces_of, off)
            for s in steps
        ]
        walked = [w for w in walked if len(w)]
        path = (
            pd.concat(walked, ignore_index=True)
            if walked
            else pd.DataFrame(columns=critical_wait.STITCH_COLUMNS)
        )
        run._computed[key] = critical_wait.setters(path)
    return {RANKS: run._computed[key]}
