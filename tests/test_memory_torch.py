"""The memory tables on real torch traces recorded with profile_memory=True (CPU, this torch).

tests/hf_cpu_captures.py records a tiny Llama as a stranger would (plain torch.profiler,
``profile_memory=True``): a training step, the same with activation checkpointing, and
``generate()``. The step rows must match the independent reading of tests/memory_oracle.py;
the module view must show what the physics says: training holds activations after forward and
backward frees them; checkpointing holds less and reallocates in backward (recompute); an
inference step has no backward; and each event counts once (the module rows add up to the
phase rows of the memory table).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main

sys.path.insert(0, str(Path(__file__).parent))
from memory_oracle import reading

CAPTURES = ["llama@memory", "llama+ckpt@memory", "llama+generate@memory"]
pytestmark = pytest.mark.capture


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("memory_cpu")
    script = Path(__file__).parent / "hf_cpu_captures.py"
    subprocess.run([sys.executable, str(script), str(out), *CAPTURES], check=True, timeout=1800)
    return out


def _tables(path: Path) -> dict:
    a = tracekit.load(path, cache=False, jobs=1)
    return {n: a.table(n, per_step=True) for n in ("memory", "memory_modules")}


@pytest.mark.parametrize("name", CAPTURES)
def test_step_rows_match_the_independent_reading(captures: Path, name: str) -> None:
    path = captures / f"{name}.json"
    truth = reading(path)
    rows = _tables(path)["memory"]
    whole = rows[rows["phase"] == "step"]
    assert {(int(s), d) for s, d in zip(whole["step"], whole["device"])} == set(truth)
    for r in whole.itertuples(index=False):
        t = truth[(int(r.step), r.device)]
        assert r.events == t["events"]
        assert r.peak_allocated_mb == pytest.approx(t["peak_allocated_mb"], rel=0.01)
        assert r.peak_growth_mb == pytest.approx(t["peak_growth_mb"], rel=0.01)


@pytest.mark.parametrize("name", CAPTURES)
def test_each_event_counts_in_one_module_row(captures: Path, name: str) -> None:
    t = _tables(captures / f"{name}.json")
    mem, mods = t["memory"], t["memory_modules"]
    for phase, column in (("forward", "forward_allocated_mb"), ("backward", "backward_allocated_mb")):
        rows = mem[mem["phase"] == phase].set_index("step")["allocated_mb"]
        by_step = mods.groupby("step")[column].sum() + (
            mods.groupby("step")["recompute_allocated_mb"].sum() if phase == "backward" else 0
        )
        assert by_step.reindex(rows.index).to_numpy() == pytest.approx(rows.to_numpy(), rel=1e-9)
    assert (mods["held_mb"] <= mods["forward_allocated_mb"] + 1e-12).all()


def test_training_holds_activations_and_checkpointing_holds_less(captures: Path) -> None:
    plain = _tables(captures / "llama@memory.json")["memory_modules"]
    ckpt = _tables(captures / "llama+ckpt@memory.json")["memory_modules"]
    held = plain.groupby("module")["held_mb"].sum()
    # saved for backward: the norms' inputs and inverse RMS, the MLP's activation inputs (the
    # q/k/v outputs are not: the rotary ops and repeat_kv copy them before anything saves them)
    assert held["MLP"] > 0 and held["RMSNorm"] > 0
    assert plain["backward_freed_mb"].sum() > 0
    assert ckpt["held_mb"].sum() < held.sum()
    assert plain["recompute_allocated_mb"].sum() == 0 < ckpt["recompute_allocated_mb"].sum()


def test_inference_has_no_backward(captures: Path) -> None:
    t = _tables(captures / "llama+generate@memory.json")
    assert set(t["memory"]["phase"]) == {"step", "forward"}
    assert (t["memory_modules"][["backward_allocated_mb", "backward_freed_mb"]] == 0).all().all()


def test_html_report_has_a_memory_chart_per_step(captures: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    res = CliRunner().invoke(
        main, ["analyze", str(captures / "llama@memory.json"), "--format", "html", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "Memory over time, step 1" in page and "Memory over time, step 2" in page
    assert "peak" in page and 'id="t-memory"' in page and 'id="t-memory_timeline"' not in page
