"""Findings end to end (issue 36.3): a planted straggler comes first, in JSON and at the top of
the terminal report; the rules file is checked as a usage error."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.analyses.findings import CATEGORIES

import tracekit
from tracekit.cli import main
from tracekit.testing import TraceBuilder

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import params

LATE_US = 2000  # rank 1's forward runs 2 ms longer: rank 0 waits 2 ms in each all-reduce


def _ranks(tmp_path: Path) -> Path:
    tmp_path.mkdir(exist_ok=True)
    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2)
        for s in range(3):
            base = 1000.0 + 10_000.0 * s
            late = LATE_US if r == 1 else 0
            with b.step():
                with b.forward():
                    b.kernel("sm80_xmma_gemm_bf16", 1000 + late, op="aten::mm", at_us=base)
                with b.backward():
                    arrive = base + 1000 + late + 10
                    end = base + 1000 + LATE_US + 10 + 50
                    b.comm("AllReduce", end - arrive, at_us=arrive, nelems=1 << 20, dtype="Float")
        b.write(tmp_path / f"rank{r}.json")
    return tmp_path


def _run(*args: str):
    res = CliRunner().invoke(main, ["analyze", *args, "--no-cache", "-j", "1"])
    return res


def test_a_planted_straggler_is_the_first_finding(tmp_path):
    d = _ranks(tmp_path)
    res = _run(str(d), "--format", "json")
    assert res.exit_code == 0, res.output
    first = json.loads(res.stdout)["tables"]["findings"][0]
    assert (first["rank"], first["category"]) == (0, "straggler_wait")
    assert first["ms"] == pytest.approx(LATE_US / 1e3, abs=1e-9)
    assert "rank 1 kept the others waiting most" in first["evidence"]
    text = _run(str(d), "--all", "--top", "5").stdout
    assert text.index("Findings") < text.index("Phases")
    assert " 1. straggler wait: 2.000 ms per step" in text


def test_a_rules_file_replaces_thresholds_and_bad_keys_are_usage_errors(tmp_path):
    d = _ranks(tmp_path / "t")
    rules = tmp_path / "rules.toml"
    rules.write_text("[straggler_wait]\nmin_ms = 5.0\n")
    res = _run(str(d), "--format", "json", "--findings", str(rules))
    found = json.loads(res.stdout)["tables"]["findings"]
    assert "straggler_wait" not in {f["category"] for f in found}
    rules.write_text("[straggler_wait]\nmin_seconds = 5.0\n")
    res = _run(str(d), "--findings", str(rules))
    assert res.exit_code == 2 and "unknown finding rule [straggler_wait]" in res.output


@pytest.mark.shared
@pytest.mark.parametrize("src", params())
def test_findings_on_real_traces_are_within_the_step(src):
    """Every finding of a shared trace costs 0 to 100% of its step, in a known category."""
    a = tracekit.load(src, cache=False, jobs=1)
    f = a.table("findings")
    assert set(f["category"]) <= set(CATEGORIES)
    assert ((f["ms"] >= 0) & (f["share_pct"].fillna(0) <= 100 + 1e-9)).all(), f


def test_one_rank_file_names_its_own_rank(tmp_path):
    """One rank's file (rank 3 of 4, read alone) has findings of rank 3, not 0: a single rank's
    tables have no ``rank`` column, and the findings take the run's one rank number."""
    b = TraceBuilder(rank=3, world_size=4)
    for _ in range(3):
        with b.step():
            with b.forward():
                b.kernel("sm80_xmma_gemm_bf16", 1000, op="aten::mm")
                b.cpu(8000)  # the host is busy: the next launch comes after the device went idle
                b.kernel("sm80_xmma_gemm_bf16", 1000, op="aten::mm")
    b.write(tmp_path / "rank3.json")
    res = _run(str(tmp_path / "rank3.json"), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["meta"]["ranks"] == [3]
    rows = doc["tables"]["findings"]
    assert rows and {r["rank"] for r in rows} == {3}
