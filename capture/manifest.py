"""manifest.json: what made a capture (command line, config, versions, hardware, git revision)."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from .measure import manifest_block

PACKAGES = (
    "tracekit",
    "torch",
    "deepspeed",
    "transformers",
    "peft",
    "bitsandbytes",
    "flash-attn",
    "lightllm",
    "numpy",
)


def package_versions(names=PACKAGES) -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host() -> dict:
    """The host's CPU side; GPUs come from the ranks (they have torch imported)."""
    return {
        "hostname": platform.node(),
        "os": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": _memory_bytes(),
    }


def git_revision(path: Path | None = None) -> dict | None:
    """Commit and dirtiness of the git checkout tracekit runs from, else None."""
    path = Path(path or Path(__file__).resolve().parent)
    try:
        commit = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def command_line(argv: list[str] | None = None) -> str:
    argv = list(sys.argv if argv is None else argv)
    if argv:
        argv[0] = Path(argv[0]).name
    return shlex.join(argv)


def manifest(
    *,
    kind: str,
    argv: list[str] | None,
    options: dict,
    config: dict,
    env: dict,
    ranks: list[dict],
    status: str,
    started: str,
    error: str | None = None,
    written_by: str | None = None,
    files: list[str] | None = None,
) -> dict:
    """The manifest of a run. ``ranks`` are the per-rank status reports; ``written_by`` the
    tool and ``files`` what it wrote (its traces added), which ``--force`` alone removes."""
    devices = next((r.get("devices") for r in ranks if r.get("devices")), None)
    return {
        "tracekit_capture": 1,
        "kind": kind,
        "written_by": written_by or f"tracekit capture {kind}",
        "status": status,
        "error": error,
        "command": command_line(argv),
        "argv": list(sys.argv if argv is None else argv),
        "started": started,
        "finished": now(),
        "options": options,
        "config": config,
        "environment": env,
        "versions": package_versions(),
        "hardware": {**host(), "devices": devices},
        "git": git_revision(),
        "ranks": ranks,
        "measures": manifest_block(ranks),
        "traces": [r["trace"] for r in ranks if r.get("trace")],
        "files": [*(files or []), *(r["trace"] for r in ranks if r.get("trace"))],
    }


def now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
