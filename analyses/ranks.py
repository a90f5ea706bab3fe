"""Cross-rank table: how the phases of a step vary over the ranks of one job.

Input: each rank's ``phases`` table (mean per complete step). Two tables:

* ``ranks``: one row per rank: ``forward_ms``, ``backward_ms``, ``optimizer_ms`` (phase wall
  times on that rank's device timeline), ``step_ms`` (their sum, the step's GPU window) and
  ``vs_mean_pct`` (how much longer than the mean step this rank's step is, in percent);
* ``rank_summary``: one row per phase (and ``step``): ``mean_ms``, ``min_ms``, ``max_ms`` over
  ranks, the ``fastest_rank`` and ``slowest_rank``, and by how much the slowest exceeds the
  mean (``slowest_over_mean_ms``, ``slowest_over_mean_pct``) and the fastest
  (``spread_ms`` = max - min).

In a synchronous data-parallel job every rank waits for the slowest one at each collective, so
the slowest rank and its excess over the mean is where the job's time goes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ._common import PHASES

COLUMNS = [f"{p}_ms" for p in PHASES] + ["step_ms"]


def per_rank(phases_by_rank: dict[int, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for rank, ph in sorted(phases_by_rank.items()):
        wall = ph.groupby("phase", observed=True)["wall_ms"].sum() if len(ph) else pd.Series(dtype=float)
        row = {"rank": rank}
        for p in PHASES:
            row[f"{p}_ms"] = float(wall.get(p, 0.0))
        row["step_ms"] = sum(row[f"{p}_ms"] for p in PHASES)
        rows.append(row)
    df = pd.DataFrame(rows, columns=["rank"] + COLUMNS)
    mean = df["step_ms"].mean() if len(df) else np.nan
    df["vs_mean_pct"] = (df["step_ms"] / mean - 1.0) * 100.0 if mean else 0.0
    return df


def summary(ranks: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for col in COLUMNS:
        v = ranks[col]
        if v.empty:
            continue
        mean = float(v.mean())
        slow = int(ranks["rank"].iloc[int(np.argmax(v.to_numpy()))])
        fast = int(ranks["rank"].iloc[int(np.argmin(v.to_numpy()))])
        mx, mn = float(v.max()), float(v.min())
        rows.append({
            "phase": col[:-3], "ranks": len(v), "mean_ms": mean, "min_ms": mn, "max_ms": mx,
            "fastest_rank": fast, "slowest_rank": slow,
            "slowest_over_mean_ms": mx - mean,
            "slowest_over_mean_pct": (mx / mean - 1.0) * 100.0 if mean else 0.0,
            "spread_ms": mx - mn,
        })
    return pd.DataFrame(rows, columns=["phase", "ranks", "mean_ms", "min_ms", "max_ms",
                                       "fastest_rank", "slowest_rank", "slowest_over_mean_ms",
                                       "slowest_over_mean_pct", "spread_ms"])


def tables(phases_by_rank: dict[int, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    r = per_rank(phases_by_rank)
    return {"ranks": r, "rank_summary": summary(r)}
