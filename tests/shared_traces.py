"""Where the shared real traces live (../shared/traces beside the repository), if anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def _shared_dir() -> Path:
    """$TRACEKIT_SHARED_TRACES, else ../shared/traces beside the repository (a git worktree one
    level deeper, such as wt/NAME, looks one level further up)."""
    env = os.environ.get("TRACEKIT_SHARED_TRACES")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for up in (here.parents[2], here.parents[3]):
        if (up / "shared" / "traces").is_dir():
            return up / "shared" / "traces"
    return here.parents[2] / "shared" / "traces"


SHARED = _shared_dir()


def shared_traces() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.glob("*/*") if p.name.endswith((".json", ".json.gz")))


def params():
    """pytest params: one per shared trace, or one skipped param saying why there are none."""
    found = shared_traces()
    if not found:
        return [pytest.param(None, marks=pytest.mark.skip(
            reason=f"shared traces not found at {SHARED} (a user's clone has no ../shared)"))]
    return [pytest.param(p, id=p.name[:60]) for p in found]
