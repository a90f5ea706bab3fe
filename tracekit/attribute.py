"""Attribute: give every activity of a step exactly one label of each kind.

Input: a :class:`~tracekit.link.LinkedTrace`. Output: an :class:`Attributed` with

* ``intervals``: one row per activity in a complete step: ``step``, ``phase`` (by launching op),
  ``window`` (the phase wall window it starts in), ``group`` (compute / comm / memcpy / memset),
  ``kernel_category``, ``collective``, ``module`` (paper category), ``block`` (timeline),
  ``is_gemm``, ``stream``, times, and ``share_<phase>``: its exclusive share of busy time inside
  each phase window (compute first, then communication, then memory traffic; concurrent
  activities of one level split an instant equally).
* ``steps``: per step its GPU (or CPU) window and the phase boundaries.

Tables in ``tracekit.analyses`` are group-bys and interval measures over these two frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .intervals import ShareClock
from .link import LinkedTrace, take
from .read import MEMCPY, MEMSET
from .taxonomy import KernelRules, ModuleTaxonomy
from .stages import pass_index

PHASES = ["forward", "backward", "optimizer"]
GROUP_LEVEL = {"compute": 0, "comm": 1, "memcpy": 2, "memset": 2}


@dataclass
class Attributed:
    path: str
    mode: str
    intervals: pd.DataFrame
    steps: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _matches(col: pd.Series, rx) -> np.ndarray:
    """``rx.search`` over a categorical column, evaluated once per distinct value."""
    cats = col.cat.categories
    hit = np.array([bool(rx.search(str(c))) for c in cats] + [False], dtype=bool)
    return hit[col.cat.codes.to_numpy()]


def _groups(linked: LinkedTrace, rules: KernelRules) -> np.ndarray:
    a = linked.activities
    kind = a["kind"].to_numpy()
    if linked.mode == "gpu":
        is_comm = _matches(a["name"], rules.comm_kernel)
        group = np.where(kind == MEMCPY, "memcpy", np.where(kind == MEMSET, "memset",
                         np.where(is_comm, "comm", "compute")))
    else:
        is_comm = _matches(a["name"], rules.comm_op) | \
            (a["comm_text"].astype(str).to_numpy() != "")
        group = np.where(is_comm, "comm", "compute")
    return group.astype(object)


def _kernel_categories(a: pd.DataFrame, group: np.ndarray, rules: KernelRules) -> tuple[np.ndarray, np.ndarray]:
    """(kernel_category, collective) per activity; rules applied once per unique name pair."""
    pairs = pd.DataFrame({"name": a["name"].astype(str), "op": a["top_op"].astype(str),
                          "leaf": a["op"].astype(str), "comm": a["comm_text"].astype(str),
                          "group": group})
    uniq = pairs.drop_duplicates()
    cat, coll = [], []
    for name, op, leaf, comm, g in uniq.itertuples(index=False):
        if g == "comm":
            c = rules.collective(name, comm, leaf)
            coll.append(c)
            cat.append(c if c in ("AllReduce", "AllGather") else "Other")
        elif g in ("memcpy", "memset"):
            coll.append("")
            cat.append("Memcpy" if g == "memcpy" else "Memset")
        else:
            coll.append("")
            cat.append(rules.compute_category(name, f"{leaf} {op}"))
    uniq = uniq.assign(kernel_category=cat, collective=coll)
    merged = pairs.merge(uniq, on=list(pairs.columns), how="left")
    return merged["kernel_category"].to_numpy(dtype=object), merged["collective"].to_numpy(dtype=object)


def _module_categories(linked: LinkedTrace, taxonomy: ModuleTaxonomy) -> np.ndarray:
    """Paper module category per activity (Table VI rows), ``Other`` when none applies."""
    a, mods = linked.activities, linked.modules
    mid = a["module_id"].to_numpy()
    if mods.empty:
        cat = np.full(len(a), "Other", dtype=object)
    else:
        cat = np.where(mid >= 0, mods["category"].to_numpy(dtype=object)[np.maximum(mid, 0)], "Other")
    cat = cat.astype(object)
    # Inside an attention module: split by op and position around the two matmuls.
    att = cat == "@attention"
    if att.any():
        # Times relative to an origin: comparisons below go through float64.
        top_ts = a["top_op_ts"].to_numpy()[att]
        origin = top_ts[top_ts >= 0].min() if (top_ts >= 0).any() else 0
        root = mods["att_root"].to_numpy()[mid[att]]
        sub = pd.DataFrame({"mid": np.where(root >= 0, root, mid[att]),
                            "top": a["top_op"].astype(str).to_numpy()[att],
                            "top_ts": np.where(top_ts >= 0, top_ts - origin, -1),
                            "top_id": a["top_op_id"].to_numpy()[att],
                            "rope": a["rope_frame"].to_numpy()[att]})
        fused = sub["top"].str.fullmatch(taxonomy.fused_attention).to_numpy()
        is_bmm = sub["top"].str.fullmatch(taxonomy.bmm).to_numpy() & ~fused
        bm = sub[is_bmm].drop_duplicates("top_id").sort_values("top_ts")
        bm = bm.assign(nth=bm.groupby("mid").cumcount())
        t0 = bm[bm.nth == 0].set_index("mid")["top_ts"]
        t1 = bm[bm.nth == 1].set_index("mid")["top_ts"]
        fz = sub[fused].groupby("mid")["top_ts"].min()
        first = pd.concat([t0, fz], axis=1).min(axis=1)
        b0 = t0.reindex(sub["mid"]).to_numpy(dtype="float64")
        b1 = t1.reindex(sub["mid"]).to_numpy(dtype="float64")
        f0 = first.reindex(sub["mid"]).to_numpy(dtype="float64")
        ts = sub["top_ts"].to_numpy(dtype="float64")
        out = np.full(len(sub), "Other", dtype=object)
        before = np.isnan(f0) | (ts < f0)
        out[before] = "RoPE"
        out[~before & ~np.isnan(b0) & (ts > b0) & (np.isnan(b1) | (ts < b1))] = "Softmax"
        out[ts == b0] = "Bmm0"
        out[ts == b1] = "Bmm1"
        out[(~np.isnan(b1)) & (ts > b1)] = "Other"
        # Ops of child modules that only inherit the attention category (e.g. an fp8 quant
        # module) are not RoPE/Softmax work: Other unless they are the fused attention itself.
        own_cat = mods["own_category"].to_numpy()[mid[att]]
        out[(own_cat != "@attention") & ~fused] = "Other"
        out[fused] = "Attention"
        out[sub["top_id"].to_numpy() < 0] = "Other"
        out[sub["rope"].to_numpy()] = "RoPE"
        cat[att] = out
    cat[a["rope_frame"].to_numpy() & (cat == "Other")] = "RoPE"
    return cat


def _blocks(linked: LinkedTrace) -> tuple[np.ndarray, np.ndarray]:
    """Timeline block of each activity's launch (before / attention / ffn / after / '') and
    its decoder layer instance (-1 outside layers)."""
    a, mods = linked.activities, linked.modules
    n = len(a)
    block = np.full(n, "", dtype=object)
    if mods.empty or not mods["is_layer"].any():
        return block, np.full(n, -1, np.int64)
    mid = a["module_id"].to_numpy()
    # In backward, module_id is the forward op's module; blocks describe forward launches only.
    fwd = ~a["backward_node"].to_numpy()
    layer = take(mods["layer"].to_numpy(), mid, -1)
    origin = int(mods["start"].min())  # relative times: comparisons below go through float64
    split = _layer_split_times(mods, origin)
    lts = a["launch_ts"].to_numpy() - origin
    in_layer = (layer >= 0) & fwd
    sp = split.reindex(layer[in_layer]).to_numpy(dtype="float64")
    block[in_layer] = np.where(lts[in_layer] < sp, "attention", "ffn")
    # Outside layers: before the step's first layer or after its last.
    layers = mods[mods["is_layer"]]
    out = fwd & (layer < 0)
    if out.any():
        first = layers["start"].min() - origin
        steps = a["step"].to_numpy()
        # Several forward passes in a step (generate, micro-batches): before/after each pass.
        ps = pass_index(mods, a["launch_ts"].to_numpy())
        tmp = pd.DataFrame({"step": steps[in_layer], "pass": ps[in_layer], "ts": lts[in_layer]})
        by_pass = tmp.groupby(["step", "pass"])["ts"].min()
        firsts = tmp.groupby("step")["ts"].min()
        f = by_pass.reindex(pd.MultiIndex.from_arrays([steps[out], ps[out]])).to_numpy(dtype="float64")
        f = np.where(np.isnan(f), firsts.reindex(steps[out]).to_numpy(dtype="float64"), f)
        f = np.where(np.isnan(f), first, f)
        block[out] = np.where(lts[out] < f, "before", "after")
    return block, np.where(in_layer, layer, -1)


def _layer_split_times(mods: pd.DataFrame, origin: int) -> pd.Series:
    """Per decoder-layer row: when its FFN block starts, relative to ``origin``.

    The FFN block starts at the first direct child after the layer's attention child that is a
    norm (post-attention norm) or the MLP; in a layer with no attention child, at its second
    norm child, else its first MLP child; with none of these the layer is all attention.
    """
    layers = mods.index[mods["is_layer"].to_numpy()]
    end = (mods.loc[layers, "end"] - origin).astype("float64")
    ch = mods[mods["parent"].isin(layers)]
    if ch.empty:
        return end
    cat = ch["category"].to_numpy()
    start = ch["start"] - origin
    par = ch["parent"]
    att = start[cat == "@attention"].groupby(par[cat == "@attention"]).min()
    after_att = start > att.reindex(par).to_numpy(dtype="float64")  # NaN compares False
    ffn_like = np.isin(cat, ("RMSNorm", "MLP"))
    split = start[ffn_like & after_att].groupby(par[ffn_like & after_att]).min()
    no_att = ~par.isin(att.index).to_numpy()
    norms = ch[no_att & (cat == "RMSNorm")].sort_values("start")
    second_norm = (norms.groupby("parent")["start"].nth(1).groupby(norms["parent"]).min() - origin
                   if len(norms) else pd.Series(dtype="float64"))
    first_mlp = start[no_att & (cat == "MLP")].groupby(par[no_att & (cat == "MLP")]).min()
    fallback = second_norm.combine_first(first_mlp)
    out = split.astype("float64").combine_first(fallback.astype("float64"))
    return out.reindex(layers).fillna(end)


def attribute(linked: LinkedTrace, taxonomy: ModuleTaxonomy, rules: KernelRules) -> Attributed:
    a = linked.activities
    warnings = list(linked.warnings)
    group = _groups(linked, rules)
    kcat, coll = _kernel_categories(a, group, rules)
    module = _module_categories(linked, taxonomy)
    module = np.where(group == "compute", module, "")
    block, layer = _blocks(linked)
    iv = pd.DataFrame({
        "step": a["step"].to_numpy(),
        "start": a["start"].to_numpy(), "end": a["end"].to_numpy(),
        "name": a["name"], "op": a["op"], "stream": a["stream"].to_numpy(),
        "phase": a["phase"], "stage": a["stage"], "group": group,
        "kernel_category": kcat, "collective": coll, "module": module, "block": block, "layer": layer,
        "fwd_pass": pass_index(linked.modules, a["launch_ts"].to_numpy()),
        "is_gemm": (group == "compute") & (kcat == "GEMM"),
        "bytes": a["bytes"].to_numpy(),
    })
    iv = iv[iv["step"] >= 0]
    steps, iv = _step_windows(iv, linked, warnings)
    iv = _shares(iv, steps)
    for c in ("group", "kernel_category", "collective", "module", "block"):
        iv[c] = iv[c].astype("category")
    meta = dict(linked.meta)
    meta["steps"] = steps["step"].tolist()
    meta["complete_steps"] = steps.loc[steps["complete"], "step"].tolist()
    return Attributed(path=linked.path, mode=linked.mode, intervals=iv.reset_index(drop=True),
                      steps=steps, meta=meta, warnings=warnings)


def _step_windows(iv: pd.DataFrame, linked: LinkedTrace, warnings: list[str]):
    g = iv.groupby("step")
    steps = pd.DataFrame({"start": g["start"].min(), "end": g["end"].max(),
                          "activities": g.size()})
    # Boundaries collapse onto the next one when a phase is absent (int64 throughout: epoch
    # nanoseconds do not survive a trip through float64).
    end = steps["end"].to_numpy(np.int64)
    firsts = {}
    for ph in ("backward", "optimizer"):
        t = iv[iv["phase"] == ph].groupby("step")["start"].min().reindex(steps.index)
        firsts[ph] = np.where(t.isna(), -1, t.fillna(0).astype(np.int64).to_numpy() if len(t) else 0)
    t_opt = np.where(firsts["optimizer"] >= 0, firsts["optimizer"], end)
    t_bwd = np.where(firsts["backward"] >= 0, np.minimum(firsts["backward"], t_opt), t_opt)
    steps["t_backward"] = t_bwd.astype(np.int64)
    steps["t_optimizer"] = t_opt.astype(np.int64)
    steps = steps.reset_index()
    # Complete steps: the window of ProfilerStep ranges cut off by the profiling window, or empty
    # of activity while their neighbours are busy, are left out of the means.
    steps["complete"] = True
    if len(steps) >= 3:
        med = float(np.median(steps["end"] - steps["start"]))
        dur = (steps["end"] - steps["start"]).to_numpy()
        cut = np.zeros(len(steps), bool)
        cut[[0, -1]] = dur[[0, -1]] < 0.1 * med
        steps.loc[cut, "complete"] = False
        if cut.any():
            warnings.append("steps " + ", ".join(str(s) for s in steps.loc[cut, "step"]) +
                            " look cut by the profiling window (under 10% of the median step); "
                            "left out of the means")
    iv = iv[iv["step"].isin(steps.loc[steps["complete"], "step"])]
    return steps, iv


def _shares(iv: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Add ``window`` and ``share_<phase>`` columns: exclusive busy-time shares per window."""
    iv = iv.copy()
    level = iv["group"].map(GROUP_LEVEL).to_numpy()
    for ph in PHASES:
        iv[f"share_{ph}"] = 0.0
    iv["window"] = ""
    st = steps.set_index("step")
    cols = [iv.columns.get_loc(f"share_{ph}") for ph in PHASES]
    win_col = iv.columns.get_loc("window")
    for step, idx in iv.groupby("step").indices.items():
        if step not in st.index:
            continue
        row = st.loc[step]
        s = iv["start"].to_numpy()[idx]
        e = iv["end"].to_numpy()[idx]
        clock = ShareClock(s, e, level[idx])
        bounds = [int(row["start"]), int(row["t_backward"]), int(row["t_optimizer"]), int(row["end"])]
        for k, c in enumerate(cols):
            iv.iloc[idx, c] = clock.shares(bounds[k], bounds[k + 1])
        w = np.where(s < bounds[1], "forward", np.where(s < bounds[2], "backward", "optimizer"))
        iv.iloc[idx, win_col] = w
    return iv
