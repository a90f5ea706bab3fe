"""The memory rows travel like the other per-rank frames: through the result cache, a process
pool's gathering of many ranks, and the merge of one rank's successive window files; every
memory table is then the one the file gives analysed alone, in memory."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_memory_truth import Plant
from test_properties import split_windows

import tracekit
from tracekit.testing import TraceBuilder

MEMORY_TABLES = ("memory", "memory_modules", "memory_timeline")


@pytest.fixture
def cachedir(tmp_path, monkeypatch):
    d = tmp_path / "cachedir"
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(d))
    return d


def _tables(a: tracekit.Analysis, per_step: bool) -> dict:
    return {n: a.table(n, per_step=per_step) for n in MEMORY_TABLES}


def _same(a: dict, b: dict) -> None:
    for name in MEMORY_TABLES:
        pd.testing.assert_frame_equal(a[name], b[name], check_dtype=False, check_categorical=False)


def _plant(rank: int | None = None) -> TraceBuilder:
    p = Plant()
    if rank is not None:
        p.b = TraceBuilder(rank=rank, world_size=2)
    return p.build(steps=4).b


def test_the_result_cache_keeps_the_memory_rows(tmp_path, cachedir):
    path = _plant().write(tmp_path / "t.json")
    cold = tracekit.load(path, cache=False, jobs=1)
    tracekit.load(path, jobs=1)  # stores the result
    warm = tracekit.load(path, jobs=1)
    assert next(iter(warm.ranks.values())).lazy  # from the cache: no pipeline ran
    for per_step in (False, True):
        _same(_tables(warm, per_step), _tables(cold, per_step))


def test_ranks_of_a_directory_each_have_their_memory(tmp_path, cachedir):
    run = tmp_path / "run"
    run.mkdir()
    alone = {}
    for r in (0, 1):
        path = _plant(rank=r).write(run / f"rank{r}.pt.trace.json")
        alone[r] = _tables(tracekit.load(path, cache=False, jobs=1), per_step=True)
    both = tracekit.load(run, jobs=2)  # a process pool, its results gathered
    got = _tables(both, per_step=True)
    for name in MEMORY_TABLES:
        for r in (0, 1):
            mine = got[name][got[name]["rank"] == r].drop(columns="rank").reset_index(drop=True)
            pd.testing.assert_frame_equal(mine, alone[r][name], check_dtype=False, check_categorical=False)


def test_successive_window_files_of_one_rank_are_one_rank(tmp_path):
    b = _plant()
    whole = _tables(tracekit.load(b.write(tmp_path / "whole.json"), cache=False, jobs=1), per_step=True)
    run = tmp_path / "windows"
    run.mkdir()
    for i, doc in enumerate(split_windows(b.trace(), 2)):
        (run / f"host_48213.{i}.pt.trace.json").write_text(json.dumps(doc), encoding="utf-8")
    split = tracekit.load(run, cache=False, jobs=1)
    assert split.meta["ranks"] == [0]
    _same(_tables(split, per_step=True), whole)
