"""Attention blocks run as one op: split them by their own child ops.

``nn.MultiheadAttention``'s fast path is one op, ``aten::_native_multi_head_attention``, that
holds the whole block: the packed in-projection GEMM, the bias and rescale of q, k, v, Q·Kᵀ,
the (masked) softmax, P·V and the out-projection. Inside an attention module the work of such
an op is labelled by the child op that launched it (``[attention] composite*`` in
tracekit/data/modules.toml): GEMMs launched before its attention core (the first ``bmm``, or a
fused attention op) and the qkv bias/rescale are **QKV**; the first ``bmm`` is **Bmm0**, a
softmax **Softmax**, the second ``bmm`` **Bmm1**; GEMMs after the core **Output**; a fused
attention op **Attention**; anything else (copies, views) the block's glue, **Attention other**.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .state import as_str
from .taxonomy import ModuleTaxonomy

#: The parts :func:`projection_parts` gives (category, then how: the rule reads
#: ``attention:QKV:projection``).
QKV_PROJECTION, OUTPUT_PROJECTION = "QKV|projection", "Output|projection"
#: What ``tracekit explain`` says of a part :func:`projection_parts` gave.
PROJECTION_WHY = "the attention block's own F.linear: QKV before its core, Output after"
#: The matmuls of the attention core inside a composite op (Q·Kᵀ, then P·V).
CORE_BMM = re.compile(r"aten::(bmm|baddbmm)")


def _full(names: np.ndarray, rx: re.Pattern) -> np.ndarray:
    """``rx.fullmatch`` per name, run once per distinct name."""
    codes, uniq = pd.factorize(pd.Series(names, dtype=object))
    hit = np.array([bool(rx.fullmatch(str(u))) for u in uniq] + [False])
    return hit[np.where(codes < 0, len(uniq), codes)]


def composite_parts(
    a: pd.DataFrame, rows: np.ndarray, taxonomy: ModuleTaxonomy
) -> tuple[np.ndarray, np.ndarray]:
    """For the activities ``rows`` (inside an attention module): which run inside a composite
    attention op (its outermost op there), and the part each of those is (see the module
    docstring; "" for the others)."""
    top = as_str(a["top_op"])[rows]
    inside = _full(top, taxonomy.composite)
    part = np.full(len(rows), "", dtype=object)
    if not inside.any():
        return inside, part
    sub = rows[inside]
    op = as_str(a["op"])[sub]
    op_id = a["op_id"].to_numpy()[sub]
    ts = a["launch_ts"].to_numpy(np.int64)[sub]
    key = a["top_op_id"].to_numpy()[sub]
    bmm = _full(op, CORE_BMM)
    fused = _full(op, taxonomy.fused_attention) & ~bmm
    frame = pd.DataFrame({"key": key, "ts": ts, "op_id": op_id})
    first_bmm = frame[bmm].sort_values("ts").drop_duplicates("key").set_index("key")["op_id"]
    core = frame[bmm | fused].groupby("key")["ts"].min()
    big = np.iinfo(np.int64).max
    t_core = core.reindex(key).fillna(big).to_numpy(np.int64) if len(core) else np.full(len(sub), big)
    b0 = first_bmm.reindex(key).fillna(-2).to_numpy(np.int64) if len(first_bmm) else np.full(len(sub), -2)
    out = np.full(len(sub), "Attention other", dtype=object)
    gemm = _full(op, taxonomy.composite_gemm) & ~bmm
    out[gemm & (ts < t_core)] = "QKV"
    out[gemm & (ts >= t_core)] = "Output"
    out[_full(op, taxonomy.composite_qkv)] = "QKV"
    out[_full(op, taxonomy.composite_softmax)] = "Softmax"
    out[bmm] = np.where(op_id[bmm] == b0[bmm], "Bmm0", "Bmm1")
    out[fused] = "Attention"
    part[inside] = out
    return inside, part


def projection_parts(block: np.ndarray, ts: np.ndarray, proj: np.ndarray, core: np.ndarray) -> np.ndarray:
    """The part of each projection row (``proj``): an attention module that runs its GEMMs
    itself (``nn.MultiheadAttention`` in training calls ``F.linear`` on ``in_proj_weight`` and
    ``out_proj.weight``; no Linear module runs) projects q, k, v before its attention core and
    the output after it. Per row of ``proj`` (in order): **QKV** (:data:`QKV_PROJECTION`) when
    its op starts before the block's core (its first ``core`` row: the first matmul or a fused
    attention op), **Output** after, **Attention other** in a block with no core. ``block``:
    the attention block of each row; ``ts``: its op's start (float64)."""
    uniq, of = np.unique(block, return_inverse=True)
    first = np.full(len(uniq), np.inf)  # per block, its core's first start
    np.minimum.at(first, of.ravel(), np.where(core, ts, np.inf))
    at = first[of.ravel()[proj]]
    t = ts[proj]
    return np.where(np.isinf(at), "Attention other", np.where(t < at, QKV_PROJECTION, OUTPUT_PROJECTION))
