"""What the captured steps cost: wall time, throughput and peak memory (the paper's Tables II-IV
and IX report tokens/s and peak memory per method).

Not computed from the trace: read from the manifest ``tracekit capture`` writes beside the
traces, where each rank recorded its profiled steps as its training (or generation) loop timed
and measured them (``ranks[i].measures.steps``, see docs/capture.md). A bare trace, or a capture
made before these measures existed, has no such table.

Per step (``--per-step``), one row per rank and profiled step (``step`` is the trace's
``ProfilerStep`` number): ``step_ms`` (the loop's wall time of the step), ``tokens`` and
``samples`` (what the step processed on that rank: training, batch x sequence length input
tokens; inference prefill, the prompt tokens; decode, one generated token per sequence),
``tokens_per_s`` and ``samples_per_s`` (those over ``step_ms``), and the step's peak memory in
MiB: ``peak_rss_mb`` (host RSS of the rank's process), and on GPU hosts ``peak_allocated_mb``
and ``peak_reserved_mb`` (torch's caching allocator). Inference rows carry their ``stage``.

Reported (:func:`summary`), one row per rank (and stage): ``step_ms``, ``tokens`` and
``samples`` are means per step; the rates are the rank's tokens (samples) over the sum of its
step times (a ratio of totals, never a mean of ratios); each peak is the highest of its steps.
"""

from __future__ import annotations

import math

import pandas as pd

from ._registry import COUNT, MB, MS, PER_S, TableSpec, declare

MIB = float(1 << 20)
#: manifest step field (bytes) -> table column (MiB).
MEMORY = {
    "peak_rss_bytes": "peak_rss_mb",
    "peak_allocated_bytes": "peak_allocated_mb",
    "peak_reserved_bytes": "peak_reserved_mb",
}
RATES = {"tokens_per_s": "tokens", "samples_per_s": "samples"}
VALUES = {
    "step_ms": MS,
    "tokens": COUNT,
    "samples": COUNT,
    "tokens_per_s": PER_S,
    "samples_per_s": PER_S,
    **dict.fromkeys(MEMORY.values(), MB),
}


def _number(v: object) -> float | None:
    """A finite number from the manifest (a file beside the traces: never trusted), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) and f >= 0 else None


def _row(rank: int, rec: object) -> dict | None:
    """One step's row from a rank's step record; None when the record lacks the basics."""
    if not isinstance(rec, dict):
        return None
    step, wall = rec.get("step"), _number(rec.get("wall_ms"))
    if isinstance(step, bool) or not isinstance(step, int) or wall is None:
        return None
    row: dict = {"rank": rank, "step": step, "step_ms": wall}
    if isinstance(rec.get("stage"), str):
        row["stage"] = rec["stage"]
    for k in ("tokens", "samples"):
        n = _number(rec.get(k))
        row[k] = n
        row[f"{k}_per_s"] = n / (wall / 1e3) if n is not None and wall > 0 else None
    for field, column in MEMORY.items():
        b = _number(rec.get(field))
        row[column] = None if b is None else b / MIB
    return row


def from_manifest(doc: dict) -> pd.DataFrame:
    """One row per rank and profiled step from a capture manifest (empty without measures)."""
    rows = []
    ranks = doc.get("ranks") if isinstance(doc, dict) else None
    for r in ranks if isinstance(ranks, list) else []:
        measures = r.get("measures") if isinstance(r, dict) else None
        rank = r.get("rank") if isinstance(r, dict) else None
        if not isinstance(measures, dict) or isinstance(rank, bool) or not isinstance(rank, int):
            continue
        steps = measures.get("steps")
        rows += [row for rec in (steps if isinstance(steps, list) else []) if (row := _row(rank, rec))]
    if not rows:
        return pd.DataFrame()
    df = pd.DataFrame(rows).sort_values(["rank", "step"], kind="stable").reset_index(drop=True)
    order = ["rank", "step", *(["stage"] if "stage" in df else []), *VALUES]
    return df[order].dropna(axis=1, how="all")


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    """One rank's reported rows (per stage for inference) from its per-step rows."""
    keys = ["stage"] if "stage" in rows else []
    groups = rows.groupby(keys, sort=False, observed=True) if keys else [((), rows)]
    out = []
    for key, g in groups:
        seconds = g["step_ms"].sum() / 1e3
        row: dict = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        row["step_ms"] = g["step_ms"].mean()
        for rate, count in RATES.items():
            if count in g:
                row[count] = g[count].mean()
                row[rate] = g[count].sum() / seconds if seconds > 0 else float("nan")
        for column in MEMORY.values():
            if column in g:
                row[column] = g[column].max()
        out.append(row)
    columns = [*keys, *(c for c in VALUES if c in rows)]
    return pd.DataFrame(out, columns=columns)


declare(
    TableSpec(
        name="throughput",
        title="Step cost from the capture: wall time, throughput, peak memory",
        func=None,
        paper="II-IV, IX",
        values=VALUES,
        chart="none",
        from_manifest=from_manifest,
        summary=summary,
    )
)
