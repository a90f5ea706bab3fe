"""Step ``assign_modules``: the module instances, and the module each activity's work belongs to."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import annotations as ann
from ..nesting import F_MODULE, F_ROPE
from ..taxonomy import ModuleTaxonomy
from .nest import MODULE_PREFIX
from .state import Trace, lookup, take


def assign_modules(t: Trace, taxonomy: ModuleTaxonomy) -> Trace:
    """Build the module table and give each activity the module of the forward work it is.

    Needs: ``t.ranges`` (with context), ``acts.mod_r``, ``top_r``, ``ctx_bits``,
    ``backward_node``, ``fwd_op_r``.
    Adds: ``t.modules`` (one row per module instance: ``local`` (row of ``t.ranges``), ``cls``,
    ``instance``, ``qualname``, ``start``, ``end``, ``tid``, ``parent_local``, ``parent``,
    ``position``, ``siblings``, ``layer``, ``is_layer``), and on
    ``acts``: ``module_id`` (row of ``t.modules``, -1 none), ``module_instance``, ``top_op`` /
    ``top_op_id`` / ``top_op_ts`` (the outermost op inside that module) and ``rope_frame``.
    Guarantees: a backward activity takes its forward op's module, top op and rotary frame; any
    other activity its own launch context.
    """
    a, r = t.acts, t.ranges
    t.modules = module_table(t, taxonomy)
    bwd = a["backward_node"].to_numpy()
    f_op = a["fwd_op_r"].to_numpy()
    mod = np.where(bwd, take(r["mod_r"].to_numpy(), f_op, -1), a["mod_r"].to_numpy())
    f_top = take(r["top_r"].to_numpy(), f_op, -1)
    f_top = np.where((f_top < 0) & (f_op >= 0), f_op, f_top)
    top = np.where(bwd, f_top, a["top_r"].to_numpy())
    rope = np.where(bwd, take(r["bits"].to_numpy(), f_op, 0), a["ctx_bits"].to_numpy()) & F_ROPE
    top_ev = take(r["ev"].to_numpy(), top, -1)
    mod_row = lookup(pd.Series(np.arange(len(t.modules)), index=t.modules["local"].to_numpy()), mod)
    a["module_id"] = np.where(mod >= 0, mod_row, -1)
    a["module_instance"] = pd.Categorical(
        take(t.modules["instance"].to_numpy(dtype=object), a["module_id"].to_numpy(), "")
    )
    a["top_op"] = pd.Categorical(take(t.names, top_ev, ""))
    a["top_op_ts"] = take(t.events["ts"].to_numpy(), top_ev, -1)
    a["top_op_id"] = top_ev
    a["rope_frame"] = rope != 0
    t.meta["module_source"] = (
        "capture annotations" if t.capture_modules else ("nn.Module events" if len(t.modules) else "none")
    )
    return t


def _split_module_name(name: str) -> tuple[str, str]:
    """``nn.Module: LlamaMLP_3`` -> (``LlamaMLP``, ``LlamaMLP_3``)."""
    inst = name[len(MODULE_PREFIX) :]
    cls, sep, num = inst.rpartition("_")
    return (cls, inst) if sep and num.isdigit() else (inst, inst)


_EMPTY = {"parent": np.int64, "position": np.int64, "siblings": np.int64, "layer": np.int64, "is_layer": bool}


def module_table(t: Trace, taxonomy: ModuleTaxonomy) -> pd.DataFrame:
    """One row per module instance (one forward call) and its place in the module tree
    (categories are assigned by :func:`tracekit.labels.assign_categories`)."""
    r = t.ranges
    local = np.flatnonzero((r["flags"].to_numpy() & F_MODULE) != 0)
    raw = r["name"].to_numpy()[local]
    if t.capture_modules:
        parsed = [ann.parse_module_range(x) or ("", "") for x in raw]
        cls, qual = [c for c, _ in parsed], [q for _, q in parsed]
        inst = qual
    else:
        split = [_split_module_name(x) for x in raw]
        cls, inst = [c for c, _ in split], [i for _, i in split]
        qual = [""] * len(split)
    df = pd.DataFrame(
        {
            "local": local,
            "cls": cls,
            "instance": inst,
            "qualname": qual,
            "start": r["start"].to_numpy()[local],
            "end": r["end"].to_numpy()[local],
            "tid": r["tid"].to_numpy()[local],
            "parent_local": r["mod_r"].to_numpy()[local],
        }
    )
    if df.empty:
        for col, dtype in _EMPTY.items():
            df[col] = pd.Series(dtype=dtype)
        return df
    row_of = pd.Series(np.arange(len(df)), index=df["local"])
    df["parent"] = row_of.reindex(df["parent_local"]).fillna(-1).astype(np.int64).to_numpy()
    df = df.sort_values("start", kind="stable")
    df["position"] = df.groupby(["parent", "cls"]).cumcount()
    df["siblings"] = df.groupby(["parent", "cls"])["cls"].transform("size")
    df = df.sort_index()
    _layers(df, taxonomy)
    return df


def _layers(df: pd.DataFrame, taxonomy: ModuleTaxonomy) -> None:
    """Add ``is_layer`` (a decoder layer class) and ``layer`` (the enclosing decoder layer
    instance, a row of ``df``; -1 outside layers)."""
    parent = df["parent"].to_numpy()
    is_layer = df["cls"].map(lambda c: bool(taxonomy.decoder_layer.fullmatch(c))).to_numpy()
    layer = np.full(len(df), -1, np.int64)
    for i in np.argsort(df["start"].to_numpy(), kind="stable"):  # parents start first
        p = parent[i]
        layer[i] = i if is_layer[i] else (layer[p] if p >= 0 else -1)
    df["layer"] = layer
    df["is_layer"] = is_layer
