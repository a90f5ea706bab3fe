"""JSON of many ranks is written a table at a time (tracekit/cli/one_by_one.py): the same text
as every table built at once, on planted ranks with collectives matched across them (the
cross-rank tables) and with --table / --per-step; values that are not finite are counted
before the meta is written and read empty."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from tracekit.cli import main, one_by_one
from tracekit.testing import TraceBuilder

RANKS = 10


def _ranks(d):
    d.mkdir()
    for r in range(RANKS):
        b = TraceBuilder(rank=r, world_size=RANKS)
        for s in range(2):
            with b.step():
                with b.forward():
                    b.kernel(
                        "sm80_xmma_gemm_bf16", 100 + 7 * r * (s + 1), op="aten::mm", at_us=1000 + 2000 * s
                    )
                with b.backward():
                    b.comm(
                        "AllReduce",
                        60 + 7 * (RANKS - r),
                        at_us=1100 + 2000 * s + 7 * r,
                        nelems=4096,
                        dtype="Float",
                    )
        b.write(d / f"rank{r}.pt.trace.json")
    return d


def _json(d, monkeypatch, lazy: bool, *args: str) -> str:
    monkeypatch.setattr(one_by_one, "RANKS", 2 if lazy else 10**9)
    counted = []
    count = one_by_one.OneByOne.count
    monkeypatch.setattr(one_by_one.OneByOne, "count", lambda self: counted.append(1) or count(self))
    res = CliRunner().invoke(main, ["analyze", str(d), "--format", "json", "--no-cache", "-j", "2", *args])
    assert res.exit_code == 0, res.output
    assert bool(counted) == (lazy and "--per-step" not in args)  # --per-step keeps the intervals
    return res.stdout


@pytest.mark.parametrize(
    "args",
    [(), ("--per-step",), ("--table", "collectives", "--table", "ranks", "--table", "findings")],
    ids=["all", "per-step", "some"],
)
def test_one_by_one_is_every_table_at_once(tmp_path, monkeypatch, args):
    d = _ranks(tmp_path / "ranks")
    lazy = _json(d, monkeypatch, True, *args)
    assert lazy == _json(d, monkeypatch, False, *args)
    tables = json.loads(lazy)["tables"]
    if not args:
        assert {"ranks", "rank_summary", "collective_matches", "collectives"} <= set(tables)
        assert len({row["rank"] for row in tables["collectives"]}) == RANKS


class _Run:
    """What OneByOne reads of an Analysis: tables by name, and the cross-rank ones at once."""

    def __init__(self):
        self.ranks, self.asked = {}, []

    def table(self, name, per_step):
        self.asked.append(name)
        return pd.DataFrame({"x": [1.0, np.inf, -np.inf] if name == "phases" else [2.0]})

    def rank_tables(self, per_step):
        self.asked.append("rank_tables")
        return {"rank_summary": pd.DataFrame({"y": [np.inf]}), "ranks": pd.DataFrame({"y": [1.0]})}


@pytest.mark.parametrize("keep", [0, one_by_one.KEEP_BYTES])
def test_not_finite_values_are_counted_first_and_read_empty(monkeypatch, keep):
    monkeypatch.setattr(one_by_one, "KEEP_BYTES", keep)
    run = _Run()
    t = one_by_one.OneByOne(run, ["phases", "modules", "ranks", "rank_summary"], False, whole=True)
    assert list(t) == ["phases", "modules", "rank_summary", "ranks"]  # as rank_tables orders them
    assert t.count().not_finite == 3
    assert t["phases"]["x"].isna().tolist() == [False, True, True]
    assert run.asked.count("rank_tables") == 1  # the cross-rank tables once, kept
    # computed in the counting pass and again when written, unless small enough to keep
    assert run.asked.count("phases") == (1 if keep else 2)
