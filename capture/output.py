"""The output directory of a capture: what it holds, and never clobbering a previous run.

Layout (what torch.profiler.tensorboard_trace_handler writes, so TensorBoard's profiler plugin
and Perfetto open it, plus tracekit's files)::

    <out>/rank<R>.<ms>.pt.trace.json.gz   one Kineto trace per rank (gzip)
    <out>/manifest.json                   command, config, versions, hardware, git revision
    <out>/logs/deepspeed_config.json      training only: the generated DeepSpeed config
    <out>/logs/spec.json                  what the rank processes were asked to run
    <out>/logs/rank<R>.log                each rank's stdout and stderr
    <out>/logs/rank<R>.status.json        each rank's own report (steps finished, trace, error)

Only traces and the manifest sit at the top level, so a reader that takes every ``*.json`` /
``*.json.gz`` of a directory (except manifest.json) as a trace reads exactly the traces.
"""

from __future__ import annotations

import json
from pathlib import Path

from . import owned
from .errors import CaptureError

TRACE_SUFFIX = ".pt.trace.json.gz"
MANIFEST = "manifest.json"
DEEPSPEED_CONFIG = "logs/deepspeed_config.json"
LOGS = "logs"


def worker_name(rank: int) -> str:
    """The tensorboard trace handler's worker name for ``rank`` (the file name's first part)."""
    return f"rank{rank}"


def check_out(out: Path, force: bool) -> list[Path]:
    """Refuse an ``out`` that is not a directory, holds a previous run (unless ``force``) or holds
    files a capture did not write (:mod:`.owned`: by the previous run's manifest); writes
    nothing, so it can run before anything else does. Returns the files a forced run removes."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CaptureError(f"--out {out} exists and is not a directory")
    if not out.is_dir():
        return []
    if any(out.iterdir()) and not force:
        raise CaptureError(f"{out} is not empty (a previous run?); pass --force to replace it")
    files, foreign = owned.owned_capture(out)
    owned.refuse(out, foreign, "a capture")  # --force replaces a capture, never files it did not write
    return files


def prepare(out: Path, force: bool) -> Path:
    """Make ``out`` ready for a new run; refuse to touch a previous one unless ``force``."""
    out = Path(out)
    owned.remove(out, check_out(out, force))
    (out / LOGS).mkdir(parents=True, exist_ok=True)
    return out


def traces(out: Path) -> list[Path]:
    return sorted(Path(out).glob("*" + TRACE_SUFFIX))


def status_path(out: Path, rank: int) -> Path:
    return Path(out) / LOGS / f"rank{rank}.status.json"


def log_path(out: Path, rank: int) -> Path:
    return Path(out) / LOGS / f"rank{rank}.log"


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
