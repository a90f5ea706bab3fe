"""Run a multi-process gloo capture script for a test, as its traces are what the test reads.

torch's gloo backend sometimes aborts a rank at teardown ("terminate called without an active
exception", SIGABRT), after every rank has exported its trace: that is torch's exit, not the
capture. A run counts when every rank's trace is there and is JSON, whatever the exit status;
a run without them is tried once more before the test fails with its stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_capture(script: Path, out: Path, ranks: int, attempts: int = 2) -> None:
    """Run ``script out`` until ``out`` holds ``rank{i}.json`` for each of ``ranks`` ranks."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    err = ""
    for _ in range(attempts):
        for f in out.glob("rank*.json"):
            f.unlink()
        r = subprocess.run(
            [sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300, env=env
        )
        if all(_complete(out / f"rank{i}.json") for i in range(ranks)):
            return
        err = f"exit {r.returncode}: {r.stderr[-3000:]}"
    raise AssertionError(f"the capture wrote no complete trace per rank in {attempts} runs; last {err}")


def _complete(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (OSError, ValueError):
        return False
