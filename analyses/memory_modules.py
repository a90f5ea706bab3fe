"""Memory per module category: what each module's forward holds (its activations), what its
backward allocates and frees.

Rows: the rank's labelled memory events of complete steps (:mod:`tracekit.pipeline.memory`:
each event has the module category a launch at its place would have: the innermost module
with a category, in backward the module of the backward node's forward op). Per step, device
and module category (docs/metrics.md, "Memory"):

* ``forward_allocated_mb``: allocations made in forward inside the module;
* ``held_mb``: of those, what was still allocated when the forward pass ended (its
  activations; empty for a device whose events record no address, as in torch 1.9);
* ``backward_allocated_mb`` / ``backward_freed_mb``: allocations and frees in the module's
  backward (gradients and temporaries; the saved activations released), recomputation aside;
* ``recompute_allocated_mb``: allocations of activation checkpointing's rerun of the module.

Each event counts in one category; the mean view averages each row over the complete steps
that hold it. MB = 2**20 bytes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import distinct_rows
from tracekit.pipeline.taxonomy import MODULE_CATEGORIES
from tracekit.pipeline.windows import Windows

from ._registry import MB, MEMORY_EVENTS, PRESENT_MEAN, register
from .memory import MB_BYTES, complete

VALUES = {
    "forward_allocated_mb": MB,
    "held_mb": MB,
    "backward_allocated_mb": MB,
    "backward_freed_mb": MB,
    "recompute_allocated_mb": MB,
}
COLUMNS = ["step", "device", "module", *VALUES]
#: Row order: the paper's categories, Other, then any category of a user's taxonomy.
ORDER = {c: i for i, c in enumerate([*MODULE_CATEGORIES, "Other"])}


@register(
    "memory_modules",
    title="Memory per module: activations held after forward, freed by backward",
    keys=("device", "module"),
    values=VALUES,
    reads=MEMORY_EVENTS,
    aggregate=PRESENT_MEAN,
    chart="none",
    sort_by="held_mb",
)
def table(memory: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    m = complete(memory, windows)
    device, module = pd.Categorical(m["device"]), pd.Categorical(m["module"])
    ok = np.flatnonzero((device.codes >= 0) & (module.codes >= 0))  # as a group-by drops NaN keys
    if not len(ok):
        return pd.DataFrame(columns=COLUMNS)
    step = m["step"].to_numpy()[ok]
    key, first = distinct_rows(step, device.codes[ok], module.codes[ok])  # by first appearance
    nbytes = m["bytes"].to_numpy(np.float64)[ok]
    alloc = nbytes > 0
    phase = pd.Categorical(m["phase"])
    fwd, bwd_all = (np.asarray(phase == p)[ok] for p in ("forward", "backward"))
    rec = m["recompute"].to_numpy(bool)[ok]
    bwd = bwd_all & ~rec

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(key, values, len(first))

    sums = {
        "forward_allocated_mb": total(np.where(fwd & alloc, nbytes, 0.0)),
        "held_mb": total(np.where(m["held"].to_numpy(bool)[ok], nbytes, 0.0)),
        "backward_allocated_mb": total(np.where(bwd & alloc, nbytes, 0.0)),
        "backward_freed_mb": total(np.where(bwd & ~alloc, -nbytes, 0.0)),
        "recompute_allocated_mb": total(np.where(rec & alloc, nbytes, 0.0)),
    }
    out = pd.DataFrame(
        {
            "step": step[first],
            "device": np.asarray(device[ok][first], dtype=object),
            "module": np.asarray(module[ok][first], dtype=object),
            **{c: v / MB_BYTES for c, v in sums.items()},
        }
    )
    # Held needs addresses: a row with forward allocations and none addressed cannot tell.
    forward = total((fwd & alloc).astype(np.float64))
    addressed = total((fwd & alloc & m["has_addr"].to_numpy(bool)[ok]).astype(np.float64))
    out.loc[(forward > 0) & (addressed == 0), "held_mb"] = np.nan
    out["_o"] = out["module"].map(ORDER).fillna(len(ORDER))
    return out.sort_values(["step", "device", "_o", "module"], kind="stable")[COLUMNS].reset_index(drop=True)
