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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._common import percent

BLOCKS = ["before", "attention", "ffn", "after"]


def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    cols = ["step", "block", "count", "time_ms", "percent"]
    blocks = intervals["block"].astype(str)
    if not blocks.isin(["attention", "ffn"]).any():
        return pd.DataFrame(columns=cols)
    st = steps.set_index("step")
    rows = []
    fwd = intervals[(intervals["window"] == "forward")]
    for step, iv in fwd.groupby("step", observed=True):
        if step not in st.index or not st.at[step, "complete"]:
            continue
        iv = iv.sort_values("start", kind="stable")
        lo, hi = int(st.at[step, "start"]), int(st.at[step, "t_backward"])
        starts = iv["start"].to_numpy()
        nxt = np.append(starts[1:], hi)
        span = (np.minimum(nxt, hi) - np.maximum(starts, lo)).clip(min=0) / 1e6
        b = iv["block"].astype(str).replace({"": "after"}).to_numpy()
        t = pd.Series(span).groupby(b).sum()
        n_layers = int(iv.loc[iv["block"].astype(str).isin(["attention", "ffn"]), "layer"].nunique())
        wall = (hi - lo) / 1e6
        for blk in BLOCKS:
            tm = float(t.get(blk, 0.0))
            rows.append({"step": step, "block": blk,
                         "count": n_layers if blk in ("attention", "ffn") else 1,
                         "time_ms": tm, "percent": float(percent(tm, wall))})
    return pd.DataFrame(rows, columns=cols)
