"""Which instances are one collective across ranks: the whole group's, or a send and its receive.

Needs every rank's instances (:data:`tracekit.analyses.collectives.INSTANCE_COLUMNS` and
``rank``). Adds nothing; :func:`match_ids` gives each instance the id of the collective it is
one rank's part of, :func:`own_numbers` that collective's number (a pair's own). Guarantees
(docs/metrics.md "Collectives across ranks"):

* a collective of the whole group: the same process group, collective and instance number
  (``Seq`` where recorded, else the order among the group's instances of that collective);
* a send or receive (``SendRecv``) pairs two ranks: the k-th send from rank a to rank b in a
  step and process group is one transfer with the k-th receive on rank b from rank a there,
  k counted by arrival on each rank. That is the order NCCL and gloo themselves match a
  pair's messages in. torch's ``Seq`` of a send or receive is not used: it counts every
  send and receive of the group on the rank, so two ranks agree on it only when they
  exchange with no third rank;
* a send or receive whose direction or peer is not recorded is paired with nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Sends and receives: they pair two ranks, not the group.
POINT_TO_POINT = ("SendRecv",)
SEND, RECV = 1, 2
GROUP_KEYS = ["process_group", "collective", "instance"]


def is_p2p(inst: pd.DataFrame) -> np.ndarray:
    return np.isin(inst["collective"].to_numpy(), POINT_TO_POINT)


def match_ids(inst: pd.DataFrame) -> np.ndarray:
    """Per instance, the id of the collective it is part of (module docstring): whole-group
    collectives first, then the pairs, then each unpairable send or receive alone."""
    p2p = is_p2p(inst)
    gid = np.full(len(inst), -1, np.int64)
    if (~p2p).any():
        gid[~p2p] = inst.loc[~p2p].groupby(GROUP_KEYS, sort=False).ngroup().to_numpy()
    if p2p.any():
        first = gid.max() + 1
        pairs = pair_ids(inst.loc[p2p])
        alone = pairs < 0
        pairs[alone] = (pairs.max() + 1 if (~alone).any() else 0) + np.arange(alone.sum())
        gid[p2p] = first + pairs
    return gid


def pair_ids(p: pd.DataFrame) -> np.ndarray:
    """Per send or receive, the id of its (step, process group, source, destination, k) pair
    (-1: direction or peer unknown)."""
    p = p.reset_index(drop=True)
    out = np.full(len(p), -1, np.int64)
    ok, q = _pairs(p)
    if len(q):
        ids = q.groupby(["step", "process_group", "src", "dst", "k"], sort=False).ngroup()
        out[ok] = ids.reindex(p.index[ok]).to_numpy()
    return out


def own_numbers(inst: pd.DataFrame) -> np.ndarray:
    """Per instance, the number of the collective it is part of: a whole-group collective's
    (its ``instance``, the same on every rank); a paired send's or receive's, the pair's own:
    its order among the transfers from its source to its destination in its process group,
    over the whole trace (by step, then k), from 0: the same on both ranks, where each rank's
    own ``instance`` counts all of that rank's sends and receives."""
    out = inst["instance"].to_numpy().copy()
    p2p = np.flatnonzero(is_p2p(inst))
    if not len(p2p):
        return out
    p = inst.iloc[p2p].reset_index(drop=True)
    ok, q = _pairs(p)
    if not len(q):
        return out
    keys = ["process_group", "src", "dst"]
    on = [*keys, "step", "k"]
    uniq = q.drop_duplicates(on).sort_values(on, kind="stable")
    uniq = uniq.assign(n=uniq.groupby(keys, sort=False).cumcount())
    n = q.reset_index().merge(uniq[[*on, "n"]], on=on).set_index("index")["n"]
    out[p2p[ok]] = n.reindex(p.index[ok]).to_numpy()
    return out


def _pairs(p: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """The rows of ``p`` (a default index) with a direction and peer, and for each (indexed as
    in ``p``) its ``step``, ``process_group``, ``src``, ``dst`` and ``k``: its order among the
    sends (or receives) from ``src`` to ``dst`` in its step and process group, by arrival."""
    rank, peer = p["rank"].to_numpy(np.int64), p["peer"].to_numpy(np.int64)
    d = p["direction"].to_numpy(np.int64)
    ok = ((d == SEND) | (d == RECV)) & (peer >= 0) & (peer != rank)
    if not ok.any():
        return np.flatnonzero(ok), pd.DataFrame()
    q = p.loc[ok, ["step", "process_group", "start"]].assign(
        src=np.where(d[ok] == SEND, rank[ok], peer[ok]),
        dst=np.where(d[ok] == SEND, peer[ok], rank[ok]),
        dir=d[ok],
    )
    q = q.sort_values(["start", "dir"], kind="stable")
    q["k"] = q.groupby(["step", "process_group", "src", "dst", "dir"], sort=False).cumcount()
    return np.flatnonzero(ok), q
