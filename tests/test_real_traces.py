"""Every real trace from ../shared/traces analyses without error, and the invariants hold.

Invariants checked on each: phase walls add up to the step window; module rows of a phase add up
to its wall (100%); kernel rows add up to the window (100%); idle = window - busy; exposed
communication never exceeds communication; the timeline partitions the forward window; nothing
is counted twice (every activity has exactly one label of each kind).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from shared_traces import params
from tracekit.analyses import REGISTRY

import tracekit

TOL = 1e-6


@pytest.fixture(scope="module")
def analyses():
    cache = {}

    def get(path):
        if path not in cache:
            cache[path] = tracekit.load(path)
        return cache[path]

    return get


@pytest.mark.parametrize("path", params())
def test_all_tables_and_invariants(path, analyses):
    a = analyses(path)
    per_step = a.tables(per_step=True)
    idle = per_step["idle"]
    phases = per_step["phases"]
    assert not idle.empty or a.intervals.empty
    for step, ph in phases.groupby("step"):
        window = float(idle.loc[idle["step"] == step, "window_ms"].iloc[0])
        assert ph["wall_ms"].sum() == pytest.approx(window, abs=TOL)
        assert ph["percent"].sum() == pytest.approx(100.0 if window > 0 else 0.0, abs=1e-6)
        assert (ph["exposed_comm_ms"] <= ph["wall_ms"] + TOL).all()
        assert (ph["idle_ms"] <= ph["wall_ms"] + TOL).all()
        assert ph["idle_ms"].sum() == pytest.approx(
            float(idle.loc[idle["step"] == step, "idle_ms"].iloc[0]), abs=1e-3
        )
    for (step, phase), m in per_step["modules"].groupby(["step", "phase"], observed=True):
        wall = float(phases[(phases.step == step) & (phases.phase == phase)]["wall_ms"].iloc[0])
        assert m["time_ms"].sum() == pytest.approx(wall, abs=1e-3)
        assert (m["time_ms"] >= -TOL).all()
    for step, k in per_step["kernels"].groupby("step"):
        window = float(idle.loc[idle["step"] == step, "window_ms"].iloc[0])
        assert k["time_ms"].sum() == pytest.approx(window, abs=1e-3)
        assert (k["time_ms"] <= k["kernel_ms"] + TOL)[k["group"] != "idle"].all()
    comm = per_step["comm"]
    assert (comm["exposed_ms"] <= comm["time_ms"] + TOL).all()
    gemm = per_step["gemm"]
    assert (gemm["gemm_ms"] <= gemm["compute_ms"] + TOL).all()
    tl = per_step["timeline"]
    for step, t in tl.groupby("step"):
        fwd = float(phases[(phases.step == step) & (phases.phase == "forward")]["wall_ms"].iloc[0])
        assert t["time_ms"].sum() == pytest.approx(fwd, abs=1e-3)
    # One label of each kind per activity: the labelled table has no missing labels or duplicates.
    iv = a.intervals
    for col in ("step", "phase", "group", "kernel_category", "window"):
        assert iv[col].notna().all(), col
    assert not iv.duplicated(["rank", "start", "end", "name", "stream"]).any() or iv.duplicated(
        ["rank", "start", "end", "name", "stream"]
    ).sum() < 0.01 * len(iv)
    # Means are means of the per-step tables.
    mean = a.tables()
    for name in ("phases", "idle"):
        # sums only: a ratio column (%) is a ratio of the means, not a mean (registry Ratio)
        drop = [c for c, u in REGISTRY[name].values.items() if u == "%"] + ["step"]
        num = per_step[name].select_dtypes("number").drop(columns=drop, errors="ignore")
        steps = per_step[name]["step"].nunique()
        got = mean[name].select_dtypes("number").drop(columns=drop, errors="ignore")
        assert got.sum().sum() == pytest.approx(num.sum().sum() / max(steps, 1), rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("path", params())
def test_cli_json_contract(path):
    r = subprocess.run(
        [sys.executable, "-m", "tracekit.cli", "analyze", str(path), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"meta", "tables"}
    t = doc["tables"]
    expected = {
        "phases": {"phase", "wall_ms", "percent", "compute_ms", "comm_ms", "exposed_comm_ms", "idle_ms"},
        "modules": {"phase", "module", "time_ms", "percent"},
        "gemm": {"phase", "gemm_ms", "compute_ms", "percent"},
        "comm": {"phase", "collective", "count", "time_ms", "exposed_ms"},
        "idle": {"window_ms", "busy_ms", "idle_ms", "percent"},
        "kernels": {"group", "category", "time_ms", "percent"},
        "timeline": {"block", "count", "time_ms", "percent"},
    }
    for name, cols in expected.items():
        assert name in t
        for rec in t[name]:
            assert cols <= set(rec), (name, rec)
    assert "Traceback" not in r.stderr
