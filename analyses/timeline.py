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
``percent`` is time_ms over the total of the step's rows (of its stage): the forward window,
so the rows add up to 100. The table is empty when the
trace has no decoder-layer modules.

Inference traces with stages (:mod:`tracekit.pipeline.stages`) get rows per step and ``stage``: a stage's
window runs from its first forward activity to its last one's end, and the table adds
``passes``: the forward passes of the model in that stage (a pass: one call of the outermost
module that holds the decoder layers; before/after are per pass), so ``count`` is layers per pass and
``time_ms`` is summed over the passes (divide by ``passes`` for one pass).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.pipeline.state import codes_of, distinct_rows
from tracekit.pipeline.windows import Windows

from ._common import narrow, text
from ._registry import COUNT, MS, PCT, STAGE_MEAN, Ratio, register
from ._stages import ORDER, has_stages

BLOCKS = ["before", "attention", "ffn", "after"]


@register(
    "timeline",
    title="Forward timeline",
    paper="XI",
    keys=("block",),
    chart="stacked",
    aggregate=STAGE_MEAN,
    values={"count": COUNT, "passes": COUNT, "time_ms": MS, "percent": PCT},
    ratios={"percent": Ratio("time_ms", "time_ms", within=("stage",))},
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    staged = has_stages(intervals)
    cols = (
        ["step"]
        + (["stage"] if staged else [])
        + ["block", "count"]
        + (["passes"] if staged else [])
        + ["time_ms"]
    )
    if not intervals["block"].isin(["attention", "ffn"]).any():
        return pd.DataFrame(columns=cols)
    fw = windows.phases
    fw = fw[fw["phase"] == "forward"].drop_duplicates("step").set_index("step")
    keep = (intervals["window"] == "forward").to_numpy() & intervals["step"].isin(fw.index).to_numpy()
    iv = narrow(intervals, ["step", "stage", "start", "end", "block", "layer", "fwd_pass"], keep)
    if iv.empty:
        return pd.DataFrame(columns=cols)
    g = _spans(iv, fw, staged)
    return _block_rows(g, staged)[cols]


def _spans(iv: pd.DataFrame, fw: pd.DataFrame, staged: bool) -> dict[str, Any]:
    """One row per activity, sorted by (step, stage, start) (ties in table order), with its
    group's window [lo, hi) and ``span_ms``: from its start to the next activity's start of its
    (step, stage) group (the last: to ``hi``), clipped to the window. Columns of arrays (the
    rows are only read by :func:`_block_rows`: no frame is built)."""
    if staged:  # position in ORDER (-1: a stage outside it), from the stages' codes
        codes, uniq = codes_of(iv["stage"])
        rank = pd.Index(ORDER).get_indexer([{"": "other"}.get(u, u) for u in uniq])[codes]
    else:
        rank = np.zeros(len(iv), np.int64)
    g: dict[str, Any] = {
        "step": iv["step"].to_numpy(),
        "stage_rank": rank,
        "start": iv["start"].to_numpy(np.int64),
        "end": iv["end"].to_numpy(np.int64),
        "block": text(iv["block"], {"": "after"}),
        "layer": iv["layer"].to_numpy(),
        "fwd_pass": iv["fwd_pass"].to_numpy() if "fwd_pass" in iv else np.zeros(len(iv), np.int64),
    }
    ok = np.flatnonzero(rank >= 0)  # a stage outside ORDER has no rows (as in analyses/_stages.split)
    at = ok[np.lexsort((np.arange(len(ok)), g["start"][ok], g["stage_rank"][ok], g["step"][ok]))]
    g = {k: v.take(at) for k, v in g.items()}
    step, rank, starts = g["step"], g["stage_rank"], g["start"]
    last = np.ones(len(step), bool)  # the last row of its (step, stage) group: groups are runs
    last[:-1] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])
    if staged and len(step):  # a stage's window: its first activity's start to its last one's end
        heads = np.append(0, np.flatnonzero(last[:-1]) + 1)
        size = np.diff(np.append(heads, len(step)))
        g["lo"] = np.repeat(np.minimum.reduceat(starts, heads), size)
        g["hi"] = np.repeat(np.maximum.reduceat(g["end"], heads), size)
    elif staged:
        g["lo"], g["hi"] = starts, g["end"]
    else:
        g["lo"] = fw["lo"].reindex(step).to_numpy(np.int64)
        g["hi"] = fw["hi"].reindex(step).to_numpy(np.int64)
    hi = g["hi"]
    nxt = np.where(last, hi, np.append(starts[1:], 0))
    g["span_ms"] = (np.minimum(nxt, hi) - np.maximum(starts, g["lo"])).clip(min=0) / 1e6
    return g


def _block_rows(g: dict[str, Any], staged: bool) -> pd.DataFrame:
    """Per (step, stage) group: one row per block of ``BLOCKS`` (time_ms summed in start order,
    count of decoder layers per pass (distinct layer indices), passes, percent of the group's
    window). ``g`` is sorted by its groups: each group's rows are one run."""
    step, rank = g["step"], g["stage_rank"]
    head = np.ones(len(step), bool)
    head[1:] = (step[1:] != step[:-1]) | (rank[1:] != rank[:-1])
    gid, heads = np.cumsum(head) - 1, np.flatnonzero(head)
    n = len(heads)
    codes, uniq = codes_of(pd.Series(g["block"]))
    pos = pd.Index(BLOCKS).get_indexer(uniq)[codes]  # the row's place in BLOCKS (-1: none)
    in_layer = (pos == BLOCKS.index("attention")) | (pos == BLOCKS.index("ffn"))
    n_layers = _distinct_per_group(gid[in_layer], g["layer"][in_layer], n)
    if staged:
        passes = np.maximum(_distinct_per_group(gid[in_layer], g["fwd_pass"][in_layer], n), 1)
    else:
        passes = np.ones(n, np.int64)
    # Summed by pandas' group-by (its compensated sum, in row order), on one integer key.
    ok = pos >= 0
    key = gid[ok] * len(BLOCKS) + pos[ok]
    summed = pd.Series(g["span_ms"][ok]).groupby(key, sort=False).sum()
    time_ms = np.zeros(n * len(BLOCKS))
    time_ms[summed.index.to_numpy(np.int64)] = summed.to_numpy()
    out = pd.DataFrame(
        {
            "step": np.repeat(step[heads], len(BLOCKS)),
            "stage_rank": np.repeat(rank[heads], len(BLOCKS)),
            "block": np.tile(np.array(BLOCKS, dtype=object), n),
        }
    )
    out["stage"] = np.array(ORDER, dtype=object)[out["stage_rank"].to_numpy()] if staged else None
    out["time_ms"] = time_ms
    per_layer = np.array([b in ("attention", "ffn") for b in BLOCKS] * n)
    # `layer` is the decoder layer's index (the same in every pass): distinct indices per pass
    out["count"] = np.where(per_layer, np.repeat(n_layers, len(BLOCKS)), 1).astype(np.int64)
    out["passes"] = np.repeat(passes, len(BLOCKS)).astype(np.int64)
    return out


def _distinct_per_group(gid: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Per group 0..n-1, the number of distinct ``values`` of its rows (``nunique``)."""
    ok = ~pd.isna(values)
    gid, values = gid[ok], values[ok]
    first = distinct_rows(gid, values)[1]
    return np.bincount(gid[first], minlength=n).astype(np.int64)
