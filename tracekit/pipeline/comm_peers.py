"""Step ``label_comm_peers``: which way a point-to-point operation goes, and its peer's global rank.

A send on one rank pairs with a receive on another, not with the whole group
(:mod:`tracekit.analyses.cross_rank`); that pairing needs each one's direction and peer. Where
they come from, in order (the first that says wins):

1. the args of the operation's own candidates (its ``record_param_comms`` range, its event,
   its launcher, its innermost op): ``Collective name`` ``send`` / ``recv``, and the peer's
   global rank, ``Dst Rank`` of a send or ``Src Rank`` of a receive (torch >= 2.4 writes them);
2. the ``c10d::send`` / ``c10d::recv_`` op on the same thread whose time holds the start of
   the operation's launch (NCCL: the kernel's launch call; gloo: the ``gloo:send`` /
   ``gloo:recv`` range, which starts inside it): its direction, and its peer, the third of its
   ``Concrete Inputs`` (``record_shapes=True``), a rank *within the group*, made global by the
   group's ranks in ``distributedInfo.pg_config`` (the only group there when the operation
   records none).

A receive from any source, or a peer nothing records, stays unknown (-1): such an operation is
never paired by guess.
"""

from __future__ import annotations

import json

import numpy as np

from .comm_args import NO_GROUP
from .state import Trace, add_columns, codes_of, take

SEND, RECV = 1, 2
COLUMNS = ("comm_direction", "comm_peer")
#: The direction a name says (a ``Collective name`` or an op's name), by its start.
_NAMES = {"send": SEND, "recv": RECV, "c10d::send": SEND, "c10d::recv_": RECV, "nccl:send": SEND,
          "nccl:recv": RECV, "gloo:send": SEND, "gloo:recv": RECV}  # fmt: skip
#: The c10d ops whose third argument is the peer's rank within the group.
C10D_OPS = {"c10d::send": SEND, "c10d::recv_": RECV}


def label_comm_peers(t: Trace, group_ranks: dict[str, list[int]] | None = None) -> Trace:
    """Needs: ``acts.collective``, ``process_group``, ``ev``, ``launch_ev``, ``op_id``,
    ``comm_r``; ``t.ranges.ev``; the events' ``name``, ``collective``, ``p2p_src``,
    ``p2p_dst``, ``concrete_inputs``, ``pid``, ``tid``, ``ts``, ``dur``; ``group_ranks``: each
    process group's global ranks by name (``distributedInfo.pg_config``).
    Adds on ``acts``: ``comm_direction`` (int8: 1 send, 2 receive, 0 neither or unknown) and
    ``comm_peer`` (int32: the peer's global rank, -1 unknown), on ``SendRecv`` rows only.
    Changes ``comm_instance``: a ``gloo:send`` / ``gloo:recv`` range's instance also holds the
    ``c10d::send`` / ``c10d::recv_`` op it starts in (gloo may move the bytes inside the op,
    or in the range after it: the instance runs from the op's start to the later end).
    Guarantees: nothing is guessed (module docstring); rows of one event agree."""
    a = t.acts
    n = len(a)
    direction, peer = np.zeros(n, np.int8), np.full(n, -1, np.int32)
    c_codes, c_names = codes_of(a["collective"])
    rows = np.flatnonzero(np.asarray(c_names == "SendRecv", bool)[c_codes]) if len(a) else np.empty(0, int)
    if len(rows):
        cands = [
            take(t.ranges["ev"].to_numpy(), a["comm_r"].to_numpy()[rows], -1),
            a["ev"].to_numpy()[rows],
            a["launch_ev"].to_numpy()[rows],
            a["op_id"].to_numpy()[rows],
        ]
        d, p = _from_args(t.events, cands)
        anchor = np.where(cands[2] >= 0, cands[2], cands[1])
        op = _enclosing_c10d(t.events, anchor)
        d2, p2 = _from_c10d(t.events, op, a["process_group"].to_numpy()[rows], group_ranks or {})
        take_op = (d == 0) | (d == d2)
        d = np.where(d == 0, d2, d)
        p = np.where((p < 0) & take_op, p2, p)
        direction[rows], peer[rows] = d, np.where(d > 0, p, -1)
        _gloo_op_joins_its_range(a, rows, op)
    t.acts = add_columns(a, {"comm_direction": direction, "comm_peer": peer})
    return t


def _gloo_op_joins_its_range(a, rows: np.ndarray, op: np.ndarray) -> None:
    """The c10d op's rows take the instance number of the gloo range that starts inside it
    (in place, on ``a.comm_instance``; nothing when no such range)."""
    inst, ev = a["comm_instance"].to_numpy(), a["ev"].to_numpy()
    gloo = (inst[rows] >= 0) & (op >= 0) & (op != ev[rows])
    if not gloo.any():
        return
    number = dict(zip(op[gloo].tolist(), inst[rows][gloo].tolist()))
    joins = rows[(inst[rows] < 0) & np.isin(ev[rows], list(number))]
    if len(joins):
        new = inst.copy()
        new[joins] = [number[e] for e in ev[joins].tolist()]
        a["comm_instance"] = new


def _text_of(ev, col: str, rows: np.ndarray) -> np.ndarray:
    codes, uniq = codes_of(ev[col])
    return np.append(np.asarray(uniq, dtype=object), "")[take(codes, rows, len(uniq))]


def _from_args(ev, cands: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (direction, global peer) from its candidates' own args (module docstring 1)."""
    n = len(cands[0])
    d, p = np.zeros(n, np.int8), np.full(n, -1, np.int64)
    for rows in cands:
        names = _text_of(ev, "collective", rows)
        own = _text_of(ev, "name", rows)
        got = np.array([_NAMES.get(_unquote(c), 0) or _NAMES.get(o, 0) for c, o in zip(names, own)], np.int8)
        src = np.array([_rank(x) for x in _text_of(ev, "p2p_src", rows)], np.int64)
        dst = np.array([_rank(x) for x in _text_of(ev, "p2p_dst", rows)], np.int64)
        d = np.where(d == 0, got, d)
        rec = np.where(d == SEND, dst, np.where(d == RECV, src, -1))
        p = np.where(p < 0, rec, p)
    return d, p


def _enclosing_c10d(ev, anchor: np.ndarray) -> np.ndarray:
    """Per anchor event row, the latest ``c10d::send`` / ``c10d::recv_`` on its thread whose
    time holds the anchor's start (-1 none)."""
    codes, uniq = codes_of(ev["name"])
    wanted = np.array([u in C10D_OPS for u in uniq], bool)
    ops: np.ndarray = np.flatnonzero(wanted[codes]) if len(ev) else np.empty(0, np.int64)
    out = np.full(len(anchor), -1, np.int64)
    ok = anchor >= 0
    if not len(ops) or not ok.any():
        return out
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts, end = ev["ts"].to_numpy(), ev["ts"].to_numpy() + ev["dur"].to_numpy()
    for key in {(pid[i], tid[i]) for i in anchor[ok]}:
        mine = ops[(pid[ops] == key[0]) & (tid[ops] == key[1])]
        mine = mine[np.argsort(ts[mine], kind="stable")]
        at = np.flatnonzero(ok)[[(pid[i], tid[i]) == key for i in anchor[ok]]]
        pos = np.searchsorted(ts[mine], ts[anchor[at]], side="right") - 1
        hit = (pos >= 0) & (end[mine[np.maximum(pos, 0)]] >= ts[anchor[at]]) if len(mine) else pos < -1
        out[at[hit]] = mine[pos[hit]]
    return out


def _from_c10d(ev, op: np.ndarray, group: np.ndarray, ranks: dict[str, list[int]]) -> tuple:
    """Per row, (direction, global peer) of its enclosing c10d op (module docstring 2)."""
    names, concrete = _text_of(ev, "name", op), _text_of(ev, "concrete_inputs", op)
    d = np.array([C10D_OPS.get(x, 0) for x in names], np.int8)
    p = np.array([_global(_group_rank(c), g, ranks) for c, g in zip(concrete, group)], np.int64)
    return d, np.where(d > 0, p, -1)


def _group_rank(text: str) -> int:
    """The third of an op's ``Concrete Inputs`` as an int (-1 not one)."""
    try:
        got = json.loads(text) if text else None
    except ValueError:
        return -1
    return _rank(json.dumps(got[2])) if isinstance(got, list) and len(got) > 2 else -1


def _global(rank: int, group: str, ranks: dict[str, list[int]]) -> int:
    """A rank within ``group`` (``name`` or ``name (desc)``; ``unrecorded``: the job's only
    group) as a global rank, -1 where the group's ranks are not known."""
    name = str(group).split(" (", 1)[0]
    members = ranks.get(name) or (
        next(iter(ranks.values())) if len(ranks) == 1 and name == NO_GROUP else None
    )
    return members[rank] if members and 0 <= rank < len(members) else -1


def _unquote(text: str) -> str:
    t = str(text).strip()
    return t[1:-1] if len(t) >= 2 and t[0] == '"' == t[-1] else t


def _rank(text: str) -> int:
    """A JSON int's text (or a string holding one) as an int, -1 otherwise."""
    t = _unquote(text)
    return int(t) if t.isdigit() else -1
