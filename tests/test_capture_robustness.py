"""Capture robustness (issue 6, item 5): a run interrupted with Ctrl-C, or whose training step
raises, keeps the traces of the steps already finished and a manifest that says what happened,
and its exit status says it failed.

Real (tiny) DeepSpeed captures on CPU, as a user runs them: ``tracekit capture train`` in its own
process. Fault injection: ``TRACEKIT_CAPTURE_FAIL_AT_STEP=N`` makes step N raise (capture/train.py).
Ctrl-C: SIGINT to the capture's whole process group, as a terminal sends it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.capture

TINY = ["--model", "tiny", "--layers", "2", "--seq-len", "32", "--batch-size", "1", "--no-stack"]


def _needs_capture_stack():
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name, reason=f"capture needs {name} (pip install 'tracekit[capture]')")


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "tracekit.capture.cli", "train", *TINY, *args]


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _traces(out: Path) -> list[Path]:
    return sorted(out.glob("*.pt.trace.json*"))


def _status(out: Path, rank: int = 0) -> dict:
    try:
        return json.loads((out / "logs" / f"rank{rank}.status.json").read_text())
    except (OSError, ValueError):
        return {}


def _analyse(out: Path):
    import tracekit

    return tracekit.load(out, cache=False, jobs=1)


def test_a_step_that_raises_keeps_finished_steps_and_says_so(tmp_path):
    _needs_capture_stack()
    out = tmp_path / "run"
    r = subprocess.run(
        _cmd("--warmup", "1", "--steps", "4", "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TRACEKIT_CAPTURE_FAIL_AT_STEP": "3"},
    )  # 1 warm-up + 2 recorded
    assert r.returncode != 0, "a failed capture must not exit 0"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), r.stderr
    assert "Traceback" not in r.stderr
    m = _manifest(out)
    assert m["status"] == "failed", m["status"]
    assert "failure injected at step 3" in m["error"]
    assert m["ranks"][0]["completed_steps"] == 2
    [trace] = _traces(out)
    assert m["ranks"][0]["trace"] == trace.name
    # The kept trace analyses: the two finished steps are complete; the crashed one is not.
    a = _analyse(out)
    assert a.meta["complete_steps"][0][:2] == [1, 2]
    assert a.tables()["phases"]["wall_ms"].sum() > 0


def _start(out: Path, steps: int) -> subprocess.Popen:
    return subprocess.Popen(
        _cmd("--warmup", "1", "--steps", str(steps), "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )  # its own process group, like a terminal job


def _wait_for_steps(p: subprocess.Popen, out: Path, n: int, timeout: float = 300) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        done = _status(out).get("completed_steps", 0)
        if done >= n:
            return done
        if p.poll() is not None:
            pytest.fail(f"capture ended before {n} steps: {p.communicate()}")
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)
    pytest.fail(f"no {n} finished steps within {timeout} s")


def test_ctrl_c_keeps_finished_steps_and_a_manifest_that_says_interrupted(tmp_path):
    _needs_capture_stack()
    out = tmp_path / "run"
    p = _start(out, steps=100_000)  # would run for hours: only Ctrl-C ends it
    try:
        done = _wait_for_steps(p, out, 3)
        os.killpg(p.pid, signal.SIGINT)
        _stdout, stderr = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode != 0, "an interrupted capture must not exit 0"
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), stderr
    assert "interrupt" in lines[0].lower(), lines[0]
    m = _manifest(out)
    assert m["status"] in ("interrupted", "failed"), m["status"]
    assert "interrupt" in (m.get("error") or "").lower(), m.get("error")
    assert m["ranks"] and m["ranks"][0]["completed_steps"] >= done
    traces = _traces(out)
    assert traces, f"the {done}+ finished steps were not kept: {sorted(os.listdir(out))}"
    a = _analyse(out)
    assert len(a.meta["complete_steps"][0]) >= done - 1


def test_ctrl_c_before_the_first_step_leaves_an_honest_manifest(tmp_path):
    _needs_capture_stack()
    out = tmp_path / "run"
    p = _start(out, steps=3)
    try:
        end = time.monotonic() + 120
        while not (out / "manifest.json").exists() and time.monotonic() < end:
            time.sleep(0.02)
        os.killpg(p.pid, signal.SIGINT)
        _, stderr = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode != 0
    assert "Traceback" not in stderr, stderr
    m = _manifest(out)
    assert m["status"] != "running", "the manifest still claims the capture is running"
