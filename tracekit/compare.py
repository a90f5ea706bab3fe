"""Compare two runs (A, B): eager vs FlashAttention/SDPA, ZeRO-2 vs ZeRO-3, one GPU vs another.

:func:`compare` takes two :class:`~tracekit.analysis.Analysis` objects and returns
``{name: DataFrame}`` like ``Analysis.tables()``, so every renderer takes it unchanged:

* ``attention`` (Table VIII): per phase (forward, backward), the time of the attention core
  in A and in B: the module categories Bmm0 + Softmax + Bmm1 + Attention (fused kernels) of the
  modules table, summed over layers, mean per step. ``improvement_pct`` = (A - B) / A x 100:
  positive when B is faster, as the paper reports FlashAttention's gain over naive attention.
* ``phases_delta``: per phase, wall time (Tables V/VII ``wall_ms``);
* ``modules_delta``: per phase and module category (Table VI ``time_ms``);
* ``kernels_delta``: per kernel group and category (Table X ``time_ms``; per stage where the
  runs have inference stages);
* ``layers_delta``: per phase and decoder-layer index (``layers`` ``time_ms``);
* ``gemm_shapes_delta``, ``efficiency_delta``: per GEMM shape (Table XII) and per phase and
  module category, kernel time (``time_ms``);
* ``efficiency_rates``: per phase and module category, A's and B's achieved TFLOP/s, % of
  peak and modelled share, and B - A of each (naive against recompute, eager against flash).

The delta tables are those of every registered table that declares a ``compare`` column
(``analyses/_registry.py``).

Every table has ``a_ms`` and ``b_ms`` (means per complete step), ``delta_ms`` = B - A,
``delta_pct`` = (B - A) / A x 100 (empty when A is 0), and the per-step noise ``a_std`` /
``b_std``: the sample standard deviation over complete steps (empty with a single step). A row
absent from a step counts as 0 there, except in per-stage rows, which are averaged over the
steps holding the stage. With several ranks, a step's value is the mean over ranks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analyses import REGISTRY
from tracekit.analyses._registry import STAGE_MEAN

#: Module categories that make up "the attention module" of Table VIII.
ATTENTION_PARTS = ["Bmm0", "Softmax", "Bmm1", "Attention"]


def deltas() -> dict[str, tuple[str, list[str], str]]:
    """``<table>_delta`` -> (table, key columns, value column), for every registered table
    that declares a ``compare`` column (keys of a stage-aware table start with ``stage``)."""
    return {
        f"{n}_delta": (n, (["stage"] if s.aggregate == STAGE_MEAN else []) + list(s.keys), s.compare)
        for n, s in REGISTRY.items()
        if s.compare and s.func is not None
    }


def step_values(per_step: pd.DataFrame, keys: list[str], value: str) -> pd.DataFrame:
    """Wide frame: one row per key, one column per step (ranks averaged per step)."""
    keys = [k for k in keys if k in per_step.columns]
    if per_step.empty:
        return pd.DataFrame(
            index=pd.MultiIndex.from_tuples([], names=keys)
            if len(keys) > 1
            else pd.Index([], name=keys[0] if keys else None)
        )
    df = per_step.copy()
    for k in keys:
        df[k] = df[k].astype(str)
    if "rank" in df.columns:
        df = df.groupby(["step", *keys], observed=True, sort=False)[value].mean().reset_index()
    wide = df.pivot_table(index=keys, columns="step", values=value, aggfunc="sum", sort=False)
    if "stage" not in keys:
        wide = wide.fillna(0.0)
    return wide


def _stats(wide: pd.DataFrame) -> pd.DataFrame:
    n = wide.notna().sum(axis=1)
    std = wide.std(axis=1, ddof=1)
    return pd.DataFrame({"ms": wide.mean(axis=1), "std": std.where(n >= 2)})


def delta_table(a_wide: pd.DataFrame, b_wide: pd.DataFrame) -> pd.DataFrame:
    """Join A's and B's per-step values into a_ms, b_ms, delta_ms, delta_pct, a_std, b_std."""
    a, b = _stats(a_wide), _stats(b_wide)
    out = a.add_prefix("a_").join(b.add_prefix("b_"), how="outer")
    # float64 throughout: an all-zero column can come back as Python objects, whose division
    # raises ZeroDivisionError instead of giving inf; dividing by A only where A > 0.
    out[["a_ms", "b_ms"]] = out[["a_ms", "b_ms"]].fillna(0.0).astype(np.float64)
    out["delta_ms"] = out["b_ms"] - out["a_ms"]
    out["delta_pct"] = out["delta_ms"] / out["a_ms"].where(out["a_ms"] > 0) * 100.0
    out = out[["a_ms", "b_ms", "delta_ms", "delta_pct", "a_std", "b_std"]]
    return out.reset_index()


def attention_table(a_modules: pd.DataFrame, b_modules: pd.DataFrame) -> pd.DataFrame:
    """Table VIII from two per-step modules tables."""
    rows = []
    wides = []
    for per in (a_modules, b_modules):
        att = per[per["module"].astype(str).isin(ATTENTION_PARTS)] if len(per) else per
        if len(att):
            att = (
                att.groupby([c for c in ("step", "rank", "phase") if c in att.columns], observed=True)[
                    "time_ms"
                ]
                .sum()
                .reset_index()
            )
        wides.append(step_values(att, ["phase"], "time_ms") if len(att) else pd.DataFrame())
    sa, sb = (_stats(w) if len(w) else pd.DataFrame(columns=["ms", "std"]) for w in wides)
    for ph in ("forward", "backward"):
        a_ms = float(sa["ms"].get(ph, 0.0)) if len(sa) else 0.0
        b_ms = float(sb["ms"].get(ph, 0.0)) if len(sb) else 0.0
        rows.append(
            {
                "phase": ph,
                "a_ms": a_ms,
                "b_ms": b_ms,
                "improvement_pct": (a_ms - b_ms) / a_ms * 100.0 if a_ms > 0 else np.nan,
                "a_std": sa["std"].get(ph, np.nan) if len(sa) else np.nan,
                "b_std": sb["std"].get(ph, np.nan) if len(sb) else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=["phase", "a_ms", "b_ms", "improvement_pct", "a_std", "b_std"])


def _in_source_order(d: pd.DataFrame, keys: list[str], *sources: pd.DataFrame) -> pd.DataFrame:
    """Rows in the order their keys first appear in A's table, then B's (not alphabetical)."""
    seen: dict[tuple, int] = {}
    for src in sources:
        if len(src):
            for t in src[keys].astype(str).itertuples(index=False, name=None):
                seen.setdefault(t, len(seen))
    rank = [seen.get(t, len(seen)) for t in d[keys].astype(str).itertuples(index=False, name=None)]
    return d.assign(_o=rank).sort_values("_o", kind="stable").drop(columns="_o").reset_index(drop=True)


def compare(a, b) -> dict[str, pd.DataFrame]:
    """The comparison tables of two analyses (see the module docstring)."""
    out = {"attention": attention_table(a.table("modules", per_step=True), b.table("modules", per_step=True))}
    for name, (src, keys, value) in deltas().items():
        pa, pb = a.table(src, per_step=True), b.table(src, per_step=True)
        ks = [k for k in keys if k in pa.columns or k in pb.columns]
        for p in (pa, pb):
            for k in ks:
                if k not in p.columns and len(p):
                    p[k] = ""
        d = _in_source_order(delta_table(step_values(pa, ks, value), step_values(pb, ks, value)), ks, pa, pb)
        if REGISTRY[src].top is not None:  # a long list (GEMM shapes): the largest changes first
            d = d.iloc[(-d["delta_ms"].abs().to_numpy()).argsort(kind="stable")].reset_index(drop=True)
        out[name] = d
    out["efficiency_rates"] = efficiency_rates(a.table("efficiency"), b.table("efficiency"))
    return out


#: The rates of the efficiency table compared side by side (``efficiency_rates``).
RATES = ["tflops", "peak_pct", "modelled_pct"]


def efficiency_rates(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per phase and module category, A's and B's achieved TFLOP/s, % of peak and modelled
    share (their mean tables: ratios of the mean sums), and B - A of each."""
    keys = ["phase", "module"]
    cols = keys + RATES
    sides = [
        (df if len(df) and set(cols) <= set(df.columns) else pd.DataFrame(columns=cols))[cols]
        .astype(dict.fromkeys(keys, str))
        .rename(columns={r: f"{tag}_{r}" for r in RATES})
        for tag, df in (("a", a), ("b", b))
    ]
    out = sides[0].merge(sides[1], on=keys, how="outer")
    for r in RATES:
        out[f"{r}_delta"] = out[f"b_{r}"].astype(float) - out[f"a_{r}"].astype(float)
    order = keys + [f"{t}_{r}" for r in RATES for t in ("a", "b")] + [f"{r}_delta" for r in RATES]
    return _in_source_order(out[order], keys, *sides)


def compare_meta(a, b) -> dict:
    """``meta`` of a comparison: both runs' meta under ``a`` and ``b``."""
    return {
        "kind": "compare",
        "time_unit": "ms",
        "aggregation": "mean per complete step",
        "a": a.meta,
        "b": b.meta,
        "warnings": [{"run": "A", **w} for w in a.meta["warnings"]]
        + [{"run": "B", **w} for w in b.meta["warnings"]],
    }
