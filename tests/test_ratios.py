"""Every ratio column of every table is the ratio of its aggregated columns (issue 26).

Over random planted traces whose steps differ (:mod:`tracekit.testing.strategies`), one rank
and two, for every table, per step and for the mean over steps: each percent, share and mean
duration equals what its definition (docs/metrics.md) gives from the columns beside it, or
from the step window / phase wall of the same steps (the ``idle`` / ``phases`` tables), never
a mean of the steps' ratios. A percent is at most 100; a count beside time is above 0, and
count x mean duration = total.

The definitions are written here, table by table, not read from the registry, and every
percent or microsecond column of every table must have one: a new ratio column is checked
as soon as it exists.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tracekit.analyses import REGISTRY

import tracekit
from tracekit.testing.strategies import Plan, plans

RTOL, ATOL = 1e-9, 1e-7
_tmp: list[Path] = []

Expect = Callable[[pd.DataFrame, dict], np.ndarray]


@pytest.fixture(scope="module", autouse=True)
def _scratch(tmp_path_factory):
    _tmp.append(tmp_path_factory.mktemp("ratios"))
    yield
    _tmp.pop()


def _by(df: pd.DataFrame, *extra: str) -> list[str]:
    return [c for c in ("rank", "step", *extra) if c in df.columns]


def _ratio(num, den, scale: float = 100.0) -> np.ndarray:
    num, den = np.asarray(num, float), np.asarray(den, float)
    return np.divide(num * scale, den, out=np.zeros(len(num)), where=den > 0)


def own(num: str, den: str, scale: float = 100.0) -> Expect:
    return lambda df, t: _ratio(df[num], df[den], scale)


def at_peak(*ideal: str, of: str = "time_ms") -> Expect:
    """The time at peak (the larger of the ``ideal`` columns: compute or memory bound) over
    ``of``, in percent; unknown (NaN) where a peak is unknown (docs/metrics.md, Table XII)."""

    def expect(df, t):
        best = np.maximum.reduce([np.asarray(df[c], float) for c in ideal])
        return np.where(np.isnan(best), np.nan, _ratio(np.nan_to_num(best), df[of]))

    return expect


def of_total(num: str, *rest: str) -> Expect:
    """``num`` over ``num`` plus the ``rest`` columns of its row, in percent."""
    return lambda df, t: _ratio(df[num], sum((df[c] for c in rest), df[num]))


def share(num: str, *within: str) -> Expect:
    """``num`` over its total on the rows of the step (and rank) sharing ``within``."""

    def expect(df, t):
        keys = _by(df, *[w for w in within if w in df.columns])
        total = df.groupby(keys, observed=True)[num].transform("sum") if keys else df[num].sum()
        return _ratio(df[num], total)

    return expect


def of_window(num: str) -> Expect:
    """``num`` over the step's device window (the mean window for a mean table)."""

    def expect(df, t):
        keys = _by(df)
        win = t["idle"][keys + ["window_ms"]] if keys else t["idle"][["window_ms"]]
        if not keys:
            return _ratio(df[num], np.full(len(df), float(win["window_ms"].iloc[0])))
        return _ratio(df[num], df[keys].merge(win, on=keys, how="left")["window_ms"].fillna(0.0))

    return expect


def of_wall(num: str) -> Expect:
    """``num`` over the wall of the row's phase (its mean for a mean table)."""

    def expect(df, t):
        keys = _by(df, "phase")
        walls = t["phases"][keys + ["wall_ms"]].astype({"phase": str})
        return _ratio(df[num], df[keys].astype({"phase": str}).merge(walls, on=keys, how="left")["wall_ms"])

    return expect


def _excess(num, den) -> np.ndarray:
    """(num / den - 1) x 100; 0 where den is 0."""
    den = np.asarray(den, float)
    return np.where(den > 0, _ratio(num, den) - 100.0, 0.0)


def over_mean(num: str, *within: str) -> Expect:
    """``num`` over its mean on the rows sharing ``within``, minus 1, in percent."""

    def expect(df, t):
        keys = _by(df, *[w for w in within if w in df.columns])
        return _excess(df[num], df.groupby(keys, observed=True)[num].transform("mean"))

    return expect


def over_all(num: str, how: str) -> Expect:
    """``num`` over its mean (median) over all rows, minus 1, in percent; per step (the
    cross-rank tables under --per-step), over the rows of its step."""

    def expect(df, t):
        if "step" in df.columns:
            return _excess(df[num], df.groupby("step")[num].transform(how))
        return _excess(df[num], np.full(len(df), getattr(df[num], how)()))

    return expect


def of_rank_window(num: str) -> Expect:
    """``num`` over its rank's (and step's) device window; a table with a ``rank`` column even
    on one rank (the findings)."""

    def expect(df, t):
        idle = t["idle"] if "rank" in t["idle"] else t["idle"].assign(rank=0)
        keys = [k for k in ("rank", "step") if k in df.columns and k in idle.columns]
        return _ratio(df[num], df[keys].merge(idle[keys + ["window_ms"]], on=keys, how="left")["window_ms"])

    return expect


#: Every ratio column of every table, by its definition in docs/metrics.md.
DEFINITIONS: dict[str, dict[str, Expect]] = {
    "phases": {"percent": of_window("wall_ms"), "mfu_pct": at_peak("ideal_ms", of="wall_ms")},
    "gemm_shapes": {"us_per_call": own("time_ms", "calls", 1000.0), "peak_pct": at_peak("ideal_ms")},
    "op_shapes": {
        "us_per_call": own("time_ms", "calls", 1000.0),
        "peak_pct": at_peak("ideal_ms", "ideal_mem_ms"),
    },
    "efficiency": {
        "peak_pct": at_peak("ideal_ms", "ideal_mem_ms"),
        "modelled_pct": of_total("time_ms", "unmodelled_ms"),
    },
    "modules": {"percent": of_wall("time_ms")},
    "gemm": {"percent": own("gemm_ms", "compute_ms")},
    "comm": {"percent": of_window("busy_ms")},
    "idle": {"percent": own("idle_ms", "window_ms")},
    "idle_causes": {},
    "findings": {"share_pct": of_rank_window("ms")},
    "idle_host": {},
    "critical_path": {"percent": of_window("time_ms")},
    # the step's path across ranks: each rank's share of it (docs/metrics.md, critical_path_ranks)
    "critical_path_ranks": {
        "share_pct": lambda df, t: _ratio(df["path_ms"], df.groupby("step")["path_ms"].transform("sum"))
    },
    "launches": {
        "delay_mean_us": own("delay_ms", "launches", 1000.0),
        "small_kernel_pct": own("small_ms", "device_ms"),
        # percentiles are no ratio of the columns beside them: only their order is checked
        "delay_p50_us": lambda df, t: np.minimum(df["delay_p50_us"], df["delay_p95_us"]),
        "delay_p95_us": lambda df, t: np.maximum(df["delay_p95_us"], df["delay_p50_us"]),
    },
    "kernels": {"percent": share("time_ms", "stage")},
    "memcpy": {"percent": of_window("busy_ms")},
    "timeline": {"percent": share("time_ms", "stage")},
    "top_kernels": {"mean_us": own("total_ms", "count", 1000.0), "percent": share("total_ms")},
    "layers": {"vs_mean_pct": over_mean("time_ms", "stage", "phase")},
    "layer_spread": {"slowest_over_mean_pct": lambda df, t: _excess(df["max_ms"], df["mean_ms"])},
    "ranks": {"vs_mean_pct": over_all("step_ms", "mean"), "vs_median_pct": over_all("step_ms", "median")},
    "rank_summary": {"slowest_over_mean_pct": lambda df, t: _excess(df["max_ms"], df["mean_ms"])},
}


def check_ratios(tables: dict[str, pd.DataFrame], where: str) -> None:
    for name, df in tables.items():
        spec = REGISTRY[name]
        ratios = [c for c, u in spec.values.items() if u in ("%", "us") and c in df.columns]
        missing = set(ratios) - set(DEFINITIONS.get(name, {}))
        assert not missing, f"{name}: ratio columns with no definition in this test: {missing}"
        if df.empty:
            continue
        for col, expect in DEFINITIONS.get(name, {}).items():
            want = expect(df, tables)
            np.testing.assert_allclose(df[col], want, rtol=RTOL, atol=ATOL, err_msg=f"{where} {name}.{col}")
        if "percent" in df.columns:
            assert (df["percent"] <= 100.0 + 1e-9).all() and (df["percent"] >= -1e-9).all(), (where, name)


def check_counts(tables: dict[str, pd.DataFrame], where: str) -> None:
    """A count beside time is above 0 (a mean keeps its fraction); count x mean = total."""
    times = {"comm": "time_ms", "kernels": "kernel_ms", "memcpy": "time_ms", "top_kernels": "total_ms"}
    for name, col in times.items():
        df = tables.get(name)
        if df is None or df.empty:
            continue
        ran = df[col].to_numpy(float) > 0
        assert (df["count"].to_numpy(float)[ran] > 0).all(), (where, name)
    top = tables.get("top_kernels")
    if top is not None and len(top):
        np.testing.assert_allclose(
            top["count"] * top["mean_us"] / 1000.0, top["total_ms"], rtol=RTOL, atol=ATOL
        )


def _analysed(plans_: list[Plan], name: str) -> tracekit.Analysis:
    d = _tmp[-1] / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    for rank, plan in enumerate(plans_):
        plan.build(rank=rank, world_size=len(plans_)).write(d / f"rank{rank}.pt.trace.json")
    return tracekit.load(d if len(plans_) > 1 else d / "rank0.pt.trace.json", jobs=1)


@settings(max_examples=int(settings().max_examples // 2) or 1)
@given(st.lists(plans(max_steps=4), min_size=1, max_size=2))
def test_every_ratio_is_the_ratio_of_its_aggregated_columns(ranks):
    a = _analysed(ranks, "run")
    for per_step in (False, True):
        tables = a.tables(per_step=per_step)
        where = f"{len(ranks)} rank(s), {'per step' if per_step else 'mean'}"
        check_ratios(tables, where)
        check_counts(tables, where)


def test_unequal_steps_mean_percent_is_not_the_mean_of_percents(tmp_path):
    """Two steps, 1 ms and 9 ms of the same kernel in windows of 2 and 10 ms: the mean percent
    is 10 / 12 (83.3%), where the mean of the steps' percents would be (50 + 90) / 2 = 70%."""
    from tracekit.testing import TraceBuilder
    from tracekit.testing.kernels import GEMM_A

    b = TraceBuilder()
    for us in (1000, 9000):
        with b.step():
            b.kernel(GEMM_A, us, op="aten::mm")
            b.idle(1000)
            b.kernel(GEMM_A, 0.001, op="aten::mm")
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False, jobs=1)
    idle = a.table("idle")
    assert idle["percent"].iloc[0] == pytest.approx(100 * 2 / 12, rel=1e-3)
    gemm_share = a.table("kernels").set_index("category")["percent"]["GEMM"]
    assert gemm_share == pytest.approx(100 * 10.000002 / 12.000002, rel=1e-6)
