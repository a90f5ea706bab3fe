"""Step ``link_backward``: each backward node's forward op (the op that created the node)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.reader import FLOW_FWDBWD
from .checks import TraceWarning
from .nesting import F_BWD, F_MODULE, F_OP, MOD_IN_BWD
from .state import Coded, Trace, add_columns, as_str, codes_of, lookup, row_codes, spread, take

#: The values of ``bwd_link``, in the order of their codes.
LINKS = np.array(["", "flow", "seq", "none"], dtype=object)


def link_backward(t: Trace) -> Trace:
    """Link every activity launched by a backward node to the forward op that created the node.

    Needs: ``t.ranges`` (``flags``, ``seq``, ``fwd_tid``, ``tid``, ``start``) and ``acts.bwd_r``,
    ``ctx_bits``.
    Adds on ``acts``: ``backward_node`` (launched inside a backward node whose work is not a
    re-entered module: the node's creator says where it belongs), ``node`` (the node's name),
    ``node_seq`` (its Sequence number, -1 none), ``fwd_op_r`` (the forward op, a row of
    ``t.ranges``; -1 none), ``fwd_op_id`` (its event row), ``fwd_op`` (its name),
    ``bwd_link`` ("flow": the ``fwdbwd`` flow's start, "seq": the LAST forward op with the
    node's Sequence number before it, "none": a backward node with neither, "": not a backward
    node) and ``backward_linked``.
    Guarantees: the flow wins where the trace has one (its "f" end binds to the backward op);
    forward ops are those with a Sequence number and no forward-thread id, on the thread that
    holds most of them; backward nodes that are not AccumulateGrad and stay unlinked are
    counted in a warning.
    """
    a, r = t.acts, t.ranges
    bwd = a["bwd_r"].to_numpy()
    use = (bwd >= 0) & ((a["ctx_bits"].to_numpy() & MOD_IN_BWD) == 0)
    seq = take(r["seq"].to_numpy(), bwd, -1)
    f_op = np.full(len(a), -1, np.int64)
    how = np.where(use, 3, 0)  # codes into LINKS
    if use.any():
        by_flow = lookup(t.once("fwdbwd_pairs", (t.events, r), lambda: _fwdbwd_pairs(t)), bwd[use])
        ops = t.once("forward_ops", r, lambda: forward_ops(r))
        by_seq = creator_by_seq(ops, seq[use], r["start"].to_numpy()[bwd[use]])
        f = np.where(by_flow >= 0, by_flow, by_seq)
        how[use] = np.where(by_flow >= 0, 1, np.where(by_seq >= 0, 2, 3))
        f_op[use] = f
    r_ev = r["ev"].to_numpy()
    node = t.name_categorical(take(r_ev, bwd, -1))
    fwd_op_id = take(r_ev, f_op, -1)
    t.acts = add_columns(
        a,
        {
            "backward_node": use,
            "node": node,
            "node_seq": seq,
            "fwd_op_r": f_op,
            "fwd_op_id": fwd_op_id,
            "fwd_op": t.name_categorical(fwd_op_id),
            "bwd_link": Coded(how, LINKS).categorical(),
            "backward_linked": f_op >= 0,
        },
    )
    codes, names = codes_of(pd.Series(node))
    accumulate = spread(["AccumulateGrad" in n for n in names.tolist()], codes)
    unlinked = int((use & (f_op < 0) & ~accumulate).sum())
    if unlinked and ((r["flags"].to_numpy() & F_MODULE) != 0).any():
        t.warnings.append(
            TraceWarning(
                "backward_unlinked",
                f"{unlinked} backward activities "
                "could not be linked to a forward op (no sequence "
                "number or fwdbwd flow); their module is Other",
            )
        )
    return t


def forward_ops(r: pd.DataFrame) -> pd.DataFrame:
    """The forward ops of ``r`` that may create a backward node: ops with a Sequence number and
    no forward-thread id, outside backward nodes, on the thread holding most of them; ``seq``,
    ``t`` (start) and ``row`` (of ``r``), by start."""
    flags = r["flags"].to_numpy()
    fwd = np.flatnonzero(
        ((flags & F_OP) != 0)
        & (r["seq"].to_numpy() >= 0)
        & (r["fwd_tid"].to_numpy() <= 0)
        & ((flags & F_BWD) == 0)
    )
    if fwd.size:
        tid = r["tid"].to_numpy()[fwd]
        fwd = fwd[tid == pd.Series(tid).value_counts().idxmax()]
    ops = pd.DataFrame({"seq": r["seq"].to_numpy()[fwd], "t": r["start"].to_numpy()[fwd], "row": fwd})
    return ops.iloc[np.argsort(ops["t"].to_numpy(), kind="stable")]  # by start, then row


def creator_by_seq(ops: pd.DataFrame, seq: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Per backward node (its Sequence number and start): the row of its creator among
    :func:`forward_ops` ``ops``, the LAST forward op carrying that number that started before
    the node (-1 none). Earlier ops with the same number (an input ``aten::to``, the composite
    op around the creator) are not the creator."""
    out = np.full(len(seq), -1, np.int64)
    if ops.empty or len(seq) == 0:
        return out
    n = len(ops)
    o_seq, o_t = ops["seq"].to_numpy(np.int64), ops["t"].to_numpy(np.int64)
    all_seq = np.concatenate([o_seq, np.asarray(seq, np.int64)])
    all_t = np.concatenate([o_t, np.asarray(before, np.int64)])
    is_op = np.arange(len(all_seq)) < n
    # One sort of the ops (in their order) and the nodes by number, then time; at one time the
    # nodes first (their creator started strictly before). Each node's candidate is the last
    # op sorted before it: the creator when it has the node's number.
    order = np.lexsort((np.arange(len(all_seq)), is_op, all_t, all_seq))
    op_sorted = is_op[order]
    last = np.maximum.accumulate(np.where(op_sorted, np.arange(len(order)), -1))[~op_sorted]
    cand = np.where(last >= 0, order[np.maximum(last, 0)], 0)
    node = order[~op_sorted]
    found = (last >= 0) & (all_seq[cand] == all_seq[node])
    out[node - n] = np.where(found, ops["row"].to_numpy(np.int64)[np.minimum(cand, n - 1)], -1)
    return out


def _fwdbwd_pairs(t: Trace) -> pd.Series:
    """Backward op -> forward op (rows of ``t.ranges``) from ``fwdbwd`` flow pairs: the flow
    starts on the forward op and finishes on the backward op (matched by thread and time: the
    first op of ``t.ranges`` there). Per flow id its first start and first finish that are on
    an op; a backward op finished by several flows keeps the first finish's."""
    ev, r = t.events, t.ranges
    fl = np.flatnonzero(ev["kind"].to_numpy() == FLOW_FWDBWD)
    ops = np.flatnonzero((r["flags"].to_numpy() & F_OP) != 0)
    if fl.size == 0 or ops.size == 0:
        return pd.Series(dtype=np.int64)
    # One code per (pid, tid, time) over the ops and then the flows: an op's code is below
    # the number of distinct op places, and the first op of a place is the one it names.
    code = row_codes(*(np.concatenate([r[rc].to_numpy()[ops], ev[ec].to_numpy()[fl]]) for rc, ec in _PLACE))
    op_code, fl_code = code[: len(ops)], code[len(ops) :]
    first_op = np.full(int(op_code.max()) + 1, -1, np.int64)
    first_op[op_code[::-1]] = ops[::-1]
    on = np.where(fl_code < len(first_op), first_op[np.minimum(fl_code, len(first_op) - 1)], -1)
    fid, ph = ev["flow_id"].to_numpy()[fl], as_str(ev["flow_ph"])[fl]
    s, f = _first_of_id(fid, (ph == "s") & (on >= 0)), _first_of_id(fid, (ph == "f") & (on >= 0))
    at = pd.Index(fid[s]).get_indexer(fid[f])
    f, s = f[at >= 0], s[at[at >= 0]]
    keep = np.sort(np.unique(on[f], return_index=True)[1])
    return pd.Series(on[s][keep], index=on[f][keep])


#: The columns of a range (``t.ranges``) and of an event that say where it is.
_PLACE = (("pid", "pid"), ("tid", "tid"), ("start", "ts"))


def _first_of_id(fid: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The rows of ``mask`` that are the first of their ``fid``, in row order."""
    rows = np.flatnonzero(mask)
    return rows[np.sort(np.unique(fid[rows], return_index=True)[1])]
