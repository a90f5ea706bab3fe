"""Step ``assign_modules``: the module instances, and the module each activity's work belongs to."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import annotations as ann
from .nest import MODULE_PREFIX
from .nesting import F_MODULE, F_ROPE
from .state import Coded, Trace, add_columns, categorical_take, distinct_rows, lookup, str_column, take
from .taxonomy import ModuleTaxonomy


def assign_modules(t: Trace, taxonomy: ModuleTaxonomy) -> Trace:
    """Build the module table and give each activity the module of the forward work it is.

    Needs: ``t.ranges`` (with context), ``acts.mod_r``, ``top_r``, ``ctx_bits``,
    ``backward_node``, ``fwd_op_r``.
    Adds: ``t.modules`` (one row per module instance: ``local`` (row of ``t.ranges``), ``cls``,
    ``instance``, ``qualname``, ``start``, ``end``, ``tid``, ``parent_local``, ``parent``,
    ``position``, ``siblings``, ``layer``, ``is_layer``, ``layer_index``), and on
    ``acts``: ``module_id`` (row of ``t.modules``, -1 none), ``module_instance``, ``top_op`` /
    ``top_op_id`` / ``top_op_ts`` (the outermost op inside that module), ``rope_frame`` and
    ``layer`` (index of the decoder layer the work belongs to, -1 none: see :func:`layer_index`).
    Guarantees: a backward activity takes its forward op's module, top op, rotary frame and
    layer; any other activity (recomputed forward work included) its own launch context. The
    layer index is assigned here and nowhere else.
    """
    t.modules, instance = module_table(t, taxonomy)
    cols = work_module(t, t.acts)
    module_id = cols["module_id"]
    cols = {
        "module_id": module_id,
        "module_instance": categorical_take(instance.values, instance.codes, module_id, ""),
        **{k: v for k, v in cols.items() if k != "module_id"},
    }
    t.acts = add_columns(t.acts, cols)
    t.meta["module_source"] = (
        "capture annotations" if t.capture_modules else ("nn.Module events" if len(t.modules) else "none")
    )
    return t


def work_module(t: Trace, a: pd.DataFrame) -> dict:
    """The module columns of :func:`assign_modules` but ``module_instance``, for the points of
    ``a`` (launches, memory events: ``backward_node``, ``fwd_op_r``, ``mod_r``, ``top_r``,
    ``ctx_bits``), over ``t.ranges`` and ``t.modules``: a backward point takes its forward op's
    module, top op and rotary frame."""
    r = t.ranges
    bwd = a["backward_node"].to_numpy()
    f_op = a["fwd_op_r"].to_numpy()
    mod = np.where(bwd, take(r["mod_r"].to_numpy(), f_op, -1), a["mod_r"].to_numpy())
    f_top = take(r["top_r"].to_numpy(), f_op, -1)
    f_top = np.where((f_top < 0) & (f_op >= 0), f_op, f_top)
    top = np.where(bwd, f_top, a["top_r"].to_numpy())
    rope = np.where(bwd, take(r["bits"].to_numpy(), f_op, 0), a["ctx_bits"].to_numpy()) & F_ROPE
    top_ev = take(r["ev"].to_numpy(), top, -1)
    mod_row = lookup(pd.Series(np.arange(len(t.modules)), index=t.modules["local"].to_numpy()), mod)
    module_id = np.where(mod >= 0, mod_row, -1)
    return {
        "module_id": module_id,
        "top_op": t.name_categorical(top_ev),
        "top_op_ts": take(t.events["ts"].to_numpy(), top_ev, -1),
        "top_op_id": top_ev,
        "rope_frame": rope != 0,
        "layer": take(t.modules["layer_index"].to_numpy(), module_id, -1),
    }


def _split_module_name(name: str) -> tuple[str, str]:
    """``nn.Module: LlamaMLP_3`` -> (``LlamaMLP``, ``LlamaMLP_3``)."""
    inst = name[len(MODULE_PREFIX) :]
    cls, sep, num = inst.rpartition("_")
    return (cls, inst) if sep and num.isdigit() else (inst, inst)


_EMPTY = {
    "parent": np.int64,
    "position": np.int64,
    "siblings": np.int64,
    "layer": np.int64,
    "is_layer": bool,
    "layer_index": np.int64,
}


def module_table(t: Trace, taxonomy: ModuleTaxonomy) -> tuple[pd.DataFrame, Coded]:
    """One row per module instance (one forward call) and its place in the module tree
    (categories are assigned by :func:`tracekit.pipeline.labels.assign_categories`), and its
    ``instance`` column as codes."""
    r = t.ranges
    local = np.flatnonzero((r["flags"].to_numpy() & F_MODULE) != 0)
    n_codes, n_uniq = t.name_codes
    codes, used = pd.factorize(n_codes[r["ev"].to_numpy()[local]])  # each distinct name once
    raw = n_uniq[used].tolist()
    if t.capture_modules:
        parsed = [ann.parse_module_range(x) or ("", "") for x in raw]
        qual_u = np.array([q for _, q in parsed], dtype=object)
        cls_u, inst_u = np.array([c for c, _ in parsed], dtype=object), qual_u
    else:
        split = [_split_module_name(x) for x in raw]
        cls_u, inst_u = (np.array([x[k] for x in split], dtype=object) for k in (0, 1))
        qual_u = np.full(len(raw), "", dtype=object)
    df = pd.DataFrame(
        {
            "local": local,
            "cls": str_column(cls_u, codes),
            "instance": str_column(inst_u, codes),
            "qualname": str_column(qual_u, codes),
            "start": r["start"].to_numpy()[local],
            "end": r["end"].to_numpy()[local],
            "tid": r["tid"].to_numpy()[local],
            "parent_local": r["mod_r"].to_numpy()[local],
        }
    )
    if df.empty:
        for col, dtype in _EMPTY.items():
            df[col] = pd.Series(dtype=dtype)
        return df, Coded(np.zeros(0, np.intp), inst_u)
    row_of = pd.Series(np.arange(len(df)), index=df["local"])
    df["parent"] = lookup(row_of, df["parent_local"].to_numpy())
    # Position among the siblings of its class (in start order) and their number.
    cls_codes, cls_distinct = pd.factorize(cls_u)
    cls_code = cls_codes[codes]
    key = distinct_rows(df["parent"].to_numpy(), cls_code)[0]
    df["position"] = _rank_in_group(key, df["start"].to_numpy())
    df["siblings"] = np.bincount(key)[key].astype(np.int64)
    _layers(df, taxonomy, Coded(cls_code, np.asarray(cls_distinct, dtype=object)))
    return df, Coded(codes, inst_u)


def _rank_in_group(key: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row, how many rows of its group (``key``) come before it by ``start`` (ties: by row),
    as ``groupby(key).cumcount()`` over the rows sorted by start."""
    by_start = np.empty(len(key), np.int64)
    by_start[np.argsort(start, kind="stable")] = np.arange(len(key))
    order = np.lexsort((by_start, key))
    k = key[order]
    head = np.maximum.accumulate(np.where(np.r_[True, k[1:] != k[:-1]], np.arange(len(k)), 0))
    out = np.empty(len(key), np.int64)
    out[order] = np.arange(len(k)) - head
    return out


def _layers(df: pd.DataFrame, taxonomy: ModuleTaxonomy, cls: Coded) -> None:
    """Add ``is_layer`` (a decoder layer class) and ``layer`` (the enclosing decoder layer
    instance, a row of ``df``; -1 outside layers); ``cls``: the ``cls`` column as codes."""
    is_layer = np.array([bool(taxonomy.decoder_layer.fullmatch(c)) for c in cls.values] + [False])[cls.codes]
    rows = np.arange(len(df), dtype=np.int64)
    df["layer"] = inherit(df["parent"].to_numpy(), df["start"].to_numpy(), np.where(is_layer, rows, -1))
    df["is_layer"] = is_layer
    df["layer_index"] = layer_index(df)


#: A qualified module name that ends in its index in a container: ``model.layers.3``.
_NUMBERED = re.compile(r"\.(\d+)$")


def layer_index(df: pd.DataFrame) -> np.ndarray:
    """Per module row, the index of the decoder layer it belongs to (-1: in none).

    Needs module-table columns ``parent``, ``start``, ``instance``, ``qualname``, ``is_layer``,
    ``layer``. A decoder layer's index is, in order of precedence: the number its qualified
    name ends in (``model.layers.3``: 3, when the capture records names); else the position of
    its module object's FIRST call among the decoder-layer calls of that call's model pass (the
    outermost enclosing module; layers called outside any module count as one pass). The
    instance ``Cls_N`` / qualified name names the object, so a call recomputed in backward, or
    in a later pass, takes the index of the first call. A module inside a decoder layer takes
    the layer's index; a named module outside any recorded layer (a recomputed submodule whose
    layer call was not recorded) takes the index of the decoder layer its qualified name extends.
    """
    out = np.full(len(df), -1, np.int64)
    is_layer = df["is_layer"].to_numpy()
    rows = np.flatnonzero(is_layer)
    if rows.size == 0:
        return out
    root = _roots(df["parent"].to_numpy())[rows]
    root = np.where(is_layer[root], -1, root)  # layers called at the top: one group
    # The layers by start (stable); a layer's position among its pass's layers
    # (``groupby(root).cumcount()``); each instance's index: the position of its first call.
    order = np.argsort(df["start"].to_numpy()[rows], kind="stable")
    lay = rows[order]
    pos = _rank_in_group(pd.factorize(root[order])[0], np.arange(len(lay)))
    inst = pd.factorize(df["instance"].to_numpy(dtype=object)[lay])[0]  # numbered by first call
    idx = pos[np.searchsorted(np.maximum.accumulate(inst), np.arange(int(inst.max()) + 1))][inst]
    qual = df["qualname"].to_numpy(dtype=object)
    if (qual[lay] != "").any():  # names recorded (tracekit's capture): their numbers win
        numbered = pd.Series(qual[lay]).str.extract(_NUMBERED, expand=False).to_numpy()
        has = pd.notna(numbered)
        idx[has] = numbered[has].astype(np.int64)
    out[lay] = idx
    inside = df["layer"].to_numpy()
    out = np.where(inside >= 0, out[np.maximum(inside, 0)], -1)
    by_name = {q: i for q, i in zip(qual[lay], idx) if q}
    for r in np.flatnonzero((inside < 0) & (qual != "")) if by_name else ():
        out[r] = _extends(qual[r], by_name)
    return out


def inherit(parent: np.ndarray, start: np.ndarray, own: np.ndarray, outermost: bool = False) -> np.ndarray:
    """Per module row, ``own`` (>= 0: a value; -1: none) of the nearest module at or above it
    that has one (``outermost``: of the outermost such module), -1 when none has.

    The same as visiting the rows by start (stable) and taking a parent's value only when the
    parent was visited first (parents start first), one tree level per vectorised pass.
    """
    pos = np.empty(len(start), np.int64)
    pos[np.argsort(start, kind="stable")] = np.arange(len(start))
    p = np.maximum(parent, 0)
    up = (parent >= 0) & (pos[p] < pos)  # the parent visited before its child
    val = own.copy()
    for _ in range(len(own) + 1):  # a level per pass: module trees are shallow
        from_up = up & (val[p] >= 0)
        new = (
            np.where(from_up, val[p], own) if outermost else np.where(own >= 0, own, np.where(up, val[p], -1))
        )
        if np.array_equal(new, val):
            break
        val = new
    return val


def _extends(qualname: str, layers: dict[str, int]) -> int:
    """Index of the decoder layer whose qualified name ``qualname`` extends (-1 none)."""
    parts = qualname.split(".")
    for k in range(len(parts) - 1, 0, -1):
        i = layers.get(".".join(parts[:k]))
        if i is not None:
            return i
    return -1


def _roots(parent: np.ndarray) -> np.ndarray:
    """Per module row, its outermost enclosing module (itself at the top)."""
    root = np.arange(len(parent))
    for _ in range(256):  # module trees are shallow
        up = parent[root]
        if (up < 0).all():
            break
        root = np.where(up >= 0, up, root)
    return root
