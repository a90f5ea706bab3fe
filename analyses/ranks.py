"""Cross-rank tables: how one job's ranks differ, readable at hundreds of ranks.

Input: each rank's ``phases`` table (mean per complete step). Two tables:

* ``ranks``: one row per rank: ``forward_ms``, ``backward_ms``, ``unattributed_ms`` (only when
  some rank has unattributed time, as the phases table shows that row), ``optimizer_ms``
  (phase wall times on that rank's device timeline), ``step_ms`` (their sum, the step's device
  window),
  ``compute_ms`` (compute-kernel time), ``exposed_comm_ms`` (communication nothing hides),
  ``idle_ms`` (no device activity), and ``vs_mean_pct`` / ``vs_median_pct``: how much longer
  than the mean / median step this rank's step is, in percent;
* ``rank_summary``: one row per measure (the phases, ``step``, ``compute``, ``exposed_comm``,
  ``idle``; column ``phase``): ``mean_ms``, ``min_ms``, ``median_ms``, ``max_ms`` over ranks,
  the ``fastest_rank`` and ``slowest_rank``, the slowest's excess over the mean
  (``slowest_over_mean_ms``, ``slowest_over_mean_pct``), ``spread_ms`` = max - min, and
  ``stragglers``: up to 5 ranks above the median by more than the straggler threshold
  (:func:`stragglers`), largest first, as ``rank (+pct%)``; ``none`` when no rank is.

In a synchronous data-parallel job every rank waits for the slowest one at each collective, so
the slowest rank and its excess over the mean is where the job's time goes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ._common import WINDOW_PHASES
from ._registry import COUNT, INDEX, MS, PCT, TableSpec, declare

#: Phase walls (``unattributed``: time with no phase evidence) and their sum, the step window.
PHASE_COLUMNS = [f"{p}_ms" for p in WINDOW_PHASES] + ["step_ms"]
SUMS = {"compute_ms": "compute_ms", "exposed_comm_ms": "exposed_comm_ms", "idle_ms": "idle_ms"}
COLUMNS = PHASE_COLUMNS + list(SUMS)
#: A straggler is above the median by more than both this fraction of the median and
#: three (scaled) median absolute deviations: robust to a few slow ranks among many.
STRAGGLER_MIN_FRACTION = 0.02
MAX_NAMED = 5


def per_rank(phases_by_rank: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """One row per rank from its phases table: vectorised over ranks (one pass over all ranks'
    rows, not a group-by per rank: the parent of hundreds of ranks does this serially)."""
    ranks = sorted(phases_by_rank)
    frames = [phases_by_rank[r] for r in ranks]
    labels = [f["phase"].astype(str).to_numpy() for f in frames if len(f)]
    phase = np.concatenate(labels) if labels else np.empty(0, str)

    def column(col: str) -> np.ndarray:
        vals = [f[col].to_numpy(dtype=float) if col in f else np.zeros(len(f)) for f in frames]
        return np.concatenate(vals or [np.empty(0)])

    return _per_rank(ranks, [len(f) for f in frames], phase, column)


def per_rank_of_rows(ranks: list[int], lengths: list[int], rows: pd.DataFrame) -> pd.DataFrame:
    """:func:`per_rank` of the ranks' phases tables given concatenated (``rows``; rank
    ``ranks[i]`` has the next ``lengths[i]`` rows), every column present in each."""
    order = np.argsort(ranks, kind="stable")
    starts = np.concatenate([[0], np.cumsum(lengths)])[:-1].astype(np.int64)
    take = np.concatenate([np.arange(starts[i], starts[i] + lengths[i]) for i in order] or [np.empty(0, int)])
    phase = rows["phase"].astype(str).to_numpy()[take] if len(take) else np.empty(0, str)

    def column(col: str) -> np.ndarray:
        return rows[col].to_numpy(dtype=float)[take] if col in rows else np.zeros(len(take))

    return _per_rank([ranks[i] for i in order], [lengths[i] for i in order], phase, column)


def _per_rank(ranks: list[int], lengths: list[int], phase: np.ndarray, column: Any) -> pd.DataFrame:
    """The rows of :func:`per_rank` from every rank's rows in rank order: ``phase`` labels and
    ``column(name)`` values (float, NaN counted as 0), ``lengths[i]`` rows for ``ranks[i]``."""
    at = np.repeat(np.arange(len(ranks)), lengths)

    def summed(col: str, keep: np.ndarray | None = None) -> np.ndarray:
        """Per rank, the sum of ``col`` over its rows (``keep`` only), NaN skipped."""
        v = np.nan_to_num(column(col), nan=0.0)
        if keep is not None:
            at_, v = at[keep], v[keep]
        else:
            at_ = at
        return np.bincount(at_, weights=v, minlength=len(ranks)).astype(float)

    data: dict[str, np.ndarray] = {"rank": np.asarray(ranks, dtype=np.int64)}
    for p in WINDOW_PHASES:
        data[f"{p}_ms"] = summed("wall_ms", phase == p)
    step = np.zeros(len(ranks))
    for p in WINDOW_PHASES:  # in this order, as the phases add up
        step = step + data[f"{p}_ms"]
    data["step_ms"] = step
    for col, src in SUMS.items():
        data[col] = summed(src)
    df = pd.DataFrame(data, columns=["rank"] + COLUMNS)
    if not df["unattributed_ms"].any():  # no rank has any: no column (and no summary row)
        df = df.drop(columns="unattributed_ms")
    mean = df["step_ms"].mean() if len(df) else np.nan
    median = df["step_ms"].median() if len(df) else np.nan
    df["vs_mean_pct"] = (df["step_ms"] / mean - 1.0) * 100.0 if mean else 0.0
    df["vs_median_pct"] = (df["step_ms"] / median - 1.0) * 100.0 if median else 0.0
    return df


def stragglers(ranks: pd.Series, values: pd.Series) -> list[tuple[int, float]]:
    """(rank, percent above the median) of the ranks far above the median, largest first."""
    v = values.to_numpy(dtype=float)
    med = float(np.median(v))
    mad = 1.4826 * float(np.median(np.abs(v - med)))
    limit = med + max(3 * mad, STRAGGLER_MIN_FRACTION * abs(med))
    order = np.argsort(-v, kind="stable")
    return [
        (int(ranks.iloc[i]), (v[i] / med - 1) * 100 if med else 0.0)
        for i in order
        if v[i] > limit and v[i] > 0
    ]


def straggler_text(named: list[tuple[int, float]]) -> str:
    """``3 (+12.0%), 7 (+4.1%)``: up to :data:`MAX_NAMED` ranks, then how many more; ``none``
    when no rank is a straggler (a cell never reads empty, in any output)."""
    if not named:
        return "none"
    text = ", ".join(f"{r} (+{p:.1f}%)" for r, p in named[:MAX_NAMED])
    return text + (f" and {len(named) - MAX_NAMED} more" if len(named) > MAX_NAMED else "")


def summary(ranks: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for col in [c for c in COLUMNS if c in ranks.columns]:
        v = ranks[col]
        if v.empty:
            continue
        mean = float(v.mean())
        slow = int(ranks["rank"].iloc[int(np.argmax(v.to_numpy()))])
        fast = int(ranks["rank"].iloc[int(np.argmin(v.to_numpy()))])
        mx, mn = float(v.max()), float(v.min())
        named = stragglers(ranks["rank"], v)
        rows.append(
            {
                "phase": col[:-3],
                "ranks": len(v),
                "mean_ms": mean,
                "min_ms": mn,
                "median_ms": float(v.median()),
                "max_ms": mx,
                "fastest_rank": fast,
                "slowest_rank": slow,
                "slowest_over_mean_ms": mx - mean,
                "slowest_over_mean_pct": (mx / mean - 1.0) * 100.0 if mean else 0.0,
                "spread_ms": mx - mn,
                "stragglers": straggler_text(named),
            }
        )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


SUMMARY_COLUMNS = [
    "phase",
    "ranks",
    "mean_ms",
    "min_ms",
    "median_ms",
    "max_ms",
    "fastest_rank",
    "slowest_rank",
    "slowest_over_mean_ms",
    "slowest_over_mean_pct",
    "spread_ms",
    "stragglers",
]


def tables(phases_by_rank: dict[int, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    r = per_rank(phases_by_rank)
    return {"ranks": r, "rank_summary": summary(r)}


def tables_of_rows(ranks: list[int], lengths: list[int], rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """:func:`tables` of the phases tables given concatenated (:func:`per_rank_of_rows`)."""
    r = per_rank_of_rows(ranks, lengths, rows)
    return {"ranks": r, "rank_summary": summary(r)}


declare(
    TableSpec(
        name="rank_summary",
        title="Ranks: spread and stragglers",
        func=None,
        cross_rank=True,
        keys=("phase",),
        chart="none",
        aggregate="per-rank",
        values={
            "ranks": COUNT,
            "mean_ms": MS,
            "min_ms": MS,
            "median_ms": MS,
            "max_ms": MS,
            "fastest_rank": INDEX,
            "slowest_rank": INDEX,
            "slowest_over_mean_ms": MS,
            "slowest_over_mean_pct": PCT,
            "spread_ms": MS,
        },
    )
)
declare(
    TableSpec(
        name="ranks",
        title="Per rank",
        func=None,
        cross_rank=True,
        keys=("rank",),
        chart="stacked",
        aggregate="per-rank",
        top=16,
        sort_by="step_ms",
        values={**dict.fromkeys(COLUMNS, MS), "vs_mean_pct": PCT, "vs_median_pct": PCT},
    )
)
