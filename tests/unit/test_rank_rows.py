"""analyses.ranks.per_rank is one vectorised pass over every rank's phases table: it must give
exactly what a group-by per rank gives (the reference below, the former implementation)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracekit.analyses.ranks import COLUMNS, SUMS, WINDOW_PHASES, per_rank


def reference(phases_by_rank: dict[int, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for rank, ph in sorted(phases_by_rank.items()):
        wall = ph.groupby("phase", observed=True)["wall_ms"].sum() if len(ph) else pd.Series(dtype=float)
        row: dict[str, float] = {"rank": rank}
        for p in WINDOW_PHASES:
            row[f"{p}_ms"] = float(wall.get(p, 0.0))
        row["step_ms"] = sum(row[f"{p}_ms"] for p in WINDOW_PHASES)
        for col, src in SUMS.items():
            row[col] = float(ph[src].sum()) if len(ph) and src in ph else 0.0
        rows.append(row)
    df = pd.DataFrame(rows, columns=["rank"] + COLUMNS)
    if not df["unattributed_ms"].any():
        df = df.drop(columns="unattributed_ms")
    mean, median = df["step_ms"].mean(), df["step_ms"].median()
    df["vs_mean_pct"] = (df["step_ms"] / mean - 1.0) * 100.0 if mean else 0.0
    df["vs_median_pct"] = (df["step_ms"] / median - 1.0) * 100.0 if median else 0.0
    return df


def test_per_rank_equals_a_group_by_per_rank():
    rng = np.random.default_rng(7)
    for _ in range(200):
        tables = {}
        for rank in rng.permutation(int(rng.integers(1, 12))):
            phases = [p for p in (*WINDOW_PHASES, "other") if rng.random() < 0.8]
            n = len(phases)
            labels = pd.Categorical(phases) if rng.random() < 0.5 else pd.Series(phases, dtype=str)
            df = pd.DataFrame(
                {
                    "phase": labels,
                    "wall_ms": rng.random(n) * 10,
                    "compute_ms": rng.random(n),
                    "exposed_comm_ms": np.where(rng.random(n) < 0.2, np.nan, rng.random(n)),
                    "idle_ms": rng.random(n),
                }
            )
            tables[int(rank)] = df.iloc[:0] if rng.random() < 0.1 else df
        pd.testing.assert_frame_equal(per_rank(tables), reference(tables), check_exact=True)


def test_per_rank_of_concatenated_rows_equals_per_rank():
    """The parent's fast path (every rank's phases gathered as one frame) gives the same rows."""
    from tracekit.analyses.ranks import per_rank_of_rows

    rng = np.random.default_rng(11)
    for _ in range(100):
        ranks = [int(r) for r in rng.permutation(int(rng.integers(1, 9)))]
        frames = []
        for _r in ranks:
            n = int(rng.integers(0, 5))
            phases = list(rng.choice([*WINDOW_PHASES, "other"], n))
            frames.append(
                pd.DataFrame(
                    {
                        "phase": pd.Categorical(phases, categories=[*WINDOW_PHASES, "other"]),
                        "wall_ms": rng.random(n),
                        "compute_ms": np.where(rng.random(n) < 0.2, np.nan, rng.random(n)),
                        "exposed_comm_ms": rng.random(n),
                        "idle_ms": rng.random(n),
                    }
                )
            )
        rows = pd.concat(frames, ignore_index=True)
        got = per_rank_of_rows(ranks, [len(f) for f in frames], rows)
        pd.testing.assert_frame_equal(got, per_rank(dict(zip(ranks, frames))), check_exact=True)


def test_unattributed_is_a_column_only_where_some_rank_has_it():
    """As the phases table shows the unattributed row only for a rank that has some, the ranks
    tables show its column and summary row only when some rank has such time (it read 0)."""
    from tracekit.analyses.ranks import summary

    def ph(unattributed: float) -> pd.DataFrame:
        return pd.DataFrame(
            {"phase": ["forward", "unattributed"], "wall_ms": [2.0, unattributed], "compute_ms": [1.0, 0.0]}
        )

    none = per_rank({0: ph(0.0), 1: ph(0.0)})
    assert "unattributed_ms" not in none and "unattributed" not in set(summary(none)["phase"])
    some = per_rank({0: ph(0.0), 1: ph(0.5)})
    assert some["unattributed_ms"].tolist() == [0.0, 0.5] and "unattributed" in set(summary(some)["phase"])
