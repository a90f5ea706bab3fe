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

from . import batches, collective_ranks

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
            whole = critical_wait.ns_offsets(off.shift)  # every rank's, as match() shifted it
            run._computed[key] = (critical_wait.waited(f, inst, whole), whole)
        else:
            run._computed[key] = (pd.DataFrame(columns=["rank"]), {})
    return run._computed[key]


def segments(run: Any) -> pd.DataFrame:
    """Every rank's waits on its path (:func:`critical_wait.wait_segments`), computed once."""
    key = ("cross", "critical_wait", -1)
    if key not in run._computed:
        waits, off = matched(run)
        ranks = sorted(set(waits["rank"].tolist()) & set(run.ranks))
        parts = []
        for r, p in batches.frames(run, "critical", ranks):
            p = run.filters.intervals(p, REGISTRY[NAME])
            comm = p[(p["kind"].astype(str) == "comm").to_numpy()] if len(p) else p
            parts.append(critical_wait.wait_segments(r, comm, waits, off.get(r, 0)))
        parts = [p for p in parts if len(p)]
        empty = pd.DataFrame(columns=critical_wait.SEGMENT_COLUMNS)
        run._computed[key] = pd.concat(parts, ignore_index=True) if parts else empty
    return run._computed[key]


def bounds(run: Any) -> pd.DataFrame:
    """Every rank's complete steps' windows (``rank``, ``step``, ``start``, ``end``: own clock,
    ns; the step filter applied) and ``n`` (the rank's steps a mean is over), once: a few
    numbers per rank and step."""
    key = ("cross", "critical_bounds", -1)
    if key not in run._computed:
        ranks = list(run.ranks)
        n_steps = {r: run._n_steps(run.ranks[r]) for r in ranks}
        parts = []
        for rank, w in batches.stacked(run, "windows", ranks):
            w = run.filters.windows(w.assign(rank=rank))
            keep = (w["window"] == "step").to_numpy() & w["complete"].to_numpy(bool)
            r = w["rank"].to_numpy()[keep]
            parts.append(
                pd.DataFrame(
                    {
                        "rank": r,
                        "step": w["step"].to_numpy(np.int64)[keep],
                        "start": w["start"].to_numpy(np.int64)[keep],
                        "end": w["end"].to_numpy(np.int64)[keep],
                        "n": np.array([n_steps[x] for x in r.tolist()], np.int64),
                    }
                )
            )
        cols = ["rank", "step", "start", "end", "n"]
        run._computed[key] = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=cols)
    return run._computed[key]


def _of_steps(segs: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The segments of each rank's complete steps, with their step window's ``t0`` (own clock)."""
    on = b[["rank", "step", "start"]].rename(columns={"start": "t0"})
    return segs.astype({"rank": np.int64, "step": np.int64}).merge(on, on=["rank", "step"])


def split(run: Any, name: str, table: pd.DataFrame, per_step: bool) -> pd.DataFrame:
    """Table ``name`` (every rank's rows, a ``rank`` column) with the waits split off its
    ``comm`` rows (per step, or as each rank's mean over its complete steps) and its
    ``percent`` derived again for the rows that changed."""
    b = bounds(run)
    segs = _of_steps(segments(run), b)
    if name == TIMELINE:
        return _timeline(run, table, segs)
    if segs.empty:
        return table.assign(waited_on_rank=np.int64(-1))
    n = None if per_step else b.groupby("rank")["n"].first()
    out = critical_wait.split_table(table, critical_wait.wait_rows(segs, n))
    b = b.assign(win=(b["end"] - b["start"]).astype(float) / 1e6)
    if per_step:
        win = out[["rank", "step"]].merge(b[["rank", "step", "win"]], how="left")["win"]
    else:
        mean = b.groupby("rank")["win"].sum() / b.groupby("rank")["n"].first().clip(lower=1)
        win = mean.reindex(out["rank"].to_numpy())
    w = win.fillna(0.0).to_numpy(float)
    pct = np.zeros(len(out))
    out["percent"] = np.divide(out["time_ms"].to_numpy(float) * 100.0, w, out=pct, where=w > 0)
    return _ordered(name, out)


def _ordered(name: str, out: pd.DataFrame) -> pd.DataFrame:
    spec = REGISTRY[name]
    lead = [c for c in out.columns if c not in spec.values]
    return out[lead + [c for c in spec.values if c in out.columns]]


def _timeline(run: Any, table: pd.DataFrame, segs: pd.DataFrame) -> pd.DataFrame:
    """The path timeline's ``comm`` rows cut at the waits (:func:`critical_wait.split_timeline`),
    the waits placed since their rank's step window began (own clock)."""
    off = matched(run)[1]
    shift = np.array([off.get(int(r), 0) for r in segs["rank"].to_numpy()], np.int64)
    at = segs["t0"].to_numpy(np.int64) - shift
    rel = segs.assign(lo=segs["start"].to_numpy(np.int64) - at, hi=segs["end"].to_numpy(np.int64) - at)
    return _ordered(TIMELINE, critical_wait.split_timeline(table, rel))


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
        b = bounds(run)
        segs = _of_steps(segments(run), b)
        shift = np.array([off.get(int(r), 0) for r in b["rank"].to_numpy()], np.int64)
        b = b.assign(start=b["start"].to_numpy(np.int64) - shift, end=b["end"].to_numpy(np.int64) - shift)
        held: dict[int, dict] = {}

        def pieces_of(r: int) -> dict:
            if r not in held:
                p = run.ranks[r].critical
                p = p if run.filters.steps is None else p[p["step"].isin(run.filters.steps).to_numpy()]
                held[r] = critical_wait.piece_arrays(p)
            return held[r]

        by_step = dict(tuple(segs.groupby("step", sort=False))) if len(segs) else {}
        none = segs.iloc[:0]
        walked = [
            critical_wait.stitched(int(s), at, by_step.get(s, none), pieces_of, off)
            for s, at in b.groupby("step", sort=True)
        ]
        cols = critical_wait.STITCH_COLUMNS
        path = pd.DataFrame({c: np.concatenate([w[c] for w in walked]) for c in cols}) if walked else None
        run._computed[key] = critical_wait.setters(path if path is not None else pd.DataFrame(columns=cols))
    return {RANKS: run._computed[key]}
