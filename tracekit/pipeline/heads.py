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

import numpy as np
import pandas as pd

from .state import codes_of


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
    # Per model: its earliest child (start, class) and the earliest child of another class.
    order = np.lexsort((start, par))
    first = pd.Series(order).groupby(par[order], sort=False).first()
    c0 = pd.Series(cls[first.to_numpy()], index=first.index)
    s0 = pd.Series(start[first.to_numpy()], index=first.index)
    other = cls != c0.reindex(par).to_numpy()
    big = np.iinfo(np.int64).max
    s1 = pd.Series(np.where(other, start, big)).groupby(par).min()
    before = np.where(other, s0.reindex(par).to_numpy(), s1.reindex(par).to_numpy()) < start
    last = mods["position"].to_numpy()[under] == mods["siblings"].to_numpy()[under] - 1
    out[under] = before & last
    return out
