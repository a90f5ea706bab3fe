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
    if m.empty:
        return pd.DataFrame(columns=COLUMNS)
    nbytes = m["bytes"].to_numpy(np.float64)
    alloc = nbytes > 0
    phase = m["phase"].to_numpy(dtype=object)
    rec = m["recompute"].to_numpy(bool)
    fwd, bwd = phase == "forward", (phase == "backward") & ~rec
    frame = pd.DataFrame(
        {
            "step": m["step"].to_numpy(),
            "device": m["device"].to_numpy(dtype=object),
            "module": m["module"].to_numpy(dtype=object),
            "forward_allocated_mb": np.where(fwd & alloc, nbytes, 0.0),
            "held_mb": np.where(m["held"].to_numpy(bool), nbytes, 0.0),
            "backward_allocated_mb": np.where(bwd & alloc, nbytes, 0.0),
            "backward_freed_mb": np.where(bwd & ~alloc, -nbytes, 0.0),
            "recompute_allocated_mb": np.where(rec & alloc, nbytes, 0.0),
            "_addressed": fwd & alloc & m["has_addr"].to_numpy(bool),
            "_forward": fwd & alloc,
        }
    )
    out = frame.groupby(["step", "device", "module"], sort=False).sum().reset_index()
    out[list(VALUES)] = out[list(VALUES)] / MB_BYTES
    # Held needs addresses: a row with forward allocations and none addressed cannot tell.
    out.loc[(out["_forward"] > 0) & (out["_addressed"] == 0), "held_mb"] = np.nan
    out["_o"] = out["module"].map(ORDER).fillna(len(ORDER))
    return out.sort_values(["step", "device", "_o", "module"], kind="stable")[COLUMNS].reset_index(drop=True)
