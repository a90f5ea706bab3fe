"""Tables XIV: memory copies per step and direction.

Per step and copy kind (the memcpy event name, e.g. ``Memcpy HtoD (Pinned -> Device)``, reduced
to its direction HtoD / DtoH / DtoD / HtoH / PtoP, and Memset; a name that says none, MTIA's
``dma_request``, takes its launching call's direction, ``enqueueCommand memcpyDtoHAsync``; else
Other):

* ``count``, ``time_ms`` (sum of durations), ``bytes`` (sum, where the trace records it),
* ``busy_ms``: measure of the union of these copies (``time_ms`` when they never overlap),
* ``percent``: busy_ms / step window x 100: the share of the step during which such a copy
  runs, at most 100.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.pipeline.intervals import measure_by
from tracekit.pipeline.state import categorical_take, codes_of
from tracekit.pipeline.windows import Windows

from ._common import NS_PER_MS, as_text, narrow, sums
from ._registry import BYTES, COUNT, MS, PCT, STEP_WINDOW, Ratio, register

#: The copy kinds (the ``kind`` column): directions, Memset, and Other for a name saying none.
KINDS = ["HtoD", "DtoH", "DtoD", "HtoH", "PtoP", "Memset", "Other"]
_DIRECTION = re.compile("(" + "|".join(KINDS[:5]) + ")")


def direction(name: str) -> str:
    m = _DIRECTION.search(name)
    return m.group(1) if m else ("Memset" if "memset" in name.lower() else "Other")


def _kinds(mem: pd.DataFrame) -> pd.Categorical:
    """Each copy's kind: its name's direction, else (a name saying none, MTIA's
    ``dma_request``) its launching call's (``enqueueCommand memcpyHtoDAsync``), else Other;
    computed once per distinct name and call."""
    codes, names = codes_of(mem["name"])
    kinds = np.array([direction(n) for n in names], dtype=object)
    if "runtime" not in mem.columns or not (kinds == "Other").any():
        return categorical_take(kinds, codes, np.arange(len(codes)), "")
    by_call, calls = codes_of(mem["runtime"])
    via = np.array([direction(n) for n in calls], dtype=object)
    out = np.where(kinds[codes] == "Other", via[by_call], kinds[codes])
    return pd.Categorical(out)


@register(
    "memcpy",
    title="Memory copies",
    paper="XIV",
    keys=("kind",),
    chart="none",
    values={"count": COUNT, "time_ms": MS, "busy_ms": MS, "bytes": BYTES, "percent": PCT},
    ratios={"percent": Ratio("busy_ms", STEP_WINDOW)},
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    cols = ["step", "kind", "count", "time_ms", "busy_ms", "bytes"]
    is_mem = intervals["group"].isin(["memcpy", "memset"]).to_numpy()
    mem = narrow(intervals, ["step", "name", "runtime", "start", "end", "count", "bytes"], is_mem)
    if mem.empty:
        return pd.DataFrame(columns=cols)
    frame = pd.DataFrame(
        {
            "step": mem["step"].to_numpy(),
            "kind": _kinds(mem),
            "start": mem["start"].to_numpy(),
            "end": mem["end"].to_numpy(),
            "dur": (mem["end"] - mem["start"]).to_numpy(),
            "count": mem["count"].to_numpy(),
            "bytes": mem["bytes"].fillna(0).to_numpy(),
        }
    )
    named = {"count": "count", "time_ns": "dur", "bytes": "bytes"}
    out = sums(frame, ["step", "kind"], named, observed=True)
    out["busy_ms"] = measure_by(frame, ["step", "kind"]).reindex(out.index).to_numpy() / NS_PER_MS
    out = as_text(out.reset_index(), ["kind"])
    out["time_ms"] = out["time_ns"] / NS_PER_MS
    out["bytes"] = out["bytes"].astype(float)
    return out[cols]
