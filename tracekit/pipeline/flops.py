"""Step ``assign_flops``: each compute activity gets the FLOPs and bytes of the modelled op it
was launched inside (:mod:`tracekit.perf`), and the time those would take at the device's peak."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..perf import FLOP_FAMILIES, OpModel, model
from ..perf.devices import GIVEN, Peaks
from ..perf.ops import has_reader
from .nesting import F_OP
from .peak_checks import above_peak, measured, over_peak
from .state import Trace, add_columns, categorical_take, codes_of, distinct_rows, str_in, str_test, take

#: The shape columns the reader keeps (raw JSON text per CPU op, absent where none).
SHAPE_COLUMNS = ("input_dims", "input_types", "concrete_inputs")
#: cuBLAS/CUTLASS kernels that run an fp32 GEMM on TF32 tensor cores (measured against tf32).
TF32_KERNEL = re.compile(r"tf32|tensorop_s1688", re.IGNORECASE)
#: A backward node with no modelled op inside: its FLOPs from its forward op's, times this.
BACKWARD_FACTOR = {"gemm": 2.0, "attention": 2.5, "conv": 2.0, "norm": 2.0}
#: The backward nodes that may take their forward op's FLOPs, per the forward op's family: a
#: node must be the backward of an op of that family (AddmmBackward0 of aten::addmm), never
#: another node that a sequence number or flow happens to link to it (a ``SplitBackward0``
#: whose kernel is a copy). Matched on the node's name after any ``...: `` prefix.
BACKWARD_NODE = {
    "gemm": re.compile(
        r"(?:Addmm|Mm|Bmm|Baddbmm|Addbmm|Matmul|Linear|ScaledMm|(?:Scaled)?GroupedMm)Backward\d*"
    ),
    "attention": re.compile(r"\w*(?:Attention|Attn)\w*Backward\d*"),
    "conv": re.compile(r"\w*Conv\w*Backward\d*"),
    "norm": re.compile(r"\w*(?:LayerNorm|BatchNorm|GroupNorm|RmsNorm)\w*Backward\d*"),
}
#: The columns this step adds, in order.
COLUMNS = (
    "flops",
    "op_bytes",
    "op_calls",
    "perf_op",
    "perf_family",
    "perf_shape",
    "dtype",
    "gemm_b",
    "gemm_m",
    "gemm_n",
    "gemm_k",
    "compute_ns",
    "memory_ns",
)


def assign_flops(t: Trace, peaks: Peaks | None = None) -> Trace:
    """Give every compute activity its share of its op's FLOPs and bytes.

    Needs: ``t.ranges`` (``ev``, ``name``, ``flags``, ``op_r``, ``bwd_r``), ``acts.op_r``,
    ``bwd_r``, ``fwd_op_r``, ``start``, ``end``, ``group``, ``name``; the events' shape columns
    (``input_dims``, ``input_types``, ``concrete_inputs``; a trace without them has no model).
    Adds on ``acts``: ``flops``, ``op_bytes``, ``op_calls`` (float: the activity's share of its
    op's FLOPs, bytes and call; over an op's activities they add up to the op's own),
    ``perf_op`` (the modelled op's name, or the backward node's; "" none), ``perf_family``
    (gemm, attention, conv, norm, elementwise, reduction; "" unmodelled), ``perf_shape`` (the
    sizes its model read, as text), ``dtype``,
    ``gemm_b/m/n/k`` (the GEMM's shape, -1 none), ``compute_ns`` / ``memory_ns`` (its FLOPs
    at the device's peak for its dtype / its bytes at the peak bandwidth, in ns; NaN where no
    peak is known); ``perf_unit`` (which unit of ``t.perf_units`` owns it, -1 none; for
    ``tracekit explain``, not kept in the interval table). Sets ``t.meta["device"]`` and
    ``t.meta["shapes_recorded"]`` (False: no op recorded shapes, so every compute kernel's
    ``compute_ns`` and ``memory_ns`` is NaN: unknown, not 0).
    Guarantees: the owner of an activity is the innermost op on its launch's stack that has a
    model, unless a FLOP-family op inside that op, on some launch's stack, has one (the op is
    then decomposed: its inner ops count); element-wise and reduction ops own only what no
    FLOP-family op does;
    a backward node with no modelled op inside takes its forward op's FLOPs times
    :data:`BACKWARD_FACTOR`, only when the node is a backward of its forward op's family
    (:data:`BACKWARD_NODE`; any other node linked to it takes none). Every activity an op
    launched but communication carries its labels (a split-K GEMM's memset is part of the
    GEMM's time, as TraceLens counts it); each op call's FLOPs and bytes are given once, split
    by duration among its compute kernels (equally when they all last 0 ns; among its other
    activities when it launched no compute kernel). The model runs once per distinct (op
    name, shapes).
    """
    peaks = peaks or Peaks()
    if t.mode == "cpu" and peaks.row and not peaks.source.startswith(GIVEN):
        peaks = Peaks(device=peaks.device, notice="CPU-only trace: a device's peak does not apply")
    a = t.acts
    units = _range_units(t)
    owner = _owners(a, t.ranges, units)
    cols = _spread(a, owner, units)
    cols.update(_ideal_times(a, cols, peaks, units.shapes))
    t.acts = add_columns(a, cols)
    t.meta["device"] = {**peaks.as_meta(), "measured": measured(cols["dtype"], cols["flops"], peaks)}
    t.meta["shapes_recorded"] = units.shapes
    t.perf_units = units
    return t


@dataclass
class Units:
    """What owns FLOPs: one unit per range row (its op's model, or none), then one per backward
    node that takes its forward op's (:func:`_owners` appends them). ``models``: the distinct
    models; ``key``: per unit, its model's index (-1 none); ``name``: per unit, its op's (or
    node's) name as a code into ``names``; ``shapes``: whether any op recorded input shapes
    (``record_shapes=True``; without them no FLOPs are known)."""

    models: list[OpModel]
    key: np.ndarray
    name: np.ndarray
    names: np.ndarray
    shapes: bool = True

    def model(self, unit: int) -> OpModel | None:
        k = int(self.key[unit]) if 0 <= unit < len(self.key) else -1
        return self.models[k] if k >= 0 else None

    def name_of(self, unit: int) -> str:
        return str(self.names[self.name[unit]]) if 0 <= unit < len(self.name) else ""

    def add(self, models: list[OpModel], name_codes: np.ndarray) -> np.ndarray:
        """Append units (a model each, names as codes into ``names``); their indices."""
        first = len(self.key)
        self.key = np.concatenate([self.key, len(self.models) + np.arange(len(models))])
        self.models = self.models + models
        self.name = np.concatenate([self.name, name_codes])
        return first + np.arange(len(models))

    def model_index(self, units: np.ndarray) -> np.ndarray:
        """Per unit of ``units`` (-1: none), its model's index; ``len(models)`` for none."""
        key = np.append(self.key, -1)[np.where(units >= 0, units, len(self.key))]
        return np.where(key >= 0, key, len(self.models))

    def per_model(self, get, default) -> np.ndarray:
        """``get(model)`` per distinct model, and ``default`` at index ``len(models)`` (none)."""
        vals = [get(m) for m in self.models] + [default]
        return np.array(vals, dtype=object if isinstance(default, str) else None)


def _range_units(t: Trace) -> Units:
    """A unit per CPU range: its model (none: not an op, no reader, or no usable shapes),
    computed once per distinct combination of name and shape texts."""
    r = t.ranges
    n = len(r)
    name_codes, uniq_names = t.name_codes
    ev = r["ev"].to_numpy() if n else np.empty(0, np.int64)
    units = Units([], np.full(n, -1, np.int64), name_codes[ev], uniq_names, shapes=False)
    if not n or any(c not in t.events for c in SHAPE_COLUMNS):
        return units
    texts = [codes_of(t.events[c]) for c in SHAPE_COLUMNS]
    readable = np.array([has_reader(str(x)) for x in uniq_names], bool)
    dims, dims_uniq = texts[0]
    shaped = (dims_uniq != "")[dims[ev]]
    units.shapes = bool(shaped.any())
    on_chain = _launch_chains(t.acts["op_r"].to_numpy(), r["op_r"].to_numpy())
    maybe = np.flatnonzero(on_chain & ((r["flags"].to_numpy() & F_OP) != 0) & readable[units.name] & shaped)
    key, first = distinct_rows(units.name[maybe], *(codes[ev[maybe]] for codes, _ in texts))
    index = np.full(len(first), -1, np.int64)
    for k, i in enumerate(first):
        e = ev[maybe[i]]
        got = model(str(uniq_names[name_codes[e]]), *(str(uniq[codes[e]]) or None for codes, uniq in texts))
        if got is not None:
            index[k] = len(units.models)
            units.models.append(got)
    units.key[maybe] = index[key]
    return units


def _launch_chains(starts: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per range, whether it is on the op stack of some activity's launch (its innermost op or
    an op around it): only those ops can own work, or decompose an op that does (an op inside
    that launched nothing covers nobody)."""
    on = np.zeros(len(parent), bool)
    cur = starts[starts >= 0]
    while len(cur):
        cur = cur[~on[cur]]  # a level up: each stack climbed until it meets a visited op
        on[cur] = True
        cur = parent[cur]
        cur = cur[cur >= 0]
    return on


def climb(mask: np.ndarray, parent: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row of ``start`` (-1 none), the nearest row at or above it where ``mask`` holds."""
    return _climbed(_jumps(mask, parent), start)


def _jumps(mask: np.ndarray, parent: np.ndarray) -> np.ndarray:
    """Per row, the nearest row at or above it along ``parent`` where ``mask`` holds (-1 none).
    By pointer jumping over every row: each round every unresolved row skips to where its
    pointer points, so a stack of depth d takes log2(d) rounds, never d (a 25,000-deep chain
    of ops took 37 s a level at a time)."""
    n = len(parent)
    to = np.where(mask, np.arange(n), parent).astype(np.int64, copy=False)  # itself when masked, else up
    live = np.flatnonzero(to >= 0)
    for _ in range(64):  # 2**64 levels: any acyclic stack; a cyclic one resolves to none
        live = live[~mask[to[live]]]
        if not len(live):
            break
        to[live] = to[to[live]]
        live = live[to[live] >= 0]  # a resolved row (none, or masked above) stays resolved
    else:
        live = np.flatnonzero(to >= 0)
        to[live[~mask[to[live]]]] = -1
    return to


def _climbed(to: np.ndarray, start: np.ndarray) -> np.ndarray:
    """``to`` (:func:`_jumps`) at each row of ``start``; -1 where ``start`` is -1."""
    start = np.asarray(start, np.int64)
    return np.where(start >= 0, to[np.maximum(start, 0)] if len(to) else -1, -1)


def _own(mask: np.ndarray, parent: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row of ``start`` (range rows, -1 none): the innermost range at or above it where
    ``mask`` holds and no masked range inside it does (a decomposed op owns nothing); -1 none.
    One pointer jumping (:func:`_jumps`) serves both lookups."""
    to = _jumps(mask, parent)
    inner = np.flatnonzero(mask & (parent >= 0))
    above = _climbed(to, parent[inner])
    covered = np.zeros(len(mask), bool)
    covered[above[above >= 0]] = True
    got = _climbed(to, start)
    return np.where(~take(covered, got, True), got, -1)


def _owners(a: pd.DataFrame, r: pd.DataFrame, units: Units) -> np.ndarray:
    """Per activity, the unit that owns it (-1 none): a modelled op (FLOP families first, then
    bytes-only ones), else its backward node (units appended to ``units``)."""
    parent = r["op_r"].to_numpy() if len(r) else np.empty(0, np.int64)
    per_unit = units.model_index(np.arange(len(units.key)))
    flop = units.per_model(lambda m: m.family in FLOP_FAMILIES, False).astype(bool)[per_unit]
    some = per_unit < len(units.models)
    op_r = a["op_r"].to_numpy()
    owner = _own(flop, parent, op_r)
    rest = owner < 0
    if (some & ~flop).any():
        owner[rest] = _own(some & ~flop, parent, op_r[rest])
    node = _backward_nodes(a, r, flop, owner)
    node = np.where(_is_backward_of(node, a["fwd_op_r"].to_numpy(), units), node, -1)
    rows, first, which = np.unique(node[node >= 0], return_index=True, return_inverse=True)
    if len(rows):
        fwd = a["fwd_op_r"].to_numpy()[node >= 0][first]
        made = [_backward_model(units.model(int(f))) for f in fwd]  # type: ignore[arg-type]
        added = units.add(made, units.name[rows])
        owner[node >= 0] = added[which]
    return owner


def _backward_nodes(a: pd.DataFrame, r: pd.DataFrame, flop: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """Per activity with no owner, its backward node (a range row) when the node has no
    FLOP-modelled op inside and its forward op has a FLOP model; -1 otherwise."""
    bwd, fwd = a["bwd_r"].to_numpy(), a["fwd_op_r"].to_numpy()
    if not len(r) or not (bwd >= 0).any():
        return np.full(len(a), -1, np.int64)
    node_of = r["bwd_r"].to_numpy()
    has_flop = np.zeros(len(r), bool)  # the node, or a node inside it, holds a FLOP-modelled op
    up = node_of[flop]
    while len(up):
        up = up[up >= 0]
        has_flop[up] = True
        up = node_of[up]
    fwd_flop = (fwd >= 0) & take(flop, fwd, False)
    use = (owner < 0) & (bwd >= 0) & fwd_flop & ~take(has_flop, bwd, True)
    return np.where(use, bwd, -1)


def _is_backward_of(node: np.ndarray, fwd: np.ndarray, units: Units) -> np.ndarray:
    """Per activity (``node``: its backward node's range row, -1 none; ``fwd``: its forward
    op's), whether the node's name is a backward of its forward op's family
    (:data:`BACKWARD_NODE`); decided once per distinct (node name, forward op unit)."""
    out = np.zeros(len(node), bool)
    rows = np.flatnonzero(node >= 0)
    if not len(rows):
        return out
    pairs, which = np.unique(np.stack([units.name[node[rows]], fwd[rows]]), axis=1, return_inverse=True)
    ok = []
    for code, f in pairs.T:
        fam = units.model(int(f))
        pattern = BACKWARD_NODE.get(fam.family) if fam is not None else None
        name = str(units.names[code]).rsplit(": ", 1)[-1].strip()
        ok.append(pattern is not None and pattern.fullmatch(name) is not None)
    out[rows] = np.array(ok, bool)[np.ravel(which)]
    return out


def _backward_model(fwd: OpModel) -> OpModel:
    f = BACKWARD_FACTOR[fwd.family]
    return OpModel(
        family=fwd.family,
        flops=fwd.flops * f,
        bytes=fwd.bytes * 2,
        dtype=fwd.dtype,
        formula=f"{f:g} x its forward op's ({fwd.formula}): no op inside the node recorded shapes",
        shape=fwd.shape,
        gemm=fwd.gemm,
    )


def _spread(a: pd.DataFrame, owner: np.ndarray, units: Units) -> dict:
    """The columns of each activity's unit (every activity it launched but communication), its
    FLOPs, bytes and call split by duration among its compute kernels (among its other
    activities only when it launched no compute kernel: a memset-only ``zero_``)."""
    owner = np.where(str_in(a["group"], ("comm",)), -1, owner)
    has = owner >= 0
    compute = str_in(a["group"], ("compute",)) & has
    n = len(units.key)
    o = np.where(has, owner, n)  # n: "no unit"
    with_compute = np.append(np.bincount(owner[compute], minlength=n) > 0, False)
    carries = has & (compute | ~with_compute[o])
    dur = (a["end"].to_numpy() - a["start"].to_numpy()).astype(np.float64)
    total = np.append(np.bincount(owner[carries], weights=dur[carries], minlength=n), 0.0)[o]
    count = np.append(np.bincount(owner[carries], minlength=n), 1)[o]
    share = np.where(carries, np.where(total > 0, dur / np.where(total > 0, total, 1.0), 1.0 / count), 0.0)
    m = units.model_index(owner)  # per activity, its model (len(models): none)
    every = np.arange(len(units.models) + 1)
    gemm = units.per_model(lambda x: x.gemm or (-1, -1, -1, -1), (-1, -1, -1, -1))[m]
    cols = {
        "flops": share * units.per_model(lambda x: x.flops, 0.0)[m],
        "op_bytes": share * units.per_model(lambda x: x.bytes, 0.0)[m],
        "op_calls": share,
        "perf_op": categorical_take(units.names, units.name, owner, ""),
        **{
            col: categorical_take(units.per_model(get, ""), every, m, "")
            for col, get in (
                ("perf_family", lambda x: x.family),
                ("perf_shape", lambda x: x.shape),
                ("dtype", lambda x: x.dtype),
            )
        },
        "perf_unit": np.where(has, owner, -1),
    }
    for i, c in enumerate(("gemm_b", "gemm_m", "gemm_n", "gemm_k")):
        cols[c] = gemm[:, i].astype(np.int64)
    return cols


def _ideal_times(a: pd.DataFrame, cols: dict, peaks: Peaks, shapes: bool = True) -> dict:
    """``compute_ns``: FLOPs at the peak of the activity's dtype (an fp32 GEMM or convolution
    call that launched a TF32 kernel: the tf32 peak for all its kernels, and ``dtype`` says
    tf32); ``memory_ns``: bytes at the peak bandwidth. A trace
    that recorded no shapes knows no FLOPs at all: its compute kernels' times are NaN
    (unknown, so MFU is empty), never 0."""
    dtype_codes, dtypes = codes_of(
        cols["dtype"] if isinstance(cols["dtype"], pd.Series) else pd.Series(cols["dtype"])
    )
    tf32 = str_test(a["name"], lambda s: s.str.contains(TF32_KERNEL))
    fam = np.asarray(cols["perf_family"], dtype=object)
    on_tf32 = tf32 & np.isin(fam, ["gemm", "conv"]) & (dtypes[dtype_codes] == "fp32")
    unit = cols["perf_unit"]  # an op call on TF32 kernels: all of it (its split-K reduce too)
    on_tf32 = np.isin(unit, unit[on_tf32]) & (unit >= 0) if on_tf32.any() else on_tf32
    peak = np.array([peaks.flops_peak(d) or np.nan for d in dtypes], np.float64)[dtype_codes]
    peak = np.where(on_tf32, peaks.flops_peak("tf32") or np.nan, peak)
    flops = cols["flops"]
    bw = peaks.bytes_peak() or np.nan
    none = 0.0 if shapes else np.where(str_in(a["group"], ("compute",)), np.nan, 0.0)
    out = {
        "compute_ns": np.where(flops > 0, flops / peak * 1e9, none),
        "memory_ns": np.where(cols["op_bytes"] > 0, cols["op_bytes"] / bw * 1e9, none),
    }
    if on_tf32.any():  # the dtype says what it was measured against: tf32, not fp32
        labels = np.append(np.asarray(dtypes, dtype=object), "tf32")
        codes = np.where(on_tf32, len(dtypes), dtype_codes)
        out["dtype"] = categorical_take(labels, np.arange(len(labels)), codes, "")
    return out


def mfu_meta(acts: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """Per complete step its MFU: the time its compute kernels' FLOPs take at the device's
    peak over the step's window, in percent (None where a peak is unknown); ``mean_pct`` over
    the complete steps (a ratio of sums); ``gflop_per_step``; ``modelled_pct``: the share of
    compute-kernel time whose op has a model; ``above_peak`` (only when some did): the activities
    of complete steps that ran above their peak (:func:`~tracekit.pipeline.peak_checks.above_peak`)."""
    done = steps[steps["complete"].to_numpy()]
    ids = done["step"].to_numpy()
    row = np.searchsorted(ids, acts["step"].to_numpy()) if len(ids) else np.zeros(len(acts), np.int64)
    row = np.minimum(row, max(len(ids) - 1, 0))
    done_rows = (ids[row] == acts["step"].to_numpy()) if len(ids) else np.zeros(len(acts), bool)
    keep = str_in(acts["group"], ("compute",)) & done_rows
    ns = acts["compute_ns"].to_numpy(np.float64)
    dur = (acts["end"] - acts["start"]).to_numpy(np.float64)
    ns = np.where(over_peak(ns, dur), 0.0, ns)  # above the peak: kept out of MFU (noticed)
    ideal = np.bincount(row[keep], weights=np.where(np.isnan(ns), np.inf, ns)[keep], minlength=len(ids))
    flops = float(acts["flops"].to_numpy()[keep].sum())
    window = (done["end"] - done["start"]).to_numpy(np.float64)
    dur = dur[keep]
    modelled = dur[~str_in(acts["perf_family"], ("",))[keep]].sum()

    def pct(ideal: float, wall: float) -> float | None:
        return round(float(ideal / wall * 100), 6) if np.isfinite(ideal) and wall > 0 else None

    return {
        "per_step": [{"step": int(s), "mfu_pct": pct(i, w)} for s, i, w in zip(ids, ideal, window)],
        "mean_pct": pct(float(ideal.sum()), float(window.sum())),
        "gflop_per_step": round(flops / 1e9 / max(len(ids), 1), 6),
        "modelled_pct": round(float(modelled / dur.sum() * 100), 3) if dur.sum() > 0 else None,
        **({"above_peak": over} if (over := above_peak(acts, done_rows)) else {}),
    }
