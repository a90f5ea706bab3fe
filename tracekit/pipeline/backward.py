"""Step ``link_backward``: each backward node's forward op (the op that created the node)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..checks import TraceWarning
from ..nesting import F_BWD, F_MODULE, F_OP, MOD_IN_BWD
from ..read import FLOW_FWDBWD
from .state import Trace, as_str, lookup, take


def link_backward(t: Trace) -> Trace:
    """Link every activity launched by a backward node to the forward op that created the node.

    Needs: ``t.ranges`` (``flags``, ``seq``, ``fwd_tid``, ``tid``, ``start``) and ``acts.bwd_r``,
    ``ctx_bits``.
    Adds on ``acts``: ``backward_node`` (launched inside a backward node whose work is not a
    re-entered module: the node's creator says where it belongs), ``node`` (the node's name),
    ``node_seq`` (its Sequence number, -1 none), ``fwd_op_r`` (the forward op, a row of
    ``t.ranges``; -1 none), ``fwd_op_id`` (its event row), ``fwd_op`` (its name),
    ``bwd_link`` ("seq": by sequence number on the forward thread, "flow": by a ``fwdbwd``
    flow, "none": a backward node with neither, "": not a backward node) and
    ``backward_linked``.
    Guarantees: forward ops are those with a Sequence number and no forward-thread id, on the
    thread that holds most of them; backward nodes that are not AccumulateGrad and stay
    unlinked are counted in a warning.
    """
    a, r = t.acts, t.ranges
    bwd = a["bwd_r"].to_numpy()
    use = (bwd >= 0) & ((a["ctx_bits"].to_numpy() & MOD_IN_BWD) == 0)
    seq = take(r["seq"].to_numpy(), bwd, -1)
    f_op = np.full(len(a), -1, np.int64)
    how = np.where(use, "none", "").astype(object)
    if use.any():
        by_seq = lookup(_forward_ops_by_seq(r), seq[use])
        by_flow = lookup(_fwdbwd_pairs(t), bwd[use])
        f = np.where(by_seq >= 0, by_seq, by_flow)
        how[use] = np.where(by_seq >= 0, "seq", np.where(by_flow >= 0, "flow", "none"))
        f_op[use] = f
    a["backward_node"] = use
    a["node"] = pd.Categorical(take(r["name"].to_numpy(), bwd, ""))
    a["node_seq"] = seq
    a["fwd_op_r"] = f_op
    a["fwd_op_id"] = take(r["ev"].to_numpy(), f_op, -1)
    a["fwd_op"] = pd.Categorical(take(r["name"].to_numpy(), f_op, ""))
    a["bwd_link"] = pd.Categorical(how)
    a["backward_linked"] = f_op >= 0
    accumulate = a["node"].astype(str).str.contains("AccumulateGrad", regex=False).to_numpy()
    unlinked = int((use & (f_op < 0) & ~accumulate).sum())
    if unlinked and ((r["flags"].to_numpy() & F_MODULE) != 0).any():
        t.warnings.append(TraceWarning("backward_unlinked", f"{unlinked} backward activities "
                                       "could not be linked to a forward op (no sequence "
                                       "number or fwdbwd flow); their module is Other"))
    return t


def _forward_ops_by_seq(r: pd.DataFrame) -> pd.Series:
    """Sequence number -> forward op (row of ``r``): the first op on the main forward thread."""
    flags = r["flags"].to_numpy()
    fwd = np.flatnonzero(((flags & F_OP) != 0) & (r["seq"].to_numpy() >= 0) &
                         (r["fwd_tid"].to_numpy() <= 0) & ((flags & F_BWD) == 0))
    if fwd.size == 0:
        return pd.Series(dtype=np.int64)
    tid = r["tid"].to_numpy()[fwd]
    main = pd.Series(tid).value_counts().idxmax()
    fl = fwd[tid == main]
    fl = fl[np.argsort(r["start"].to_numpy()[fl], kind="stable")]
    by = pd.Series(fl, index=r["seq"].to_numpy()[fl])
    return by[~by.index.duplicated(keep="first")]


def _fwdbwd_pairs(t: Trace) -> pd.Series:
    """Backward op -> forward op (rows of ``t.ranges``) from ``fwdbwd`` flow pairs: the flow
    starts on the forward op and finishes on the backward op (matched by thread and time)."""
    ev, r = t.events, t.ranges
    fl = np.flatnonzero(ev["kind"].to_numpy() == FLOW_FWDBWD)
    ops = np.flatnonzero((r["flags"].to_numpy() & F_OP) != 0)
    if fl.size == 0 or ops.size == 0:
        return pd.Series(dtype=np.int64)
    key = pd.Series(ops, index=pd.MultiIndex.from_arrays(
        [r["pid"].to_numpy()[ops], r["tid"].to_numpy()[ops], r["start"].to_numpy()[ops]]))
    key = key[~key.index.duplicated(keep="first")]
    pid, tid, ts = (ev[c].to_numpy()[fl] for c in ("pid", "tid", "ts"))
    where = key.reindex(pd.MultiIndex.from_arrays([pid, tid, ts])).to_numpy(dtype="float64")
    df = pd.DataFrame({"id": ev["flow_id"].to_numpy()[fl], "ph": as_str(ev["flow_ph"])[fl],
                       "op": where}).dropna()
    s = df[df.ph == "s"].drop_duplicates("id").set_index("id")["op"]
    f = df[df.ph == "f"].drop_duplicates("id").set_index("id")["op"]
    pairs = pd.concat([f.rename("bwd"), s.rename("fwd")], axis=1, join="inner")
    out = pd.Series(pairs["fwd"].astype(np.int64).to_numpy(),
                    index=pairs["bwd"].astype(np.int64).to_numpy())
    return out[~out.index.duplicated(keep="first")]
