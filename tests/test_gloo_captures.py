"""Real gloo captures (issue 37.3, 37.4): DDP, FSDP1 and FSDP2 on 2 CPU processes, made by
tests/gloo_captures.py (torch 2.13.0+cpu) and kept in tests/data/gloo.

The count here is independent of tracekit, from the raw JSON: per rank and collective type, the
number of ``c10d::*`` calls inside the ProfilerSteps (one call, one collective), and their time:
each call's duration plus that of the ``gloo:*`` range it queued (the k-th range by start is the
k-th call's: gloo's queue is first in, first out, and in these captures each call's range starts
before the next call). tracekit's comm table must agree per step, and name no AllReduce where
FSDP called none (gloo runs its reduce-scatter as ``gloo:all_reduce``).
"""

from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

import tracekit

DATA = Path(__file__).parent / "data" / "gloo"
TYPES = (("reduce_scatter", "ReduceScatter"), ("allreduce", "AllReduce"), ("allgather", "AllGather"))


def _type(call: str) -> str:
    return next(t for key, t in TYPES if key in call.replace("_all", "all"))


def _oracle(path: Path) -> tuple[Counter, Counter, int]:
    """(calls per type, ms per type, steps) of one rank's file, from its JSON alone."""
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("ProfilerStep#")]
    calls = sorted(
        (e for e in ev if e["name"].startswith("c10d::") and any(a <= e["ts"] < b for a, b in steps)),
        key=lambda e: e["ts"],
    )
    ranges = sorted((e for e in ev if e["name"].startswith("gloo:")), key=lambda e: e["ts"])
    assert len(calls) == len(ranges)
    n, ms = Counter(), Counter()
    for c, r in zip(calls, ranges):
        assert r["ts"] >= c["ts"]
        n[_type(c["name"])] += 1
        ms[_type(c["name"])] += (c["dur"] + r["dur"]) / 1e3
    return n, ms, len(steps)


@pytest.mark.parametrize("mode", ["ddp", "fsdp1", "fsdp2"])
def test_each_call_is_one_collective_named_by_the_call(tmp_path: Path, mode: str) -> None:
    d = Path(shutil.copytree(DATA / mode, tmp_path / mode))
    comm = tracekit.load(d, cache=False, jobs=1).table("comm")
    for rank in (0, 1):
        n, ms, steps = _oracle(d / f"rank{rank}.json.gz")
        mine = comm[comm["rank"] == rank].groupby("collective")[["count", "time_ms"]].sum()
        assert set(mine.index) == set(n), (rank, mine)
        for t in n:
            assert mine.at[t, "count"] == pytest.approx(n[t] / steps), (rank, t)
            assert mine.at[t, "time_ms"] == pytest.approx(ms[t] / steps, abs=1e-6), (rank, t)
    phases = set(zip(comm["phase"], comm["collective"]))
    if mode == "ddp":
        assert phases == {("backward", "AllReduce")}
    else:  # forward gathers parameters; backward reduce-scatters gradients (FSDP2 re-gathers)
        assert ("forward", "AllGather") in phases and ("backward", "ReduceScatter") in phases
        assert {p for p, _ in phases} == {"forward", "backward"}
        assert ("forward", "ReduceScatter") not in phases
