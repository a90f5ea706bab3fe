"""Where the shared real traces live (../shared/traces beside the repository), if anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "traces"


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
