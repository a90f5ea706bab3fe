"""What the benchmark scripts share: where the real traces are."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def shared_traces() -> Path:
    """``$TRACEKIT_SHARED_TRACES``, else ``shared/traces`` beside the repository (or beside the
    folder of its git worktree)."""
    env = os.environ.get("TRACEKIT_SHARED_TRACES")
    if env:
        return Path(env)
    for up in (ROOT.parent, ROOT.parent.parent):
        if (up / "shared" / "traces").is_dir():
            return up / "shared" / "traces"
    return ROOT.parent / "shared" / "traces"
