"""Busy time per step against TraceLens's reference on single-step public traces (issue 12).

tests/data/tracelens_busy_reference.json holds TraceLens's ``busy_time`` for every ../shared
trace with one step, measured with TraceLens itself (its source and commit are in the file;
TraceLens is not installable from PyPI, so CI reads the recorded numbers). The issue's bar is
3%. tracekit counts memsets as device activity (DESIGN.md) where TraceLens does not: on the
normalization test (26.6 us of memset in 1.019 ms) that is the whole 2.7% difference.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from shared_traces import SHARED

import tracekit

pytestmark = pytest.mark.shared

REFERENCE = json.loads((Path(__file__).parent / "data" / "tracelens_busy_reference.json").read_text())
TOLERANCE = 0.03


@pytest.mark.parametrize("rel", sorted(REFERENCE["traces"]))
def test_busy_time_agrees_with_tracelens(tmp_path, rel):
    src = SHARED / rel
    if not src.is_file():
        pytest.skip(f"shared traces not found at {SHARED}")
    path = tmp_path / src.name
    shutil.copy(src, path)
    idle = tracekit.load(path, cache=False, jobs=1).table("idle", per_step=True)
    assert len(idle) == 1
    want = REFERENCE["traces"][rel]
    assert idle["busy_ms"].iat[0] == pytest.approx(want["busy_time"], rel=TOLERANCE)
    assert idle["window_ms"].iat[0] == pytest.approx(want["total_time"], rel=TOLERANCE)
