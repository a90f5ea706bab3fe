"""The "no memory events" notice is said only by a run that read the memory events: a run asked
for other tables reads none, so it cannot tell (it said so of the samples recorded with
--profile-memory under ``--table layers``)."""

from __future__ import annotations

from pathlib import Path

import tracekit
from tracekit.ranks.meta import MEMORY_NOTICE
from tracekit.testing import TraceBuilder

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-train-recompute"


def _no_memory(tmp_path: Path) -> Path:
    b = TraceBuilder()
    with b.step():
        with b.forward():
            b.kernel("sm80_xmma_gemm_bf16", 1000, op="aten::mm")
    return b.write(tmp_path / "t.json")


def test_a_run_without_memory_tables_does_not_say_the_trace_has_no_memory_events():
    assert tracekit.load(SAMPLE, cache=False, jobs=1).meta["notices"].count(MEMORY_NOTICE) == 0
    only = tracekit.load(SAMPLE, cache=False, jobs=1, tables=["layers"])
    assert MEMORY_NOTICE not in only.meta["notices"]


def test_a_trace_without_memory_events_is_told_so_when_its_memory_tables_are_asked_for(tmp_path):
    path = _no_memory(tmp_path)
    assert MEMORY_NOTICE in tracekit.load(path, cache=False).meta["notices"]
    assert MEMORY_NOTICE in tracekit.load(path, cache=False, tables=["memory"]).meta["notices"]
    assert MEMORY_NOTICE not in tracekit.load(path, cache=False, tables=["layers"]).meta["notices"]
