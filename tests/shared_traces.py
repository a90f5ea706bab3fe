"""The one definition of where the shared real traces (and the paper text) live, if anywhere.

``../shared`` beside the repository (a git worktree one level deeper, such as wt/NAME, looks one
level further up), or ``$TRACEKIT_SHARED_TRACES`` for the traces. Tests never write there: they
use :func:`shared_trace` (skips with the reason when absent) and copy into tmp_path what a
write could touch, or :func:`copy_shared`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _shared_root() -> Path:
    """The ``shared`` folder beside the repository (or beside its worktree folder)."""
    here = Path(__file__).resolve()
    for up in (here.parents[2], here.parents[3]):
        if (up / "shared" / "traces").is_dir():
            return up / "shared"
    return here.parents[2] / "shared"


def _shared_dir() -> Path:
    """$TRACEKIT_SHARED_TRACES, else ``<shared>/traces``."""
    env = os.environ.get("TRACEKIT_SHARED_TRACES")
    return Path(env) if env else _shared_root() / "traces"


SHARED = _shared_dir()
PAPER_MD = _shared_root() / "paper" / "dissecting-llm-runtime-performance.md"


def shared_traces() -> list[Path]:
    if not SHARED.is_dir():
        return []
    return sorted(p for p in SHARED.glob("*/*") if p.name.endswith((".json", ".json.gz")))


def shared_trace(rel: str) -> Path:
    """``SHARED / rel``; skips the calling test, saying which trace is missing, when absent."""
    p = SHARED / rel
    if not p.is_file():
        pytest.skip(f"shared trace {rel} not found under {SHARED} (a user's clone has no ../shared)")
    return p


def copy_shared(rel: str, dest: Path) -> Path:
    """A copy of a shared trace in ``dest`` (skips when absent), for tests that write beside it."""
    dest.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(shared_trace(rel), dest / Path(rel).name))


def params():
    """pytest params: one per shared trace, or one skipped param saying why there are none;
    each marked ``shared`` (``-m "not shared"`` leaves them out)."""
    found = shared_traces()
    if not found:
        return [
            pytest.param(
                None,
                marks=[
                    pytest.mark.shared,
                    pytest.mark.skip(
                        reason=f"shared traces not found at {SHARED} (a user's clone has no ../shared)"
                    ),
                ],
            )
        ]
    return [pytest.param(p, id=p.name[:60], marks=pytest.mark.shared) for p in found]


def is_shared(path: Path) -> bool:
    """Whether ``path`` is one of the shared traces (not a sample or a tmp file)."""
    return SHARED in Path(path).parents


def param(src: Path, id: str | None = None):
    """A pytest param of ``src``, marked ``shared`` when it is a shared trace (a list of sources
    can mix them with the repository's sample traces)."""
    return pytest.param(src, id=id, marks=[pytest.mark.shared] if is_shared(src) else [])
