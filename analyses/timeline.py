"""Table XI: the forward timeline, before / N x attention / N x FFN / after.

The forward window of each step is cut at the start of every device activity launched in it;
the time from one activity's start to the next one's (the last: to the end of the forward
window) goes to the block of the op that launched it:

* ``before``: before the first decoder layer (embedding, rotary tables, masks);
* ``attention``: a decoder layer from its start to its FFN (input norm, projections, RoPE,
  attention, output projection, residual);
* ``ffn``: from the post-attention norm (or the MLP) to the layer's end;
* ``after``: after the last layer (final norm, LM head, sampling, loss).

``count`` is the number of decoder layers seen in the step for attention and ffn, 1 otherwise;
``percent`` is of the forward window, so the rows add up to 100. The table is empty when the
trace has no decoder-layer modules.

Inference traces with stages (:mod:`tracekit.stages`) get rows per step and ``stage``: a stage's
window runs from its first forward activity to its last one's end, and the table adds
``passes``: the forward passes of the model in that stage (a pass: one call of the outermost
module that holds the decoder layers; before/after are per pass), so ``count`` is layers per pass and
``time_ms`` is summed over the passes (divide by ``passes`` for one pass).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._common import percent, phase_windows
from ._registry import COUNT, MS, PCT, STAGE_MEAN, register
from ._stages import has_stages, split

BLOCKS = ["before", "attention", "ffn", "after"]


@register(
    "timeline",
    title="Forward timeline",
    paper="XI",
    keys=("block",),
    chart="stacked",
    aggregate=STAGE_MEAN,
    values={"count": COUNT, "passes": COUNT, "time_ms": MS, "percent": PCT},
)
def table(intervals: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    staged = has_stages(intervals)
    cols = (
        ["step"]
        + (["stage"] if staged else [])
        + ["block", "count"]
        + (["passes"] if staged else [])
        + ["time_ms", "percent"]
    )
    blocks = intervals["block"].astype(str)
    if not blocks.isin(["attention", "ffn"]).any():
        return pd.DataFrame(columns=cols)
    fw = phase_windows(windows)
    fw = fw[fw["phase"] == "forward"].set_index("step")
    rows = []
    fwd = intervals[(intervals["window"] == "forward")]
    for step, iv in fwd.groupby("step", observed=True):
        if step not in fw.index:
            continue
        for stage, part in split(iv, staged):
            part = part.sort_values("start", kind="stable")
            if stage is None:
                lo, hi = int(fw.at[step, "lo"]), int(fw.at[step, "hi"])
            else:
                lo, hi = int(part["start"].min()), int(part["end"].max())
            for r in _rows(part, lo, hi, staged):
                rows.append({"step": step, **({"stage": stage} if staged else {}), **r})
    return pd.DataFrame(rows, columns=cols)


def _rows(iv: pd.DataFrame, lo: int, hi: int, staged: bool) -> list[dict]:
    """Block rows for activities ``iv`` (sorted by start) over the window [lo, hi)."""
    starts = iv["start"].to_numpy()
    nxt = np.append(starts[1:], hi)
    span = (np.minimum(nxt, hi) - np.maximum(starts, lo)).clip(min=0) / 1e6
    b = iv["block"].astype(str).replace({"": "after"}).to_numpy()
    t = pd.Series(span).groupby(b).sum()
    n_layers = int(iv.loc[iv["block"].astype(str).isin(["attention", "ffn"]), "layer"].nunique())
    lay = iv["block"].astype(str).isin(["attention", "ffn"]).to_numpy()
    passes = max(int(iv.loc[lay, "fwd_pass"].nunique()), 1) if staged and "fwd_pass" in iv else 1
    wall = (hi - lo) / 1e6
    rows = []
    for blk in BLOCKS:
        tm = float(t.get(blk, 0.0))
        r = {"block": blk, "count": n_layers if blk in ("attention", "ffn") else 1}
        if staged:
            r["passes"] = passes
        rows.append({**r, "time_ms": tm, "percent": float(percent(tm, wall))})
    return rows
