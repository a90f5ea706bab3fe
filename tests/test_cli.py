"""The CLI as a person uses it: every output format, --per-step, directories of ranks, --rank."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from tracekit.analyses import REGISTRY
from tracekit.analyses._registry import MEMORY_EVENTS

from tracekit.testing import llama_training, write_trace

TABLES = [  # a bare trace's: no cross-rank, manifest or memory table
    n
    for n, s in REGISTRY.items()
    if not s.cross_rank and s.from_manifest is None and s.reads != MEMORY_EVENTS
]


def run(*args, check=True):
    r = subprocess.run(
        [sys.executable, "-m", "tracekit.cli", *map(str, args)], capture_output=True, text=True, timeout=300
    )
    if check:
        assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    t, truth = llama_training(n_layers=2, n_steps=2, seed=11)
    return write_trace(tmp_path_factory.mktemp("cli") / "rank0.pt.trace.json.gz", t), truth


@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("ranks")
    for r in range(2):
        t, _ = llama_training(n_layers=1, n_steps=2, seed=20 + r)
        t["distributedInfo"] = {"rank": r, "world_size": 2, "backend": "nccl"}
        write_trace(d / f"rank{r}.pt.trace.json.gz", t)
    (d / "manifest.json").write_text("{}")
    return d


def test_table_format_prints_every_paper_table(trace):
    out = run("analyze", trace[0], "--all").stdout
    for title in ("Tables V, VII", "Table VI", "Table XIII", "Table X", "Table XI"):
        assert title in out
    first = run("analyze", trace[0]).stdout  # the first screen names the tables it leaves out
    assert "Table XIII" not in first and "other tables (--table NAME or --all): gemm," in first


def test_json_per_step_has_step_column(trace):
    doc = json.loads(run("analyze", trace[0], "--format", "json", "--per-step").stdout)
    assert sorted(doc["tables"]) == sorted(TABLES)
    steps = {r["step"] for r in doc["tables"]["phases"]}
    assert steps == set(trace[1].steps)
    assert doc["meta"]["aggregation"]


def test_csv_directory_and_formula_cells(trace, tmp_path):
    out = tmp_path / "csv"
    run("analyze", trace[0], "--format", "csv", "--out", out)
    for name in TABLES:
        assert (out / f"{name}.csv").exists()
    phases = pd.read_csv(out / "phases.csv")
    assert set(phases["phase"]) == {"forward", "backward", "optimizer"}


def test_markdown_and_parquet(trace, tmp_path):
    md = run("analyze", trace[0], "--format", "md").stdout
    assert "| phase |" in md and "Table VI" in md
    run("analyze", trace[0], "--format", "parquet", "--out", tmp_path / "pq")
    df = pd.read_parquet(tmp_path / "pq" / "modules.parquet")
    assert {"phase", "module", "time_ms", "percent"} <= set(df.columns)


def test_directory_gives_rank_column_and_rank_option(rank_dir):
    doc = json.loads(run("analyze", rank_dir, "--format", "json").stdout)
    assert doc["meta"]["ranks"] == [0, 1]
    assert {r["rank"] for r in doc["tables"]["phases"]} == {0, 1}
    one = json.loads(run("analyze", rank_dir, "--format", "json", "--rank", "1").stdout)
    assert one["meta"]["ranks"] == [1]


def test_unknown_rank_is_a_one_line_error(rank_dir):
    r = run("analyze", rank_dir, "--rank", "7", check=False)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no rank 7" in r.stderr


def test_parquet_without_out_is_a_usage_error(trace):
    r = run("analyze", trace[0], "--format", "parquet", check=False)
    assert r.returncode == 2 and "needs --out" in r.stderr
