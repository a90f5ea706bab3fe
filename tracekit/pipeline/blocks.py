"""The timeline block of each activity's launch (Table XI's rows): ``attention`` or ``ffn``
inside a decoder layer (split where the layer's attention module ends), ``before`` the step's
first layer or ``after`` its last, per forward pass; backward launches get none. Part of
:func:`tracekit.pipeline.labels.assign_categories`."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .state import Coded, codes_of, distinct_rows, take
from .state import Trace as LinkedTrace

BLOCKS = np.array(["", "before", "attention", "ffn", "after"], dtype=object)


def blocks(linked: LinkedTrace) -> Coded:
    """Timeline block of each activity's launch (before / attention / ffn / after / ''), as
    codes into :data:`BLOCKS`."""
    from .stages import pass_index

    a, mods = linked.activities, linked.modules
    n = len(a)
    block = np.zeros(n, dtype=np.intp)
    if mods.empty or not mods["is_layer"].any():
        return Coded(block, BLOCKS)
    mid = a["module_id"].to_numpy()
    # In backward, module_id is the forward op's module; blocks describe forward launches only.
    fwd = ~a["backward_node"].to_numpy()
    layer = take(mods["layer"].to_numpy(), mid, -1)
    origin = int(mods["start"].min())  # relative times: comparisons below go through float64
    lts = a["launch_ts"].to_numpy() - origin
    in_layer = (layer >= 0) & fwd
    sp = _layer_split_times(mods, origin)[layer[in_layer]]
    block[in_layer] = np.where(lts[in_layer] < sp, 2, 3)  # attention, ffn
    # Outside layers: before the step's first layer or after its last.
    out = fwd & (layer < 0)
    if out.any():
        first = mods["start"].to_numpy()[mods["is_layer"].to_numpy(bool)].min() - origin
        steps = a["step"].to_numpy()
        # Several forward passes in a step (generate, micro-batches): before/after each pass.
        ps = pass_index(mods, a["launch_ts"].to_numpy())
        f = _first_at(lts[in_layer], [steps[in_layer], ps[in_layer]], [steps[out], ps[out]])
        f = np.where(np.isnan(f), _first_at(lts[in_layer], [steps[in_layer]], [steps[out]]), f)
        f = np.where(np.isnan(f), first, f)
        block[out] = np.where(lts[out] < f, 1, 4)  # before, after
    return Coded(block, BLOCKS)


def _first_at(ts: np.ndarray, keys: list[np.ndarray], at: list[np.ndarray]) -> np.ndarray:
    """Per row of ``at`` (columns of keys), the smallest ``ts`` of the rows of ``keys`` with the
    same keys, as float64 (NaN: none)."""
    m = len(ts)
    key = distinct_rows(*(np.concatenate([k, q]) for k, q in zip(keys, at)))[0]
    low = np.full(int(key.max()) + 1 if len(key) else 0, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(low, key[:m], ts)
    seen = np.zeros(len(low), bool)
    seen[key[:m]] = True
    return np.where(seen[key[m:]], low[key[m:]].astype(np.float64), np.nan)


def _children_min(n: int, parent: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per module row: the smallest ``value`` of its children (given by ``parent``), and
    whether it has any."""
    low = np.full(n, np.iinfo(np.int64).max, np.int64)
    np.minimum.at(low, parent, value)
    has = np.zeros(n, bool)
    has[parent] = True
    return low, has


def _layer_split_times(mods: pd.DataFrame, origin: int) -> np.ndarray:
    """Per module row (float64, NaN unless a decoder layer): when the layer's FFN block starts,
    relative to ``origin``.

    The FFN block starts at the first direct child after the layer's attention child that is a
    norm (post-attention norm) or the MLP; in a layer with no attention child, at its second
    norm child, else its first MLP child; with none of these the layer is all attention.
    """
    n = len(mods)
    is_layer = mods["is_layer"].to_numpy(bool)
    out = np.full(n, np.nan)
    out[is_layer] = (mods["end"].to_numpy(np.int64)[is_layer] - origin).astype(np.float64)
    parent = mods["parent"].to_numpy()
    ch = np.flatnonzero((parent >= 0) & is_layer[np.maximum(parent, 0)])  # direct children
    codes, uniq = codes_of(mods["category"])
    par, start, cat = parent[ch], mods["start"].to_numpy(np.int64)[ch] - origin, codes[ch]
    is_att, is_norm, is_mlp = ((uniq == c)[cat] for c in ("@attention", "RMSNorm", "MLP"))
    att, has_att = _children_min(n, par[is_att], start[is_att])
    after = has_att[par] & (start > att[par].astype(np.float64))  # compared as float64, as ever
    split, has_split = _children_min(n, par[after & (is_norm | is_mlp)], start[after & (is_norm | is_mlp)])
    # No attention child: the second norm child (by start), else the first MLP child.
    norms = np.flatnonzero(~has_att[par] & is_norm)
    norms = norms[np.lexsort((start[norms], par[norms]))]
    head = np.ones(len(norms), bool)
    head[1:] = par[norms][1:] != par[norms][:-1]
    pos = np.arange(len(norms))
    second = norms[pos - np.maximum.accumulate(np.where(head, pos, 0)) == 1]
    mlp = ~has_att[par] & is_mlp
    fall, has_fall = _children_min(n, par[mlp], start[mlp])
    fall[par[second]] = start[second]
    has_fall[par[second]] = True
    take_split, take_fall = is_layer & has_split, is_layer & ~has_split & has_fall
    out[take_split] = split[take_split].astype(np.float64)
    out[take_fall] = fall[take_fall].astype(np.float64)
    return out
