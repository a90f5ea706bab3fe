"""The collectives across a run's ranks: each rank's instances gathered, matched once.

Each rank's worker computes its collective instances (:func:`tracekit.analyses.collectives.instances`,
one small row per instance, kept as ``("instances", "collectives", rank)`` beside its tables);
the parent concatenates them, compact, and :func:`tracekit.analyses.cross_rank.tables` matches
them in one vectorised pass. Needs: a run (``Analysis``) with ``ranks``, ``_computed``,
``_instances``. Guarantees: the matching runs at most once per run; on one rank, nothing is
matched and meta says that waits need the other ranks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyses import cross_rank
from tracekit.analyses.collectives import INSTANCE_COLUMNS

#: The tables the cross-rank collectives stage gives.
NAMES = ("collectives", "stragglers", "collective_matches")
SINGLE_RANK = (
    "collectives: one rank only, so wait_ms and transfer_ms are left empty: telling waiting "
    "from moving bytes needs the other ranks' traces"
)


def wanted(run: Any) -> bool:
    """Whether the run has any of the collectives' cross-rank tables."""
    return any(n in run.names() for n in NAMES)


def all_instances(run: Any) -> pd.DataFrame:
    """Every rank's instances, one frame with a ``rank`` column."""
    ranks = list(run.ranks)
    whole = run._computed.concat("instances", "collectives", ranks)
    if whole is not None:
        frame, lengths = whole
        return frame.assign(rank=np.repeat(np.asarray(ranks, np.int64), lengths))
    parts = [run._instances(r).assign(rank=r) for r in ranks]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=[*INSTANCE_COLUMNS, "rank"])
    return pd.concat(parts, ignore_index=True)


def cross(run: Any) -> tuple[dict[str, pd.DataFrame], dict]:
    """The cross-rank collectives tables and their meta, computed once per run."""
    key = ("cross", "collectives", -1)
    if key not in run._computed:
        run._computed[key] = cross_rank.tables(all_instances(run))
    return run._computed[key]


def meta(run: Any) -> tuple[dict, list[str]]:
    """``clock_offsets_ms`` (several ranks) and the notices: one rank's waits, unknown sizes."""
    if "collectives" not in run.names():
        return {}, []
    table = run.table("collectives")
    if table.empty:
        return {}, []
    out: dict = {}
    notices: list[str] = []
    if run.multi_rank:
        m = cross(run)[1]
        out["clock_offsets_ms"] = m.get("clock_offsets_ms", {})
        if m.get("notice"):
            notices.append(m["notice"])
    else:
        notices.append(SINGLE_RANK)
    unknown = int(table["bytes"].isna().sum())
    if unknown:
        notices.append(
            f"collectives: {unknown} row(s) have unknown bytes (no record_param_comms sizes and no "
            "shapes recorded on the collective op): their bytes and bandwidths are left empty"
        )
    return out, notices
