"""Collective waits on each rank's critical path, and the rank whose path set each step's length.

With several ranks, a collective kernel on a rank's critical path (kind ``comm``) holds two
different times (docs/metrics.md, "Critical path across ranks"):

* from its start to the matched instance's last arrival (:mod:`tracekit.analyses.cross_rank`,
  on the reference clock, shifted back by the rank's clock offset): the rank *waits* for the
  last-arriving rank, whose own path set that time; kind ``wait``, ``waited_on_rank`` = the
  last arriver;
* from the last arrival on: moving bytes, kind ``comm`` as before.

:func:`wait_segments` cuts the ``comm`` pieces of every rank's path at the last arrival of each
instance they overlap (the last arriver's own pieces, and unmatched instances, stay ``comm``);
:func:`split_table` moves that time from the ``critical_path`` table's ``comm`` rows to ``wait``
rows (a step's rows still sum to its window). :func:`stitched` walks the cross-rank path of a
step backward: on a rank's path until its latest wait, then on the waited-on rank's path from
that last arrival back, and so on to the step's start; :func:`setters` names, per step, the
rank that holds most of it and that rank's phase and module with most time there.

Input: the matched instances (``cross_rank.match``: a few dozen bytes each) and each rank's
path pieces (``Attributed.critical``), one rank at a time; nothing per event.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._common import NS_PER_MS
from ._registry import CRITICAL_PIECES, INDEX, MS, PCT, PER_STEP, TableSpec, declare

SEGMENT_COLUMNS = ["rank", "step", "phase", "module", "start", "end", "waited_on_rank"]
WAIT = "wait"


def ns_offsets(off: dict[int, float]) -> dict[int, int]:
    """The clock offsets (ns) as whole nanoseconds: every time below stays an exact int64."""
    return {int(r): round(v) for r, v in off.items()}


def waited(matched: pd.DataFrame, inst: pd.DataFrame, off: dict[int, int]) -> pd.DataFrame:
    """The matched instances (``cross_rank.match`` of ``inst``, row for row) in which a rank
    waited: ``rank``, ``start``, ``end``, ``last`` (the instance's last arrival),
    ``waited_on_rank`` (the last arriver), on the reference clock in int64 ns (own clock minus
    the whole-ns offset)."""
    cols = ["rank", "start", "end", "last", "waited_on_rank"]
    f = matched
    ok = f["wait_ns"].to_numpy(dtype=float) > 0
    if not ok.any():
        return pd.DataFrame(columns=cols)
    rank = inst["rank"].to_numpy(np.int64)
    shift = np.array([off.get(int(r), 0) for r in rank], np.int64)
    start = inst["start"].to_numpy(np.int64) - shift
    end = inst["end"].to_numpy(np.int64) - shift
    gid = f["gid"].to_numpy()
    last = pd.Series(start).groupby(gid).transform("max").to_numpy(np.int64)
    late = f.loc[f["last"].to_numpy(bool), ["gid", "rank"]].drop_duplicates("gid").set_index("gid")["rank"]
    out = pd.DataFrame(
        {
            "rank": rank[ok],
            "start": start[ok],
            "end": end[ok],
            "last": last[ok],
            "waited_on_rank": late.reindex(gid[ok]).fillna(-1).to_numpy(np.int64),
        }
    )
    return out.sort_values(["rank", "start"], kind="stable", ignore_index=True)


def wait_segments(rank: int, comm: pd.DataFrame, waits: pd.DataFrame, offset_ns: int) -> pd.DataFrame:
    """The waits inside one rank's ``comm`` path pieces (``step``, ``phase``, ``module``,
    ``start``, ``end`` on its own clock): per piece and overlapping instance the part from
    the piece's (or instance's) start to the instance's last arrival, in :data:`SEGMENT_COLUMNS`
    with ``start`` / ``end`` on the reference clock (own clock - ``offset_ns``), int64 ns. A
    time inside several instances (on two streams) counts once."""
    w = waits[waits["rank"].to_numpy() == rank]
    if comm.empty or w.empty:
        return pd.DataFrame(columns=SEGMENT_COLUMNS)
    lo = comm["start"].to_numpy(np.int64) - offset_ns
    hi = comm["end"].to_numpy(np.int64) - offset_ns
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    s, e, last = (w[c].to_numpy(np.int64) for c in ("start", "end", "last"))
    # the instances overlapping each piece: from the first whose running end passes its start
    # to the last that starts before its end
    i0 = np.searchsorted(np.maximum.accumulate(e), lo, "right")
    i1 = np.searchsorted(s, hi, "left")
    n = np.maximum(i1 - i0, 0)
    piece = np.repeat(np.arange(len(lo)), n)
    inst = np.repeat(i0, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    a = np.maximum(lo[piece], s[inst])
    b = np.minimum(np.minimum(hi[piece], e[inst]), last[inst])
    # pieces never overlap and are in time order: a running end over all pairs before
    seen = np.maximum.accumulate(np.r_[np.iinfo(np.int64).min, b[:-1]]) if len(b) else b
    a = np.maximum(a, seen)
    keep = b > a
    rows = order[piece[keep]]
    return pd.DataFrame(
        {
            "rank": np.full(int(keep.sum()), rank, np.int64),
            "step": comm["step"].to_numpy(np.int64)[rows],
            "phase": comm["phase"].astype(str).to_numpy(dtype=object)[rows],
            "module": comm["module"].astype(str).to_numpy(dtype=object)[rows],
            "start": a[keep],
            "end": b[keep],
            "waited_on_rank": w["waited_on_rank"].to_numpy(np.int64)[inst[keep]],
        }
    )


def wait_rows(segs: pd.DataFrame, n_steps: pd.Series | None) -> pd.DataFrame:
    """The segments (of complete steps) summed per ``rank``, (``step``,) ``phase``, ``module``,
    ``waited_on_rank``: ``time_ms``; per step (``n_steps`` None) or as each rank's mean over its
    ``n_steps[rank]`` complete steps."""
    keys = ["rank", *([] if n_steps is not None else ["step"]), "phase", "module", "waited_on_rank"]
    if segs.empty:
        return pd.DataFrame(columns=[*keys, "time_ms"])
    dur = (segs["end"] - segs["start"]).astype(np.float64)
    out = dur.groupby([segs[k] for k in keys], sort=True).sum().reset_index(name="time_ms")
    per = 1.0 if n_steps is None else n_steps.reindex(out["rank"].to_numpy()).fillna(1.0).to_numpy(float)
    out["time_ms"] = out["time_ms"].to_numpy(float) / NS_PER_MS / per
    return out


def split_table(table: pd.DataFrame, waits: pd.DataFrame) -> pd.DataFrame:
    """The ``critical_path`` rows (``rank``, ``kind``, ``phase``, ``module``, ``time_ms``, with
    or without ``step``) with the ``waits`` (:func:`wait_rows` of the same view) taken from the
    ``comm`` rows of their keys and added as ``wait`` rows; ``waited_on_rank`` -1 on the other
    rows. A ``comm`` row whose time was all wait is dropped. Other columns are left to the caller."""
    t = table.copy()
    t["waited_on_rank"] = np.int64(-1)
    if waits.empty:
        return t
    keys = [k for k in ("rank", "step", "phase", "module") if k in t.columns]
    total = waits.groupby(keys, sort=False)["time_ms"].sum()
    comm = (t["kind"].astype(str) == "comm").to_numpy()
    at = pd.MultiIndex.from_frame(t.loc[comm, keys].astype(dict.fromkeys(("phase", "module"), str)))
    t.loc[comm, "time_ms"] = t.loc[comm, "time_ms"].to_numpy(float) - total.reindex(at).fillna(0.0).to_numpy()
    # a float residue of an all-wait comm row (a nanosecond is 1e-6 ms)
    gone = comm & (t["time_ms"].to_numpy(float) < 1e-9)
    add = waits.assign(kind=WAIT)
    out = pd.concat([t.loc[~gone], add[[c for c in t.columns if c in add.columns]]], ignore_index=True)
    sort = [k for k in ("rank", "step", "kind", "phase", "module", "waited_on_rank") if k in out.columns]
    return out.sort_values(sort, kind="stable", ignore_index=True)


def split_timeline(rows: pd.DataFrame, segs: pd.DataFrame) -> pd.DataFrame:
    """The ``critical_path_timeline`` rows (``rank``, ``step``, ``kind``, ``start_ms``,
    ``end_ms``...) with each ``comm`` row cut where ``segs`` (``rank``, ``step``, ``lo``, ``hi``:
    ns since the rank's step window began, ``waited_on_rank``) cover it: the covered parts
    ``wait`` rows, the rest ``comm``; each part keeps its row's labels and ``pieces``;
    ``waited_on_rank`` -1 on every row but the waits."""
    t = rows.copy()
    t["waited_on_rank"] = np.int64(-1)
    comm = (t["kind"].astype(str) == "comm").to_numpy()
    if not comm.any() or segs.empty:
        return t
    c = t[comm]
    pair = pd.concat([c[["rank", "step"]], segs[["rank", "step"]]], ignore_index=True)
    g = pd.MultiIndex.from_frame(pair.astype(np.int64)).factorize()[0].astype(np.int64) << 42
    gr, gs = g[: len(c)], g[len(c) :]
    ra = gr + np.rint(c["start_ms"].to_numpy(float) * 1e6).astype(np.int64)
    rb = gr + np.rint(c["end_ms"].to_numpy(float) * 1e6).astype(np.int64)
    sa, sb = gs + segs["lo"].to_numpy(np.int64), gs + segs["hi"].to_numpy(np.int64)
    pts = np.unique(np.r_[ra, rb, sa, sb])
    lo, hi = pts[:-1], pts[1:]
    ro, so = np.argsort(ra, kind="stable"), np.argsort(sa, kind="stable")
    i = np.searchsorted(ra[ro], lo, "right") - 1
    j = np.searchsorted(sa[so], lo, "right") - 1
    inside = (i >= 0) & (hi <= rb[ro][np.maximum(i, 0)])
    row = ro[np.maximum(i, 0)]
    cov = (j >= 0) & (lo < sb[so][np.maximum(j, 0)])
    who = np.where(cov, segs["waited_on_rank"].to_numpy(np.int64)[so][np.maximum(j, 0)], -1)
    lo, hi, row, who = lo[inside], hi[inside], row[inside], who[inside]
    new = np.r_[True, (row[1:] != row[:-1]) | (who[1:] != who[:-1]) | (lo[1:] != hi[:-1])]
    first, last = np.flatnonzero(new), np.r_[np.flatnonzero(new)[1:] - 1, len(new) - 1]
    parts = c.iloc[row[first]].reset_index(drop=True)
    parts["start_ms"] = (lo[first] - gr[row[first]]) / 1e6
    parts["end_ms"] = (hi[last] - gr[row[first]]) / 1e6
    parts["waited_on_rank"] = who[first]
    parts["kind"] = np.where(who[first] >= 0, WAIT, "comm")
    out = pd.concat([t[~comm], parts], ignore_index=True)
    return out.sort_values(["rank", "step", "start_ms"], kind="stable", ignore_index=True)


STITCH_COLUMNS = ["step", "rank", "kind", "phase", "module", "start", "end"]
RANK_COLUMNS = ["step", "rank", "path_ms", "share_pct", "phase", "module", "module_ms", "sets_length"]


def stitched(step: int, bounds: pd.DataFrame, segs: pd.DataFrame, pieces_of, off: dict) -> dict:
    """The step's path across ranks, walked backward (reference clock, ns): from the rank whose
    window ends last (the lowest on a tie), along its own path to its latest wait that ends by
    then, there to the waited-on rank at the last arrival, and so on, until a rank's path
    reaches its window's start with no wait before. ``bounds``: the ranks' windows of this step
    (``rank``, ``start``, ``end``, reference clock); ``segs``: the step's wait segments;
    ``pieces_of(rank)``: the rank's path pieces as arrays (:func:`piece_arrays`, own clock).
    Returns the pieces on the path as arrays (:data:`STITCH_COLUMNS`)."""
    b = bounds.sort_values(["end", "rank"], ascending=[False, True], kind="stable")
    out: list[dict] = []
    if b.empty:
        return _joined(out)
    lo_of = dict(zip(b["rank"].tolist(), b["start"].tolist()))
    rank, t = int(b["rank"].iloc[0]), int(b["end"].iloc[0])
    s_rank, s_end = segs["rank"].to_numpy(np.int64), segs["end"].to_numpy(np.int64)
    s_who = segs["waited_on_rank"].to_numpy(np.int64)
    for _ in range(len(segs) + 1):  # each jump uses up one wait
        mine = np.flatnonzero((s_rank == rank) & (s_end <= t))
        w = mine[np.argmax(s_end[mine])] if len(mine) else -1
        lo = int(s_end[w]) if w >= 0 else int(lo_of.get(rank, t))
        out.append(_clipped(pieces_of(rank), step, rank, lo, t, off.get(rank, 0)))
        if w < 0 or int(s_who[w]) not in lo_of:
            break
        rank, t = int(s_who[w]), lo
    return _joined(out)


def piece_arrays(p: pd.DataFrame) -> dict[str, np.ndarray]:
    """A rank's path pieces as arrays, labels as text (what :func:`stitched` reads)."""
    out = {c: p[c].to_numpy(np.int64) for c in ("step", "start", "end")}
    out |= {c: p[c].astype(str).to_numpy(dtype=object) for c in ("kind", "phase", "module")}
    return out


def _clipped(p: dict, step: int, rank: int, lo: int, hi: int, offset: int) -> dict:
    """A rank's path pieces of ``step`` inside ``[lo, hi)`` (reference clock)."""
    a = np.maximum(p["start"] - offset, lo)
    b = np.minimum(p["end"] - offset, hi)
    k = (b > a) & (p["step"] == step)
    got = {c: p[c][k] for c in ("kind", "phase", "module")}
    return got | {
        "step": np.full(int(k.sum()), step),
        "rank": np.full(int(k.sum()), rank),
        "start": a[k],
        "end": b[k],
    }


def _joined(parts: list[dict]) -> dict:
    return {c: np.concatenate([p[c] for p in parts]) if parts else np.zeros(0) for c in STITCH_COLUMNS}


def setters(path: pd.DataFrame) -> pd.DataFrame:
    """Per step and rank on the cross-rank path (:func:`stitched`): its time there
    (``path_ms``, ``share_pct`` of the path), its phase and module with most of that time
    (``module_ms``; waiting with nothing of its own running, ``idle``, only where nothing else
    is), and ``sets_length`` = 1 for the rank holding most of the path (the lowest on a tie)."""
    if path.empty:
        return pd.DataFrame(columns=RANK_COLUMNS)
    p = path.assign(ms=(path["end"] - path["start"]).astype(float) / NS_PER_MS)
    p["busy"] = p["kind"] != "idle"
    by = p.groupby(["step", "rank", "busy", "phase", "module"], sort=True)["ms"].sum().reset_index()
    by = by.sort_values(["step", "rank", "busy", "ms"], ascending=[True, True, False, False], kind="stable")
    top = by.drop_duplicates(["step", "rank"]).set_index(["step", "rank"])
    per = p.groupby(["step", "rank"], sort=True)["ms"].sum().rename("path_ms").reset_index()
    per["share_pct"] = per["path_ms"] / per.groupby("step")["path_ms"].transform("sum") * 100.0
    at = pd.MultiIndex.from_frame(per[["step", "rank"]])
    per["phase"] = top["phase"].reindex(at).to_numpy()
    per["module"] = top["module"].reindex(at).to_numpy()
    per["module_ms"] = top["ms"].reindex(at).to_numpy()
    per = per.sort_values(["step", "path_ms", "rank"], ascending=[True, False, True], kind="stable")
    per["sets_length"] = (~per["step"].duplicated()).astype(np.int64)
    return per[RANK_COLUMNS].reset_index(drop=True)


declare(
    TableSpec(
        name="critical_path_ranks",
        title="Critical path across ranks: whose path set each step's length",
        func=None,
        cross_rank=True,
        keys=("rank",),  # the walk needs the whole path: left out of a --phase/--module run
        chart="none",
        aggregate=PER_STEP,
        reads=CRITICAL_PIECES,
        top=24,
        values={"path_ms": MS, "share_pct": PCT, "module_ms": MS, "sets_length": INDEX},
    )
)
