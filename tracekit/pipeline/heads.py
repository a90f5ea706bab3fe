"""Where a model's output head sits in the module tree: the ``head = true`` key of a module rule.

A trace names modules by class (``nn.Module: Linear_12``), not by attribute, so a head is known
by its place, which every model family shares: it is called by the model itself, after the
model's body. A module is in the **head place** when

* its parent is a *model*: the outermost module of a forward pass, or the one module a chain of
  one-child wrappers (DDP, PEFT, FSDP) holds, with at least two children; a model's instance is
  never called inside another module (a block checkpointed and rerun in backward is a root
  there, but its instance also runs inside the model, so it is no model), and it is no decoder
  layer;
* it is the last module of its class the model calls (``position == siblings - 1``);
* a child of the model of another class started before it (the body: embeddings, the layers,
  the encoder).

``lm_head`` under ``LlamaForCausalLM``, ``classifier`` under ``ViTForImageClassification``,
``cls`` (``BertOnlyMLMHead``) under ``BertForMaskedLM``, a plain model's final ``nn.Linear`` and
torchvision's ``fc`` all sit there; the projections inside layers never do.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .composite_attention import PROJECTION_WHY
from .state import codes_of

#: What ``tracekit explain`` says of the module labels that come from structure, not a rule.
STRUCTURAL_WHY = {
    "projection": PROJECTION_WHY,
    "head-op": "the model's output head: the last GEMM op it runs itself, after its last module",
}


def _models(mods: pd.DataFrame) -> np.ndarray:
    """Per module row: it is a model (see the module docstring)."""
    parent = mods["parent"].to_numpy()
    n = len(mods)
    children = np.bincount(parent[parent >= 0], minlength=n)
    inst = codes_of(mods["instance"])[0]
    top = ~np.isin(inst, inst[parent >= 0])  # instances never called inside another module
    chain = parent < 0  # the outermost modules and the wrappers' one child, level by level
    for _ in range(64):
        p = np.maximum(parent, 0)
        more = chain | ((parent >= 0) & chain[p] & (children[p] == 1))
        if np.array_equal(more, chain):
            break
        chain = more
    return chain & (children >= 2) & (top | (parent >= 0)) & ~mods["is_layer"].to_numpy(bool)


def head_places(mods: pd.DataFrame) -> np.ndarray:
    """Per module row: it is in the head place (see the module docstring). Needs module-table
    columns ``parent``, ``instance``, ``cls``, ``start``, ``position``, ``siblings``,
    ``is_layer``."""
    n = len(mods)
    out = np.zeros(n, dtype=bool)
    if n == 0:
        return out
    parent = mods["parent"].to_numpy()
    under = np.flatnonzero((parent >= 0) & _models(mods)[np.maximum(parent, 0)])
    if under.size == 0:
        return out
    cls = codes_of(mods["cls"])[0][under]
    start = mods["start"].to_numpy(np.int64)[under]
    par = parent[under]
    # Per model (a run of ``order``): its earliest child (start, class) and the earliest child
    # of another class; ``model``: each child's model, as a number of its run.
    order = np.lexsort((start, par))
    new = np.ones(len(order), bool)
    new[1:] = par[order][1:] != par[order][:-1]
    heads = np.flatnonzero(new)
    model = np.empty(len(order), np.intp)
    model[order] = np.cumsum(new) - 1
    first = order[heads]
    other = cls != cls[first][model]
    s1 = np.minimum.reduceat(np.where(other, start, np.iinfo(np.int64).max)[order], heads)
    before = np.where(other, start[first][model], s1[model]) < start
    last = mods["position"].to_numpy()[under] == mods["siblings"].to_numpy()[under] - 1
    out[under] = before & last
    return out


def head_ops(a: pd.DataFrame, mods: pd.DataFrame, gemm: re.Pattern) -> np.ndarray:
    """Per activity: it is the work of a model's own output projection, a head with no module
    around it (tied to the embedding: ``F.linear(x, self.embed.weight)``, ``x @ wte.weight.T``).
    That is the last op matching ``gemm`` (its outermost op in the model) a model runs itself,
    after its last child module ended; in backward, the node of that op (the activities'
    ``module_id``, ``top_op``, ``top_op_id``, ``top_op_ts`` are the forward op's there)."""
    out = np.zeros(len(a), dtype=bool)
    mid = a["module_id"].to_numpy()
    if mods.empty or not (mid >= 0).any():
        return out
    model = _models(mods)
    parent = mods["parent"].to_numpy()
    last_end = np.full(len(mods), np.iinfo(np.int64).max, np.int64)
    kids = parent >= 0
    last_end[np.unique(parent[kids])] = np.iinfo(np.int64).min
    np.maximum.at(last_end, parent[kids], mods["end"].to_numpy(np.int64)[kids])
    codes, uniq = codes_of(a["top_op"])
    is_gemm = np.array([bool(gemm.fullmatch(str(u))) for u in uniq], dtype=bool)[codes]
    ts = a["top_op_ts"].to_numpy(np.int64)
    m = np.maximum(mid, 0)
    cand = (mid >= 0) & model[m] & is_gemm & (ts >= last_end[m])
    if not cand.any():
        return out
    top_id = a["top_op_id"].to_numpy()
    last = pd.Series(ts[cand]).groupby(mid[cand]).max()  # the model's last such op
    chosen = pd.Series(top_id[cand][ts[cand] == last.reindex(mid[cand]).to_numpy()]).unique()
    out[cand] = np.isin(top_id[cand], chosen)
    return out


def module_why(taxonomy: object, rule: str) -> str | None:
    """What a module rule says (``tracekit explain``): its ``why`` in the rules file, or how
    structure gave it (:data:`STRUCTURAL_WHY`)."""
    rule_id, _, part = rule.partition(" ")
    whys = {r.rule_id: r.why for r in getattr(taxonomy, "rules", []) if r.why} | STRUCTURAL_WHY
    return whys.get("projection" if part.endswith(":projection") else rule_id)
