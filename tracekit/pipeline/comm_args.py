"""Step ``label_comm_args``: each collective's message size, group and instance number, from the data.

Where the numbers come from, in order (the first that records elements and a known dtype wins):

1. the collective's ``record_param_comms`` range (``comm_r``): ``In msg nelems``, ``Out msg
   nelems``, ``dtype``, ``Group size``, ``Process Group Name`` / ``Description``, ``Seq``;
2. the activity's own event (NCCL kernels carry the same args since torch 2.1);
3. the same args on the op that launched it or its innermost op (``record_param_comms`` is
   an op: the innermost collective range may be an ``nccl:*`` annotation inside it);
4. the collective op's own shapes (``Input Dims`` / ``Input type`` of the ``c10d::*`` op that
   launched it, or its innermost op): gloo on torch 2.13 records no ``record_param_comms``.

Bytes are max(In, Out) elements x the dtype's size (NCCL-tests' message size); from shapes,
the largest tensor argument (a tensor list counts whole). Where nothing records them they
are unknown (NaN), never guessed.
"""

from __future__ import annotations

import json
from functools import lru_cache
from math import prod

import numpy as np
import pandas as pd

from ..perf.shapes import DTYPES, SIZES
from ..read.schema import KERNEL
from .state import Trace, add_columns, codes_of, distinct_rows, take

#: record_param_comms' ``dtype`` (c10::ScalarType names) -> bytes per element.
SCALAR_SIZES = {
    "Byte": 1,
    "Char": 1,
    "Bool": 1,
    "Short": 2,
    "Half": 2,
    "BFloat16": 2,
    "Int": 4,
    "Float": 4,
    "ComplexHalf": 4,
    "Long": 8,
    "Double": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Float8_e4m3fn": 1,
    "Float8_e5m2": 1,
    "Float8_e4m3fnuz": 1,
    "Float8_e5m2fnuz": 1,
}
#: Where a row's bytes came from (column ``comm_source``).
SOURCES = ("", "record_param_comms", "kernel args", "op shapes")
#: The process group of a collective that records none.
NO_GROUP = "unrecorded"
COLUMNS = ("comm_bytes", "comm_group_size", "process_group", "comm_instance", "comm_source")


def label_comm_args(t: Trace, group_sizes: list[int] | tuple[int, ...] = ()) -> Trace:
    """Needs: ``acts.group``, ``ev``, ``kind``, ``name``, ``start``, ``comm_r``, ``launch_ev``,
    ``op_id``; ``t.ranges.ev``; the reader's COMM_FIELDS and shape columns; ``group_sizes``: the
    distinct sizes of the trace's process groups (``distributedInfo.pg_config``).
    Adds on ``acts``: ``comm_bytes`` (float bytes, NaN: unknown or not communication),
    ``comm_group_size`` (-1 unknown), ``process_group`` ("" not communication, ``unrecorded``),
    ``comm_instance`` (the collective instance's number within its process group: its ``Seq``
    where recorded, else its order by start among the group's instances of that collective,
    over the whole trace; -1 for rows that are no instance) and ``comm_source`` (which of
    :data:`SOURCES` gave the bytes).
    Guarantees: an instance is a communication kernel (GPU traces) or, on CPU traces, a
    ``gloo:*`` range (the c10d op's own rows when the trace has none); all rows of one event
    share its instance number; nothing is guessed: a group size not recorded with the
    collective is the one size every process group of ``distributedInfo`` has, if they share
    one, else unknown."""
    a = t.acts
    comm = np.flatnonzero((a["group"] == "comm").to_numpy())
    n = len(a)
    out_bytes, size = np.full(n, np.nan), np.full(n, -1, np.int64)
    group, source = np.full(n, "", object), np.zeros(n, np.int8)
    if len(comm):
        r_ev = t.ranges["ev"].to_numpy()
        cands = [
            take(r_ev, a["comm_r"].to_numpy()[comm], -1),
            a["ev"].to_numpy()[comm],
            a["launch_ev"].to_numpy()[comm],
            a["op_id"].to_numpy()[comm],
        ]
        b, s, g, src = _args_of(t.events, cands)
        if len(set(group_sizes)) == 1:  # every group of the job has that size: so has this one
            s = np.where(s.astype(np.int64) < 0, group_sizes[0], s)
        out_bytes[comm], size[comm], group[comm], source[comm] = b, s, g, src
        seq = np.maximum.reduce([_seq_of(t, c) for c in cands])
    else:
        seq = np.empty(0, np.int64)
    instance = _instances(t, comm, group, seq)
    t.acts = add_columns(
        a,
        {
            "comm_bytes": out_bytes,
            "comm_group_size": size.astype(np.int32),
            "process_group": _categorical(group, comm),
            "comm_instance": instance.astype(np.int32),
            "comm_source": pd.Categorical.from_codes(source, categories=list(SOURCES)),
        },
    )
    return t


def _categorical(values: np.ndarray, rows: np.ndarray) -> pd.Categorical:
    """``values`` ("" outside ``rows``) as a categorical, hashing the few ``rows`` only."""
    codes = np.zeros(len(values), np.int64)
    if not len(rows):
        return pd.Categorical.from_codes(codes, categories=[""])
    cats = [c for c in pd.unique(pd.Series(values[rows], dtype=object)) if c != ""]
    lookup = {c: i + 1 for i, c in enumerate(cats)}
    codes[rows] = [lookup.get(v, 0) for v in values[rows]]
    return pd.Categorical.from_codes(codes, categories=["", *cats])


def _args_of(ev: pd.DataFrame, cands: list[np.ndarray]) -> tuple:
    """Per comm row (its candidate event rows: comm range, own event, launcher, innermost op),
    (bytes, group size, process group, source code), each distinct combination read once."""
    cols = ("in_nelems", "out_nelems", "comm_dtype", "group_size", "pg_name", "pg_desc")
    coded = {c: codes_of(ev[c]) for c in (*cols, "input_dims", "input_types", "name")}

    def text(col: str, rows: np.ndarray) -> np.ndarray:
        codes, uniq = coded[col]
        return np.append(uniq, "")[take(codes, rows, len(uniq))]

    texts = [np.stack([text(c, rows) for c in coded], axis=1) for rows in cands]
    joined = np.concatenate(texts, axis=1).astype(str)
    flat = np.array(["\x00".join(r) for r in joined.tolist()], dtype=object)
    keys, inverse = np.unique(flat, return_inverse=True)
    got = [_one(tuple(k.split("\x00")), len(coded)) for k in keys.tolist()]
    inverse = inverse.ravel()
    return tuple(np.array([g[i] for g in got], dtype=object)[inverse] for i in range(4))


def _one(texts: tuple, width: int) -> tuple:
    """(bytes, group size, process group, source) of one collective from its candidates' texts
    (``width`` texts each: the comm columns, ``Input Dims``, ``Input type``, name)."""
    parts = [texts[i : i + width] for i in range(0, len(texts), width)]
    size = next((v for v in (_int(p[3]) for p in parts) if v >= 0), -1)
    group = next((g for g in (_group(p[4], p[5]) for p in parts) if g), NO_GROUP)
    for i, p in enumerate(parts):  # comm range, kernel, launcher, innermost op
        nel = max(_int(p[0]), _int(p[1]))
        elem = SCALAR_SIZES.get(_string(p[2]), 0)
        if nel >= 0 and elem:
            return float(nel * elem), size, group, 2 if i == 1 else 1
    for prefix in ("c10d::", "gloo:"):  # the collective op's own shapes (it has In and Out)
        for p in parts:
            nbytes = _shape_bytes(p[6], p[7]) if p[8].startswith(prefix) else None
            if nbytes is not None:
                return nbytes, size, group, 3
    return np.nan, size, group, 0


def _int(text: str) -> int:
    """A JSON int's text as an int (a string holding one too), -1 when it is not one."""
    t = _string(text)
    return int(t) if t.isdigit() else -1


def _string(text: str) -> str:
    t = text.strip()
    return t[1:-1] if len(t) >= 2 and t[0] == '"' == t[-1] else t


def _group(name: str, desc: str) -> str:
    """``0`` or ``0 (default_pg)``: the group's name, with its description when it says more."""
    name, desc = _string(name), _string(desc)
    if not name:
        return ""
    return f"{name} ({desc})" if desc and desc != "undefined" else name


@lru_cache(maxsize=4096)
def _shape_bytes(dims_text: str, types_text: str) -> float | None:
    """The largest tensor argument's bytes (a tensor list: its tensors' sum), None unknown."""
    try:
        dims, types = json.loads(dims_text), json.loads(types_text)
    except ValueError:
        return None
    if not isinstance(dims, list) or not isinstance(types, list) or len(dims) != len(types):
        return None
    best = None
    for d, ty in zip(dims, types):
        elem = SIZES.get(DTYPES.get(ty, ""), 0) if isinstance(ty, str) else 0
        numel = 1 if d == [] else _numel(d)  # a tensor's dtype with no sizes: a 0-d tensor
        if elem and numel:
            best = max(best or 0.0, float(numel * elem))
    return best


def _numel(d) -> int:
    """Elements of a tensor's sizes (a list of ints), or of a list of them; 0 otherwise."""
    if isinstance(d, list) and d and all(isinstance(x, int) and x >= 0 for x in d):
        return prod(d)
    if isinstance(d, list) and d and all(isinstance(x, list) for x in d):
        return sum(_numel(x) for x in d)
    return 0


def _instances(t: Trace, comm: np.ndarray, group: np.ndarray, seq: np.ndarray) -> np.ndarray:
    """Per row its instance number within its process group (-1: not an instance): the
    recorded ``Seq`` (``seq``, per comm row) when every instance has one, else its order among
    the group's instances of the same collective (a collective of another kind is never the
    same instance, so one kind missing from a rank's trace does not shift the others)."""
    a = t.acts
    inst = np.full(len(a), -1, np.int64)
    if not len(comm):
        return inst
    keep = a["kind"].to_numpy()[comm] == KERNEL
    if not keep.any():  # CPU traces: the gloo worker's ranges, else the collective ops
        codes, names = codes_of(a["name"])
        gloo = np.array([str(x).startswith("gloo:") for x in names], dtype=bool)
        keep = gloo[codes[comm]]
        keep = keep if keep.any() else np.ones(len(comm), bool)
    rows = comm[keep]
    ev, start = a["ev"].to_numpy()[rows], a["start"].to_numpy()[rows]
    uev, first_row, back = np.unique(ev, return_index=True, return_inverse=True)
    back = back.ravel()
    if len(uev) < len(ev):  # an event in pieces: its first start
        first = np.full(len(uev), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(first, back, start)
        start = first[back]
    c_codes, _ = codes_of(a["collective"])
    label = distinct_rows(group[rows][first_row], c_codes[rows][first_row])[0]  # (group, collective)
    seq_ev = seq[keep][first_row]
    order = np.lexsort((uev, start[first_row]))  # instances by start
    ranked = np.empty(len(uev), np.int64)
    by_label = order[np.argsort(label[order], kind="stable")]  # by label, then start
    bounds = np.searchsorted(label[by_label], label[by_label], side="left")
    ranked[by_label] = np.arange(len(by_label)) - bounds
    number = seq_ev if (seq_ev >= 0).all() else ranked
    inst[rows] = number[back]
    return inst


def _seq_of(t: Trace, ev: np.ndarray) -> np.ndarray:
    """Each event row's recorded ``Seq`` (-1 none or no event)."""
    codes, uniq = codes_of(t.events["comm_seq"])
    values = np.array([_int(u) for u in uniq] + [-1], dtype=np.int64)
    return values[take(codes, ev, len(uniq))]
