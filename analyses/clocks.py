"""Each rank's clock offset, from the instances matched across ranks: whole-group collectives,
and sends paired with their receives.

Needs every rank's instances (:data:`tracekit.analyses.collectives.INSTANCE_COLUMNS` and
``rank``). Adds nothing; :func:`clock_offsets` gives each rank's offset (its clock minus the
reference's, ns). Guarantees (docs/metrics.md "Clock alignment"):

* a **link** between two ranks is every matched instance they share (each instance links its
  lowest rank with each other rank in it; a pair links its two ranks). Its estimate of their
  clocks' difference is the median of (end - end) over the whole-group instances they share,
  which finish together; where they share none, over their send/receive pairs, whose ends are
  close (a buffered send's end is not: a minority of them does not move the median). The
  estimate is moved into the range causality allows, where that range is not empty: no rank
  ends a collective before the other arrived at it, no receive ends before its send arrived;
* a rank's offset is the sum of the links along its path from the reference (the lowest rank):
  the path with the fewest send/receive links, then the fewest links, then through the lowest
  ranks. A rank sharing a collective with the reference is one whole-group link from it;
* a rank with no path to the reference has no offset (unknown, never guessed): it is aligned on
  the lowest rank it has a path to, and :func:`unlinked_note` names it.
"""

from __future__ import annotations

import heapq
from typing import NamedTuple

import numpy as np
import pandas as pd

from .p2p import POINT_TO_POINT, SEND, match_ids


class Clocks(NamedTuple):
    """``offsets``: ns, the ranks with a path to the reference (itself 0); ``shift``: ns, every
    rank's, on the clock of the lowest rank it has a path to; ``alone``: per other such lowest
    rank, the ranks aligned on it (itself included)."""

    offsets: dict[int, float]
    shift: dict[int, float]
    alone: dict[int, list[int]]


def links(inst: pd.DataFrame) -> pd.DataFrame:
    """One row per two ranks ``a < b`` that share a matched instance: ``est`` (ns: b's clock
    minus a's) and ``p2p`` (True: they share send/receive pairs only)."""
    cols = ["gid", "collective", "direction", "start", "end"]
    f = inst.assign(gid=match_ids(inst))[["rank", *cols]]
    rank = f["rank"].to_numpy(np.int64)
    low = f.iloc[np.lexsort((rank, f["gid"].to_numpy()))].drop_duplicates("gid")
    m = f.merge(low[["rank", *cols]], on="gid", suffixes=("", "_ref"))
    m = m[m["rank"].to_numpy() != m["rank_ref"].to_numpy()]
    if m.empty:
        return pd.DataFrame({"a": [], "b": [], "est": [], "p2p": []})
    width = int(rank.max()) + 1
    by = pd.Series(m["rank_ref"].to_numpy(np.int64) * width + m["rank"].to_numpy(np.int64), index=m.index)
    group = ~np.isin(m["collective"].to_numpy(), POINT_TO_POINT)
    diff = (m["end"] - m["end_ref"]).astype(float)
    est = diff.where(group).groupby(by).median()
    p2p = est.isna()
    if p2p.any():  # where they share no whole-group instance: their pairs' median
        est[p2p] = diff[~group].groupby(by[~group]).median().reindex(est.index[p2p])
    # the lower rank ends after the other arrives (unless it is a send), and the reverse
    ref_waits = group | (m["direction_ref"].to_numpy() != SEND)
    own_waits = group | (m["direction"].to_numpy() != SEND)
    lo = (m["start"] - m["end_ref"]).astype(float).where(ref_waits).groupby(by).max()
    hi = (m["end"] - m["start_ref"]).astype(float).where(own_waits).groupby(by).min()
    lo, hi = lo.reindex(est.index).fillna(-np.inf), hi.reindex(est.index).fillna(np.inf)
    fit = np.where(lo <= hi, est.clip(lo, hi), est)
    key = est.index.to_numpy(np.int64)
    return pd.DataFrame({"a": key // width, "b": key % width, "est": fit, "p2p": p2p.to_numpy()})


def clock_offsets(inst: pd.DataFrame) -> Clocks:
    """Every rank's offset along its path of links from the reference (module docstring)."""
    ranks = sorted(int(r) for r in inst["rank"].unique())
    edges: dict[int, list[tuple[int, float, int]]] = {r: [] for r in ranks}
    heavy = len(ranks)  # a send/receive link costs more than any path of whole-group links
    for a, b, est, p2p in links(inst).itertuples(index=False):
        cost = heavy if p2p else 1
        edges[int(a)].append((int(b), float(est), cost))
        edges[int(b)].append((int(a), -float(est), cost))
    shift: dict[int, float] = {}
    roots: dict[int, list[int]] = {}
    for r in ranks:
        if r not in shift:
            reached = _paths(r, edges)
            shift.update(reached)
            roots[r] = sorted(reached)
    ref = ranks[0] if ranks else -1
    offsets = {r: shift[r] for r in roots.get(ref, [])}
    return Clocks(offsets, shift, {r: v for r, v in roots.items() if r != ref})


def _paths(root: int, edges: dict[int, list[tuple[int, float, int]]]) -> dict[int, float]:
    """Per rank with a path from ``root``, the links' estimates summed along its cheapest path
    (ties: the path found first, from the lowest ranks)."""
    best = {root: (0, 0.0)}
    done: dict[int, float] = {}
    heap = [(0, root)]
    while heap:
        cost, r = heapq.heappop(heap)
        if r in done:
            continue
        done[r] = best[r][1]
        for other, est, step in edges[r]:
            c = cost + step
            if other not in done and (other not in best or c < best[other][0]):
                best[other] = (c, done[r] + est)
                heapq.heappush(heap, (c, other))
    return done


def unlinked_note(clocks: Clocks) -> str | None:
    """A notice naming the ranks with no path to the reference (None: every rank has one)."""
    if not clocks.alone:
        return None
    ref = min(clocks.offsets) if clocks.offsets else -1
    parts = [
        ", ".join(map(str, rs)) + (f" (aligned on rank {root}'s clock)" if len(rs) > 1 else "")
        for root, rs in clocks.alone.items()
    ]
    return (
        f"no matched collective or send/receive links rank(s) {'; '.join(parts)} to rank {ref}, "
        "directly or through other ranks: their clock offsets are unknown and left out of "
        "clock_offsets_ms (never guessed)"
    )
