"""Helpers of the untrusted-input tests: a tiny valid trace, and the CLI's one-line-error contract.

``mini_trace`` is the smallest trace every analysis step takes: N ProfilerStep ranges on a main
thread, one CPU op per step, a runtime launch inside it and the kernel it launches (linked by
correlation id). Tests mutate it into the odd or broken shapes strangers send.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import main

ERROR_PREFIX = "tracekit: error: "


def mini_trace(steps: int = 3, kernels: int = 2, step_us: int = 100) -> dict:
    events: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    ]
    corr = 1
    for s in range(steps):
        t0 = 1000 + s * step_us
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{s + 1}",
                "pid": 1,
                "tid": 1,
                "ts": t0,
                "dur": step_us - 5,
            }
        )
        for k in range(kernels):
            t = t0 + 5 + k * 40
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 1,
                    "tid": 1,
                    "ts": t,
                    "dur": 30,
                    "args": {"External id": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "pid": 1,
                    "tid": 1,
                    "ts": t + 2,
                    "dur": 5,
                    "args": {"correlation": corr, "External id": corr},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"gemm_kernel_{k}",
                    "pid": 0,
                    "tid": 7,
                    "ts": t + 10,
                    "dur": 20,
                    "args": {"correlation": corr, "stream": 7, "device": 0},
                }
            )
            corr += 1
    return {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "deviceProperties": [{"id": 0, "name": "Test GPU"}],
        "traceEvents": events,
    }


def write(path: Path, trace_or_bytes) -> Path:
    """Write a dict as JSON (gzip when the name ends in .gz), or raw bytes as they are."""
    path = Path(path)
    data = trace_or_bytes if isinstance(trace_or_bytes, bytes) else json.dumps(trace_or_bytes).encode()
    if path.name.endswith(".gz") and not isinstance(trace_or_bytes, bytes):
        data = gzip.compress(data)
    path.write_bytes(data)
    return path


def fingerprint(path: Path) -> tuple:
    """Content hash, size and mtime: the input must be left untouched."""
    st = os.stat(path)
    return hashlib.sha256(Path(path).read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns


def analyze(*args: str):
    """``tracekit analyze ARGS`` in-process; click >= 8.2 keeps stderr apart from stdout."""
    return CliRunner().invoke(main, ["analyze", *map(str, args)], catch_exceptions=True)


def assert_one_line_error(result, path: Path | str, *needles: str) -> str:
    """Exit 2, exactly one stderr line naming the file, no traceback, nothing on stdout."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"exception escaped: {result.exception!r}"
    )
    assert result.exit_code == 2, (result.exit_code, result.stderr, result.stdout)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith(ERROR_PREFIX), line
    assert str(path) in line, f"the message does not name the file: {line}"
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    for needle in needles:
        assert needle.lower() in line.lower(), f"{needle!r} not in {line!r}"
    return line


def warnings_of(result) -> list[str]:
    return [ln for ln in result.stderr.splitlines() if ln.startswith("tracekit: warning: ")]
