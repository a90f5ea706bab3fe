"""Per-layer time: compute-kernel time of each transformer decoder layer, per phase.

The ``layer`` column of the labelled intervals is the decoder layer's index, assigned once by
the pipeline (:func:`tracekit.pipeline.modules.layer_index`): ``layers.N`` from the module's
qualified name when the capture records names, else the layer's position among the decoder
layers of its model pass. Backward kernels carry the layer of their creator forward op;
recomputed forward work (activation checkpointing, the ``recompute`` column) carries the layer
it reruns and is its own ``recompute`` row.

``layers`` per step, phase and layer index:

* ``count``: compute kernels; ``time_ms``: sum of their durations, over the step's passes;
* ``vs_mean_pct``: (time_ms - mean over the phase's layers) / that mean x 100: a slow layer
  stands out.

``layer_spread`` per step and phase: ``layers`` (how many), ``mean_ms``, ``min_ms``, ``max_ms``
over layers, the ``slowest_layer`` and ``slowest_over_mean_pct``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import categorical_take, codes_of
from tracekit.pipeline.windows import Windows

from ._common import as_text, narrow, text
from ._frames import place, rebuilt, stable_order
from ._groups import flat_sums
from ._registry import COUNT, INDEX, MS, PCT, TableSpec, declare, register
from ._stages import ORDER as STAGE_ORDER
from ._stages import has_stages

PHASE_ORDER = ["forward", "recompute", "backward", "optimizer", "unattributed"]


def _groups(df: pd.DataFrame) -> list[str]:
    return [c for c in ("rank", "step", "stage", "phase") if c in df.columns]


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """``vs_mean_pct`` (from each group's mean, pandas' group mean) and the rows by step,
    stage, phase (:data:`PHASE_ORDER`) and layer, on the columns' arrays."""
    mean = df.groupby(_groups(df), observed=True, sort=False)["time_ms"].transform("mean").to_numpy()
    vs = np.where(mean > 0, (df["time_ms"].to_numpy() / np.where(mean > 0, mean, 1.0) - 1) * 100, 0.0)
    keys = [df[c].to_numpy() for c in ("rank", "step") if c in df.columns]
    if "stage" in df.columns:
        keys.append(place(df["stage"], STAGE_ORDER))
    keys += [place(df["phase"], PHASE_ORDER), df["layer"].to_numpy()]
    shown = [*df.columns, *(["vs_mean_pct"] if "vs_mean_pct" not in df.columns else [])]
    return rebuilt(df, {"vs_mean_pct": vs}, stable_order(keys, len(df)), shown)


@register(
    "layers",
    title="Time per decoder layer",
    keys=("phase", "layer"),
    compare="time_ms",
    values={"count": COUNT, "time_ms": MS, "vs_mean_pct": PCT},
    finish=_finish,
    filters=frozenset({"phase", "module"}),
    aggregate="stage-mean",
    chart="bar",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    staged = has_stages(intervals)
    keys = ["step"] + (["stage"] if staged else []) + ["phase", "layer"]
    cols = keys + ["count", "time_ms", "vs_mean_pct"]
    complete = windows.steps["step"].unique()
    keep = (intervals["group"] == "compute").to_numpy() & intervals["step"].isin(complete).to_numpy()
    keep &= (intervals["layer"] >= 0).to_numpy()
    used = ["step", "stage", "phase", "layer", "recompute", "start", "end", "count"]
    iv = narrow(intervals, used, keep)
    if iv.empty:
        return pd.DataFrame(columns=cols)
    codes, uniq = codes_of(iv["phase"])
    uniq = np.array([{"": "unattributed"}.get(u, u) for u in uniq] + ["recompute"], dtype=object)
    if "recompute" in iv.columns:  # activation recomputation: its own row, as in DESIGN.md
        codes = np.where(iv["recompute"].fillna(False).to_numpy(bool), len(uniq) - 1, codes)
    phase = categorical_take(uniq, codes, np.arange(len(codes)), "")
    frame = pd.DataFrame(
        {
            "step": iv["step"].to_numpy(),
            "phase": phase,
            "layer": iv["layer"].to_numpy(np.int64),
            "dur": (iv["end"] - iv["start"]).to_numpy() / 1e6,
            "count": iv["count"].to_numpy(),
        }
    )
    if staged:
        frame["stage"] = text(iv["stage"], {"": "other"})
    out = flat_sums(frame, keys, {"count": "count", "time_ms": "dur"}, sort=False)
    out = as_text(out, ["phase", "stage"])
    out["count"] = out["count"].astype("int64")
    return _finish(out)[cols]


def spread(layers: pd.DataFrame) -> pd.DataFrame:
    """Per phase (and step/stage/rank where present): mean/min/max over layers, the slowest.
    Groups in order of first appearance (pandas' ``sort=False`` numbering); each group's
    times in row order, so its mean is the one pandas' loop over groups gave, bit for bit
    (a 1,000-rank run has thousands of groups: a loop over numpy slices, not over frames)."""
    groups = _groups(layers)
    cols = groups + ["layers", "mean_ms", "min_ms", "max_ms", "slowest_layer", "slowest_over_mean_pct"]
    if layers.empty:
        return pd.DataFrame(columns=cols)
    gid = layers.groupby(groups, observed=True, sort=False).ngroup().to_numpy()
    kept = np.flatnonzero(gid >= 0)  # a row with a missing key is in no group
    order = kept[np.argsort(gid[kept], kind="stable")]
    cut = np.flatnonzero(np.diff(gid[order])) + 1
    time = layers["time_ms"].to_numpy(dtype=float)
    layer = layers["layer"].to_numpy()
    keys = [layers[c].to_numpy() for c in groups]
    rows = []
    for idx in np.split(order, cut) if len(order) else []:
        t = time[idx]
        mean = float(t.mean())
        rows.append(
            {
                **{c: k[idx[0]] for c, k in zip(groups, keys)},
                "layers": len(idx),
                "mean_ms": mean,
                "min_ms": float(t.min()),
                "max_ms": float(t.max()),
                "slowest_layer": int(layer[idx[int(np.argmax(t))]]),
                "slowest_over_mean_pct": (float(t.max()) / mean - 1) * 100 if mean > 0 else 0.0,
            }
        )
    return pd.DataFrame(rows, columns=cols)


declare(
    TableSpec(
        name="layer_spread",
        title="Spread across decoder layers",
        func=None,
        source="layers",
        derive=spread,
        keys=("phase",),
        chart="none",
        values={
            "layers": COUNT,
            "mean_ms": MS,
            "min_ms": MS,
            "max_ms": MS,
            "slowest_layer": INDEX,
            "slowest_over_mean_pct": PCT,
        },
    )
)
