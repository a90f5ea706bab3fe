"""``tracekit capture sweep`` end to end on CPU (issue 30): the acceptance command as a user runs
it, what each method's capture measured, the ``throughput`` table of a capture directory, a
method whose dependency is absent, and the memory limit.

One sweep runs per module: ``--model tiny --methods naive,zero2,zero3,recompute,lora,qlora`` with
its defaults (2 warm-up + 3 profiled steps, 350 tokens), five captures of a 2-layer model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.capture.cli import capture

import tracekit

pytestmark = pytest.mark.capture
ACCEPTANCE = ["--model", "tiny", "--methods", "naive,zero2,zero3,recompute,lora,qlora"]
MIB = 1 << 20


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracekit.capture.cli", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "COLUMNS": "80", **(env or {})},
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "run"
    r = run_cli("sweep", *ACCEPTANCE, "--out", str(out))
    return out, r


def _rows(out: Path) -> dict[str, dict]:
    return {r["method"]: r for r in json.loads((out / "sweep.json").read_text())["rows"]}


def test_acceptance_sweep_writes_a_row_per_method(swept):
    out, r = swept
    assert r.returncode == 0, r.stderr + r.stdout
    rows = _rows(out)
    assert list(rows) == ["naive", "zero2", "zero3", "recompute", "lora", "qlora"]
    ran = [m for m, row in rows.items() if row["status"] == "ok"]
    assert len(ran) >= 4, {m: (row["status"], row["reason"]) for m, row in rows.items()}
    for m in ran:
        row = rows[m]
        assert row["tokens_per_s"] > 0 and row["samples_per_s"] > 0 and row["step_ms"] > 0
        assert row["tokens_per_s"] == pytest.approx(350 / (row["step_ms"] / 1e3))  # 1 rank, 350 tokens/step
        assert 50 < row["peak_mem_mb"] < 16384 and row["relative_throughput"] > 0
        assert row["reason"] is None and row["out"] == m and row["steps"] == 3
    for m, row in rows.items():
        if row["status"] != "ok":
            assert row["reason"] and "\n" not in row["reason"] and row["tokens_per_s"] is None, row
    assert rows["naive"]["relative_throughput"] == 1.0
    # QLoRA needs a CUDA GPU and bitsandbytes; on a CPU host it is a reason row
    if not tracekit_gpu():
        assert rows["qlora"]["status"] == "no-gpu" and "GPU" in rows["qlora"]["reason"]


def tracekit_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def test_the_sweep_is_read_at_80_columns_without_a_traceback(swept):
    out, r = swept
    assert "Traceback" not in r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert all(len(ln) <= 80 for ln in lines), [ln for ln in lines if len(ln) > 80]
    assert any(ln.split()[:2] == ["Naive", "ok"] for ln in lines), r.stdout
    assert lines[-2:] == [f"  {out / 'sweep.json'}", f"  {out / 'sweep.md'}"]
    assert lines[:2] == ["[1/6] naive (Naive)", lines[1]] and lines[1].startswith("    ok: ")
    md = (out / "sweep.md").read_text()
    for label in ("Naive", "Z2", "Z3", "R", "L", "QL"):
        assert f"\n| {label} | " in md


def test_each_method_is_its_own_capture_and_its_manifest_says_what_it_cost(swept):
    out, _ = swept
    rows = _rows(out)
    for m in (m for m, row in rows.items() if row["status"] == "ok"):
        doc = json.loads((out / m / "manifest.json").read_text())
        assert doc["status"] == "finished" and doc["command"].startswith("tracekit capture train ")
        [rank] = doc["ranks"]
        measures = rank["measures"]
        assert [s["step"] for s in measures["steps"]] == [2, 3, 4]  # ProfilerStep#2..4 after 2 warm-ups
        for s in measures["steps"]:
            assert s["wall_ms"] > 0 and s["tokens"] == 350 and s["samples"] == 1
            assert 50 * MIB < s["peak_rss_bytes"] < 16384 * MIB
        assert measures["units"]["wall_ms"] == "ms" and measures["units"]["peak_rss_bytes"] == "bytes"
        assert measures["sources"]["peak_rss_bytes"].startswith("VmHWM")
        assert "batch_size x seq_len" in measures["token"]
        job = doc["measures"]["job"]
        assert job["tokens_per_s"] == pytest.approx(rows[m]["tokens_per_s"])
        assert doc["measures"]["units"]["peak_mem_mb"] == "MiB"
    stage = json.loads((out / "zero3" / "manifest.json").read_text())["config"]["deepspeed"]
    assert stage["zero_optimization"]["stage"] == 3
    if rows["lora"]["status"] == "ok":
        assert json.loads((out / "lora" / "manifest.json").read_text())["options"]["finetune"] == "lora"


def test_analyze_shows_the_throughput_table_of_a_capture(swept):
    out, _ = swept
    a = tracekit.load(out / "naive", cache=False)
    per_step = a.table("throughput", per_step=True)
    steps = json.loads((out / "naive" / "manifest.json").read_text())["ranks"][0]["measures"]["steps"]
    assert per_step["step"].tolist() == [s["step"] for s in steps]
    assert per_step["step_ms"].tolist() == pytest.approx([s["wall_ms"] for s in steps])
    assert set(per_step["step"]) == set(a.meta["complete_steps"][0])  # the trace's steps
    mean = a.table("throughput")
    assert len(mean) == 1 and mean["peak_rss_mb"].iloc[0] == pytest.approx(
        max(s["peak_rss_bytes"] for s in steps) / MIB
    )
    assert mean["tokens_per_s"].iloc[0] == pytest.approx(_rows(out)["naive"]["tokens_per_s"])
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit.cli",
            "analyze",
            str(out / "naive"),
            "--table",
            "throughput",
            "--no-cache",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert r.returncode == 0, r.stderr
    assert "tokens/s" in r.stdout and "peak rss (MB)" in r.stdout
    assert all(len(ln) <= 80 for ln in r.stdout.splitlines())
    bare = next((out / "naive").glob("*.pt.trace.json.gz"))
    assert "throughput" not in tracekit.load(bare, cache=False).names()  # a bare trace has none


def test_a_method_whose_dependency_is_absent_is_a_reason_row(tmp_path, monkeypatch):
    """peft hidden: lora cannot run; qlora and flash are still tried (and need a GPU here)."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a)
    )
    out = tmp_path / "sweep"
    r = CliRunner().invoke(capture, ["sweep", "--methods", "lora,qlora,flash", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = _rows(out)
    assert rows["lora"]["status"] == "missing-dependency" and "peft" in rows["lora"]["reason"]
    assert [rows[m]["status"] != "ok" for m in ("qlora", "flash")] == [True, True]
    assert not (out / "lora").exists()  # stopped before anything ran


def test_a_run_over_the_memory_limit_is_stopped_and_does_not_fit(tmp_path):
    out = tmp_path / "sweep"
    r = run_cli(
        "sweep",
        "--methods",
        "naive",
        "--memory-limit",
        "64",
        "--warmup",
        "0",
        "--steps",
        "1",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr + r.stdout
    row = _rows(out)["naive"]
    assert row["status"] == "oom" and "over the memory limit of 64 MiB" in row["reason"], row
    manifest = json.loads((out / "naive" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "memory limit" in manifest["error"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--methods", "zero4"], "unknown method 'zero4'"),
        (["--methods", "naive", "--max-batch"], "--max-batch on a CPU host needs --memory-limit"),
        (["--methods", "naive", "--seq-len", "5000"], "exceeds the model's 1024 positions"),
    ],
)
def test_sweep_usage_errors_are_one_line(tmp_path, args, needle):
    if "--max-batch" in args and tracekit_gpu():
        pytest.skip("a GPU host bounds the search by its memory")
    r = run_cli("sweep", *args, "--out", str(tmp_path / "s"))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("tracekit: error: ") and needle in r.stderr and r.stderr.count("\n") == 1, (
        r.stderr
    )
    assert not (tmp_path / "s").exists()
