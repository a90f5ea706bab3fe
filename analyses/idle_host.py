"""What the host was doing while no stream was busy, per step, phase, op family, module and op.

A device-level gap runs, over all streams in start order, from the end of the activity that
ended last so far to the start of the next activity B (:mod:`tracekit.pipeline.host_idle`).
Its host side is B's launching thread at the gap's start: the innermost CPU op open there
(``op``), its module category (``module``) and op family (``family``): ``launch_in_flight``
(B's launch call had begun before the gap: the host was not late), ``no_op`` (the thread was in
no op: no launch in flight), ``sync``, ``data_loader``, ``collective_wait``, ``optimizer``,
``other_op``. Each gap is clipped to the phase windows of the complete steps it overlaps, as in
``idle_causes``; per step the rows add up to the ``idle`` table's idle time, less the gaps whose
activity has no launching call (never a guess; a trace without runtime calls has no rows).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._groups import whole_sums
from ._registry import MS, register
from .idle_causes import clip_to_windows, has_launches

KEYS = ["step", "phase", "family", "module", "op"]
COLUMNS = [*KEYS, "idle_ms"]


@register(
    "idle_host",
    title="Device idle: what the launching thread was doing",
    keys=("phase", "family", "module", "op"),
    values={"idle_ms": MS},
    top=20,
    sort_by="idle_ms",
    chart="none",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    if not has_launches(intervals) or "host_gap_lo" not in intervals or windows.phases.empty:
        return pd.DataFrame(columns=COLUMNS)
    lo = intervals["host_gap_lo"].to_numpy(np.int64)
    rows = np.flatnonzero(lo >= 0)
    ph = windows.phases
    g, w, length = clip_to_windows(
        lo[rows],
        intervals["start"].to_numpy(np.int64)[rows],
        ph["lo"].to_numpy(np.int64),
        ph["hi"].to_numpy(np.int64),
    )
    keep = length > 0
    g, w = rows[g[keep]], w[keep]
    labels = {c: pd.Categorical(intervals[f"host_{c}"]) for c in ("family", "module", "op")}
    keys = [w] + [np.asarray(v.codes)[g] for v in labels.values()]
    # integer keys: the pieces summed by key, the labels go on the few rows
    got, ns = whole_sums(keys, length[keep])
    at = dict(zip(("win", *labels), got))
    out = pd.DataFrame(
        {
            "step": ph["step"].to_numpy()[at["win"]],
            "phase": ph["phase"].astype(str).to_numpy()[at["win"]],
            **{c: np.asarray(v.categories, dtype=object)[at[c]] for c, v in labels.items()},
            "idle_ms": ns / 1e6,
        }
    )
    out["module"] = np.where(out["module"] == "", "Other", out["module"])
    out["op"] = np.where(out["op"] == "", "(none)", out["op"])
    out = out.sort_values(KEYS, kind="stable", ignore_index=True)
    return out[COLUMNS]
