"""``--paper``: the paper's published values beside the user's, for the tables that match.

The values live in ``tracekit/data/paper_values.json`` with their citation (Zhang et al.,
arXiv:2311.03687): Tables V, VI, VII, VIII, X, XI, XII and XIII for Llama 2-7B on A800. For each of
the user's tables with a paper counterpart, :func:`with_paper` adds ``paper_<column>`` columns
joined on the table's keys (phase, module, category, block...); rows the paper does not have
get empty cells. The user's numbers are never changed.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import pandas as pd


@lru_cache(maxsize=1)
def paper_values() -> dict:
    return json.loads(resources.files("tracekit.data").joinpath("paper_values.json").read_text())


def paper_table(name: str) -> pd.DataFrame | None:
    """The paper's values for one of tracekit's table names (None when it has none)."""
    t = paper_values()["tables"].get(name)
    return None if t is None else pd.DataFrame(t["rows"])


def with_paper(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Each table with a paper counterpart gets ``paper_<value>`` columns beside its own."""
    spec = paper_values()["tables"]
    out = {}
    for name, df in tables.items():
        if name not in spec or df.empty:
            out[name] = df
            continue
        keys = spec[name]["keys"]
        if not set(keys) <= set(df.columns):
            out[name] = df
            continue
        paper = pd.DataFrame(spec[name]["rows"])
        vals = [c for c in paper.columns if c not in keys]
        paper = paper.rename(columns={c: f"paper_{c}" for c in vals})
        left = df.copy()
        for k in keys:  # numeric keys (a GEMM's m, n, k) join as numbers, labels as text
            if pd.api.types.is_numeric_dtype(df[k]):
                paper[k] = paper[k].astype(df[k].dtype)
            else:
                left[k] = left[k].astype(str)
        merged = left.merge(paper, on=keys, how="left")
        for k in keys:  # keep the user's dtypes (categorical order) for keys
            merged[k] = merged[k].astype(df[k].dtype) if str(df[k].dtype) == "category" else merged[k]
        out[name] = merged
    return out


def citation_meta() -> dict:
    v = paper_values()
    return {
        "citation": v["citation"],
        "setting": v["setting"],
        "tables": {k: f"Table {t['paper_table']}: {t['caption']}" for k, t in v["tables"].items()},
    }


@lru_cache(maxsize=1)
def paper_costs() -> dict:
    """The paper's Tables II, III, IV and IX (throughput and peak memory per method), with their
    citation and transcription notes (``tracekit/data/paper_costs.json``)."""
    return json.loads(resources.files("tracekit.data").joinpath("paper_costs.json").read_text())


def cost(label: str, table: str, model: str = "7B", platform: str = "A800") -> dict | None:
    """The paper's figures for method ``label`` (its notation, ``Z3+O``, ``L+F+R+Z2``) in Table
    ``table`` (III, IV or IX) for ``model`` on ``platform``: ``tokens_per_s``, ``std``,
    ``memory_gb`` (and ``batch_size`` in Table IV). None when the paper has no such row, or
    printed ``-`` (out of memory) for it. Parts match in any order (the paper writes both
    ``R+F`` and ``F+R+Z2``)."""
    parts = frozenset(label.split("+"))
    for row in paper_costs()["tables"][table]["rows"]:
        if row.get("model") == model and frozenset(row["method"].split("+")) == parts:
            entry = row.get(platform)
            return dict(entry) if entry else None
    return None
