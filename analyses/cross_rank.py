"""Collectives across ranks: each instance matched, its time split into wait and transfer, stragglers.

Input: every rank's collective instances (:func:`tracekit.analyses.collectives.instances`: one
row per instance, a few dozen bytes; nothing else crosses the process boundary). The rule
(docs/metrics.md "Collectives across ranks"):

* **matching** (:mod:`tracekit.analyses.p2p`): an instance is the same collective on every
  rank that has the same process group, collective and instance number (``Seq`` where
  recorded, else the order among the group's instances of that collective); a send pairs
  with its peer's receive by step, process group, the pair and their order between that pair;
  a match where some rank's end comes before the last arrival cannot be one collective (a
  trace lacking instances, drifting clocks) and is left unmatched (a notice), except a send
  that ended before its receiver arrived (buffered: no wait, all transfer);
* **clocks** (:mod:`tracekit.analyses.clocks`): matched collectives finish together, and a
  send's end is close to its receive's, so two ranks' clocks differ by the median of their
  matched ends' differences (whole-group collectives where they share one, else their pairs),
  moved into the range causality allows; a rank's offset is summed along a chain of such links
  from the reference (the lowest rank present); a rank with no chain has none (a notice);
  ``clock_offsets_ms`` in meta; every time below is on the reference clock;
* **arrival**: the start of the rank's collective kernel (gloo: its ``gloo:*`` range);
  ``wait`` = last arrival - own arrival, ``transfer`` = own end - last arrival (an instance
  seen on one rank only has neither; of a send and its receive, the last arrival is the
  later of the two);
* **straggler**: an instance's last-arriving rank (the lowest on a tie); the wait it caused is
  the sum of the other ranks' waits; what made it late: its longest top-level op since its
  previous arrival (``lead_op``, phase, module) and how much longer that op ran than the
  median of the other ranks' time in the same op there (``op_excess_ms``).

All of it vectorised over instances: a few group-bys over one frame of every rank's rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._common import NS_PER_MS
from ._registry import COUNT, INDEX, MS, PER_STEP, TableSpec, declare
from .clocks import Clocks, clock_offsets, unlinked_note
from .collectives import KEYS, summarise
from .p2p import GROUP_KEYS, POINT_TO_POINT, SEND, is_p2p, match_ids, own_numbers

MATCH_KEYS = GROUP_KEYS
STRAGGLER_COLUMNS = ["rank", "step", "instances", "caused_wait_ms", "phase", "module", "op", "op_excess_ms"]
MATCH_COLUMNS = [
    "step", "phase", "collective", "process_group", "instance", "ranks", "last_rank",
    "caused_wait_ms", "max_wait_ms", "transfer_ms",
]  # fmt: skip


def match(inst: pd.DataFrame) -> tuple[pd.DataFrame, Clocks]:
    """Every rank's instances with ``wait_ns``, ``transfer_ns``, ``last`` (this rank arrived
    last), ``ranks`` (how many ranks have it), ``instance`` the collective's own number (a
    pair's: :func:`~tracekit.analyses.p2p.own_numbers`), on the reference clock; and the clocks
    (:mod:`tracekit.analyses.clocks`)."""
    clocks = clock_offsets(inst)
    shift = inst["rank"].map(clocks.shift).to_numpy(dtype=float)
    f = inst.assign(start=inst["start"] - shift, end=inst["end"] - shift)
    gid = match_ids(f)
    g = f.groupby(gid)
    last = g["start"].transform("max").to_numpy()
    n = g["start"].transform("size").to_numpy()
    end = f["end"].to_numpy()
    # a send that ended before its receiver arrived went into a buffer (eager): it waited
    # for no one, and its time is all transfer
    eager = is_p2p(f) & (f["direction"].to_numpy() == SEND) & (end < last)
    # ends before the last arrival: not one collective (a rank's trace lacks instances), or
    # clocks the median cannot align; such an instance is left unmatched
    broken = pd.Series((end < last) & ~eager).groupby(gid).transform("any").to_numpy()
    both = (n > 1) & ~broken
    f["inconsistent"] = broken & (n > 1)
    f["gid"], f["ranks"] = gid, n
    start = f["start"].to_numpy()
    f["wait_ns"] = np.where(both, np.where(eager, 0.0, last - start), np.nan)
    f["transfer_ns"] = np.where(both, np.where(eager, end - start, end - last), np.nan)
    order = f.sort_values(["gid", "start", "rank"], ascending=[True, False, True], kind="stable")
    first_last = order.drop_duplicates("gid").index
    f["last"] = False
    f.loc[first_last, "last"] = True
    f["last"] &= both
    f["instance"] = own_numbers(f)  # a pair's own, not the per-rank number of its last arrival
    return f, clocks


def _excess(f: pd.DataFrame) -> pd.Series:
    """Per last arrival (index of ``f``), its lead op's time minus the median of the other
    ranks' time in that same op before the same instance (0 for a rank where it did not lead)."""
    late = f.loc[f["last"], ["gid", "rank", "lead_op", "lead_ms"]]
    others = f.loc[~f["last"], ["gid", "lead_op", "lead_ms"]]
    same = late.reset_index().merge(others, on=["gid", "lead_op"], how="left", suffixes=("", "_o"))
    med = same.groupby("index")["lead_ms_o"].median().reindex(late.index).fillna(0.0)
    return late["lead_ms"].fillna(0.0) - med


def tables(inst: pd.DataFrame) -> tuple[dict[str, pd.DataFrame], dict]:
    """``collectives`` (every rank's rows, wait and transfer filled), ``stragglers``,
    ``collective_matches``; and meta (``clock_offsets_ms``, notices)."""
    if inst.empty:  # every table the run names, with no rows (not absent: the API asks for them)
        empty = summarise(inst, ["rank", *KEYS])
        none = {"stragglers": STRAGGLER_COLUMNS, "collective_matches": MATCH_COLUMNS}
        return {"collectives": empty, **{k: pd.DataFrame(columns=c) for k, c in none.items()}}, {}
    f, clocks = match(inst)
    caused = f.groupby("gid")["wait_ns"].sum(min_count=1)
    f["caused_ns"] = np.where(f["last"], caused.reindex(f["gid"]).to_numpy(), 0.0)
    out = {
        "collectives": summarise(f, ["rank", *KEYS]),
        "stragglers": _stragglers(f),
        "collective_matches": _matches(f),
    }
    meta: dict = {"clock_offsets_ms": {r: v / NS_PER_MS for r, v in clocks.offsets.items()}}
    notes = _notes(f) + [n for n in [unlinked_note(clocks)] if n]
    if notes:
        meta["notice"] = "collectives: " + "; ".join(notes)
    return out, meta


def _notes(f: pd.DataFrame) -> list[str]:
    """What the matching could not do: instances missing on some ranks (a send or receive:
    its peer's half), sends or receives with no recorded direction or peer, broken matches."""
    g = f.groupby("gid")
    seen, p2p = g["ranks"].first(), g["collective"].first().isin(POINT_TO_POINT)
    alone = g["peer"].first().lt(0) | ~g["direction"].first().isin([1, 2])
    notes = []
    missing = int(((seen < np.where(p2p, 2, f["rank"].nunique())) & ~(p2p & alone)).sum())
    if missing:
        notes.append(
            f"{missing} collective instance(s) are missing on some ranks: their wait and transfer "
            "are over the ranks that have them (a send or receive: none without its peer's half)"
        )
    unpaired = int((p2p & alone).sum())
    if unpaired:
        notes.append(
            f"{unpaired} send(s) or receive(s) record no direction or peer (an older torch, a "
            "receive from any source, or a batch run as one kernel): paired with nothing"
        )
    bad = f.loc[f["inconsistent"], "gid"].nunique()
    if bad:
        notes.append(
            f"{bad} collective instance(s) matched across ranks end before their last arrival on "
            "some rank (traces that lack instances, or clocks that drift): left unmatched"
        )
    return notes


def _stragglers(f: pd.DataFrame) -> pd.DataFrame:
    """Per rank and step where it arrived last: the wait it caused, and what made it late (the
    instance that caused most: its lead op's phase, module, name and excess)."""
    late = f.loc[f["last"] & (f["caused_ns"] > 0)].copy()
    if late.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    late["op_excess_ms"] = _excess(f).reindex(late.index).to_numpy()
    late = late.sort_values(["rank", "step", "caused_ns"], ascending=[True, True, False], kind="stable")
    g = late.groupby(["rank", "step"], sort=True)
    out = g.agg(
        instances=("gid", "size"),
        caused=("caused_ns", "sum"),
        phase=("lead_phase", "first"),
        module=("lead_module", "first"),
        op=("lead_op", "first"),
        op_excess_ms=("op_excess_ms", "first"),
    ).reset_index()
    out["caused_wait_ms"] = out["caused"] / NS_PER_MS
    return out.sort_values(["step", "caused_wait_ms"], ascending=[True, False], kind="stable")[
        STRAGGLER_COLUMNS
    ]


def _matches(f: pd.DataFrame) -> pd.DataFrame:
    """One row per instance matched on several ranks: who arrived last, the wait it caused,
    the longest wait and the transfer (the last arrival's: the time every rank moves bytes)."""
    m = f.loc[f["last"]].copy()
    if m.empty:
        return pd.DataFrame(columns=MATCH_COLUMNS)
    longest = f.groupby("gid")["wait_ns"].max()
    m["last_rank"] = m["rank"]
    m["caused_wait_ms"] = m["caused_ns"] / NS_PER_MS
    m["max_wait_ms"] = longest.reindex(m["gid"]).to_numpy() / NS_PER_MS
    m["transfer_ms"] = m["transfer_ns"] / NS_PER_MS
    return m.sort_values(["step", "start"], kind="stable")[MATCH_COLUMNS].reset_index(drop=True)


declare(
    TableSpec(
        name="stragglers",
        title="Stragglers: who held the others back at collectives, and why",
        func=None,
        cross_rank=True,
        keys=("rank",),
        chart="none",
        aggregate=PER_STEP,
        top=24,
        sort_by="caused_wait_ms",
        values={"instances": COUNT, "caused_wait_ms": MS, "op_excess_ms": MS},
    )
)
declare(
    TableSpec(
        name="collective_matches",
        title="Collective instances matched across ranks",
        func=None,
        cross_rank=True,
        keys=("phase", "collective", "process_group"),
        chart="none",
        aggregate=PER_STEP,
        shown=False,
        values={
            "instance": INDEX,
            "ranks": COUNT,
            "last_rank": INDEX,
            "caused_wait_ms": MS,
            "max_wait_ms": MS,
            "transfer_ms": MS,
        },
    )
)
