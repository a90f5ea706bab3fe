"""A run pays only for what its output needs (issue 34): named tables skip the pipeline steps
none of them reads (the perf model, the memory events), and their numbers are those of a full
run; a subset run stores no result; the memory timeline is thinned unless ``--full-series``."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from click.testing import CliRunner
from tracekit.analyses._registry import CRITICAL, MEMORY, PERF, features_of

import tracekit
from tracekit.cli import main
from tracekit.testing import TraceBuilder, write_trace
from tracekit.testing.kernels import GEMM_A, K_ADAM, K_MUL


def _trace(tmp_path, steps: int = 2, allocs: int = 3):
    """Training steps with a GEMM (shapes recorded) and ``allocs`` allocations per step."""
    b = TraceBuilder()
    for _ in range(steps):
        with b.step():
            with b.module("LlamaMLP", "model.layers.0.mlp"):
                for _ in range(allocs):
                    with b.op("aten::empty"):
                        b.memory(1 << 20, device=0)
                b.kernel(GEMM_A, 10, op="aten::mm")
                for _ in range(allocs):
                    b.memory(-(1 << 20), device=0)
            with b.backward():
                b.kernel(K_MUL, 3, op="aten::mul")
            with b.optimizer():
                b.kernel(K_ADAM, 5, op="aten::_fused_adam_")
    return write_trace(tmp_path / "t.json", b.trace())


def test_features_follow_the_tables():
    assert features_of(["phases"]) == frozenset()
    assert features_of(["efficiency"]) == {PERF}
    assert features_of(["memory_timeline"]) == {MEMORY}
    assert features_of(["critical_path"]) == {CRITICAL}
    assert features_of(None) == {PERF, MEMORY, CRITICAL}


def test_named_tables_skip_the_steps_they_do_not_need(tmp_path):
    path = _trace(tmp_path)
    only = tracekit.load(path, cache=False, jobs=1, tables=["phases", "idle"])
    att = only.ranks[0]
    assert "flops" not in att.intervals  # no perf model
    assert att.memory.empty  # no memory events kept
    assert "mfu" not in att.meta
    assert set(only.tables()) == {"phases", "idle"}
    with pytest.raises(KeyError):
        only.table("memory")
    full = tracekit.load(path, cache=False, jobs=1)
    assert "flops" in full.ranks[0].intervals and not full.ranks[0].memory.empty
    # The same numbers as a full run, but for the perf columns the subset did not ask for.
    for name in ("phases", "idle"):
        got, want = only.table(name), full.table(name)
        pd.testing.assert_frame_equal(got, want[list(got.columns)], check_dtype=False)


def test_a_subset_run_stores_no_result(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    path = _trace(tmp_path)
    tracekit.load(path, jobs=1, tables=["phases"])
    assert not list((tmp_path / "cache").rglob("*.result.parquet"))
    tracekit.load(path, jobs=1)
    assert list((tmp_path / "cache").rglob("*.result.parquet"))


def _timeline(path, *flags: str) -> list[dict]:
    args = ["analyze", str(path), "--format", "json", "--no-cache", "-j", "1", "--per-step"]
    res = CliRunner().invoke(main, [*args, "--table", "memory_timeline", *flags])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)["tables"]["memory_timeline"]


def test_full_series_keeps_every_event(tmp_path):
    """One step of 600 allocations and 600 frees: 1,200 points, thinned to the 400-point budget
    (200 runs of 6, each its lowest and highest), every event with ``--full-series``; the peak is
    the same in both."""
    path = _trace(tmp_path, steps=1, allocs=600)
    thin, whole = _timeline(path), _timeline(path, "--full-series")
    assert len(whole) == 1200
    assert len(thin) == 400
    assert max(r["allocated_mb"] for r in thin) == max(r["allocated_mb"] for r in whole) == 600.0
