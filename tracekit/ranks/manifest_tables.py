"""Tables read from a capture manifest instead of from the trace (``TableSpec.from_manifest``).

``tracekit capture`` writes ``manifest.json`` beside its traces; some figures (the wall time,
throughput and peak memory of each step, :mod:`tracekit.analyses.throughput`) are measured by the
capture loop and exist only there. :func:`rows`: Needs: the analysed path, its ranks and the
``--steps`` filter. Adds: the table's rows, one per rank and step. :func:`table`: Guarantees:
the same shape as every other table (per step, or each rank's reported rows; a ``rank`` column
only when several ranks are analysed); empty when the path is no capture directory.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tracekit.aggregate import whole_numbers
from tracekit.analyses import TableSpec

from .grouping import read_manifest


def rows(spec: TableSpec, path: str, ranks: list[int], steps: tuple[int, ...] | None) -> pd.DataFrame:
    """``spec``'s rows from the manifest of directory ``path``, of ``ranks`` (and ``steps``)."""
    doc = read_manifest(Path(path)) if spec.from_manifest is not None and Path(path).is_dir() else None
    if doc is None or spec.from_manifest is None:
        return pd.DataFrame()
    out = spec.from_manifest(doc)
    if out.empty:
        return out
    keep = out["rank"].isin(ranks)
    if steps is not None:
        keep &= out["step"].isin(steps)
    return out[keep.to_numpy()].reset_index(drop=True)


def table(spec: TableSpec, per_step_rows: pd.DataFrame, per_step: bool, multi_rank: bool) -> pd.DataFrame:
    """The table from its rows: per step, or each rank's ``spec.summary`` of its steps."""
    out = per_step_rows
    if out.empty:
        return pd.DataFrame()
    if not per_step and spec.summary is not None:
        parts = [
            spec.summary(g.drop(columns=["rank", "step"])).assign(rank=r) for r, g in out.groupby("rank")
        ]
        out = pd.concat(parts, ignore_index=True)
        out = out[["rank", *(c for c in out.columns if c != "rank")]]
    if not multi_rank:
        out = out.drop(columns=["rank"])
    return whole_numbers(spec, out.reset_index(drop=True))
