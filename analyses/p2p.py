"""Which instances are one collective across ranks: the whole group's, or a send and its receive.

Needs every rank's instances (:data:`tracekit.analyses.collectives.INSTANCE_COLUMNS` and
``rank``). Adds nothing; :func:`match_ids` gives each instance the id of the collective it is
one rank's part of. Guarantees (docs/metrics.md "Collectives across ranks"):

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
    rank, peer = p["rank"].to_numpy(np.int64), p["peer"].to_numpy(np.int64)
    d = p["direction"].to_numpy(np.int64)
    ok = ((d == SEND) | (d == RECV)) & (peer >= 0) & (peer != rank)
    out = np.full(len(p), -1, np.int64)
    if not ok.any():
        return out
    q = p.loc[ok, ["step", "process_group", "start"]].assign(
        src=np.where(d[ok] == SEND, rank[ok], peer[ok]),
        dst=np.where(d[ok] == SEND, peer[ok], rank[ok]),
        dir=d[ok],
    )
    q = q.sort_values(["start", "dir"], kind="stable")
    q["k"] = q.groupby(["step", "process_group", "src", "dst", "dir"], sort=False).cumcount()
    ids = q.groupby(["step", "process_group", "src", "dst", "k"], sort=False).ngroup()
    out[np.flatnonzero(ok)] = ids.reindex(p.index[ok]).to_numpy()
    return out
