"""Attribute: give every activity of a step exactly one label of each kind.

Input: a :class:`~tracekit.link.LinkedTrace`. Output: an :class:`Attributed` with

* ``intervals``: one row per activity in a complete step: ``step``, ``phase`` (by launching op),
  ``window`` (the phase wall window it starts in), and the labels of
  :func:`tracekit.labels.assign_categories`: ``group`` (compute / comm / memcpy / memset),
  ``kernel_category`` and its ``rule``, ``collective``, ``module`` (paper category) and its
  ``module_rule``, ``block`` (timeline), ``layer``;
  ``is_gemm``, ``stream``, times, and ``share_<phase>``: its exclusive share of busy time inside
  each phase window (compute first, then communication, then memory traffic; concurrent
  activities of one level split an instant equally).
* ``steps``: per step its GPU (or CPU) window and the phase boundaries.

Tables in ``tracekit.analyses`` are group-bys and interval measures over these two frames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .intervals import ShareClock
from .labels import assign_categories, other_share
from .link import LinkedTrace
from .stages import pass_index
from .taxonomy import KernelRules, ModuleTaxonomy

PHASES = ["forward", "backward", "optimizer"]
GROUP_LEVEL = {"compute": 0, "comm": 1, "memcpy": 2, "memset": 2}


@dataclass
class Attributed:
    path: str
    mode: str
    intervals: pd.DataFrame
    steps: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def attribute(linked: LinkedTrace, taxonomy: ModuleTaxonomy, rules: KernelRules) -> Attributed:
    a = linked.activities
    warnings = list(linked.warnings)
    lab = assign_categories(linked, taxonomy, rules)
    group, kcat = lab["group"].to_numpy(), lab["kernel_category"].to_numpy()
    iv = pd.DataFrame({
        "step": a["step"].to_numpy(),
        "start": a["start"].to_numpy(), "end": a["end"].to_numpy(),
        "name": a["name"], "op": a["op"], "stream": a["stream"].to_numpy(),
        "phase": a["phase"], "stage": a["stage"],
        **{c: lab[c].to_numpy() for c in lab.columns},
        "fwd_pass": pass_index(linked.modules, a["launch_ts"].to_numpy()),
        "is_gemm": (group == "compute") & (kcat == "GEMM"),
        "bytes": a["bytes"].to_numpy(),
    })
    iv = iv[iv["step"] >= 0]
    steps, iv = _step_windows(iv, linked, warnings)
    iv = _shares(iv, steps)
    for c in ("group", "kernel_category", "rule", "collective", "module", "module_rule", "block"):
        iv[c] = iv[c].astype("category")
    meta = dict(linked.meta)
    meta["steps"] = steps["step"].tolist()
    meta["complete_steps"] = steps.loc[steps["complete"], "step"].tolist()
    meta["kernel_other_share"] = other_share(iv)
    return Attributed(path=linked.path, mode=linked.mode, intervals=iv.reset_index(drop=True),
                      steps=steps, meta=meta, warnings=warnings)


def _step_windows(iv: pd.DataFrame, linked: LinkedTrace, warnings: list[str]):
    g = iv.groupby("step")
    steps = pd.DataFrame({"start": g["start"].min(), "end": g["end"].max(),
                          "activities": g.size()})
    # Boundaries collapse onto the next one when a phase is absent (int64 throughout: epoch
    # nanoseconds do not survive a trip through float64).
    end = steps["end"].to_numpy(np.int64)
    firsts = {}
    for ph in ("backward", "optimizer"):
        t = iv[iv["phase"] == ph].groupby("step")["start"].min().reindex(steps.index)
        firsts[ph] = np.where(t.isna(), -1, t.fillna(0).astype(np.int64).to_numpy() if len(t) else 0)
    t_opt = np.where(firsts["optimizer"] >= 0, firsts["optimizer"], end)
    t_bwd = np.where(firsts["backward"] >= 0, np.minimum(firsts["backward"], t_opt), t_opt)
    steps["t_backward"] = t_bwd.astype(np.int64)
    steps["t_optimizer"] = t_opt.astype(np.int64)
    steps = steps.reset_index()
    # Complete steps: the window of ProfilerStep ranges cut off by the profiling window, or empty
    # of activity while their neighbours are busy, are left out of the means.
    steps["complete"] = True
    if len(steps) >= 3:
        med = float(np.median(steps["end"] - steps["start"]))
        dur = (steps["end"] - steps["start"]).to_numpy()
        cut = np.zeros(len(steps), bool)
        cut[[0, -1]] = dur[[0, -1]] < 0.1 * med
        steps.loc[cut, "complete"] = False
        if cut.any():
            warnings.append("steps " + ", ".join(str(s) for s in steps.loc[cut, "step"]) +
                            " look cut by the profiling window (under 10% of the median step); "
                            "left out of the means")
    iv = iv[iv["step"].isin(steps.loc[steps["complete"], "step"])]
    return steps, iv


def _shares(iv: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """Add ``window`` and ``share_<phase>`` columns: exclusive busy-time shares per window."""
    iv = iv.copy()
    level = iv["group"].map(GROUP_LEVEL).to_numpy()
    for ph in PHASES:
        iv[f"share_{ph}"] = 0.0
    iv["window"] = ""
    st = steps.set_index("step")
    cols = [iv.columns.get_loc(f"share_{ph}") for ph in PHASES]
    win_col = iv.columns.get_loc("window")
    for step, idx in iv.groupby("step").indices.items():
        if step not in st.index:
            continue
        row = st.loc[step]
        s = iv["start"].to_numpy()[idx]
        e = iv["end"].to_numpy()[idx]
        clock = ShareClock(s, e, level[idx])
        bounds = [int(row["start"]), int(row["t_backward"]), int(row["t_optimizer"]), int(row["end"])]
        for k, c in enumerate(cols):
            iv.iloc[idx, c] = clock.shares(bounds[k], bounds[k + 1])
        w = np.where(s < bounds[1], "forward", np.where(s < bounds[2], "backward", "optimizer"))
        iv.iloc[idx, win_col] = w
    return iv
