"""Hostile input, round 4 (issue 39), what was left: huge memory numbers bounded on read, a
SIGTERM to the whole process group of a run with workers, and ``table("stragglers")`` of a run
without collectives.

As the other rounds (:mod:`test_hostile`): the real CLI in a subprocess under limits, checking
the promise of docs/security.md (exit 0 with right output, or exit 2 with one line; a signal
stops the run cleanly, its workers with it).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from bad_inputs import mini_trace
from test_hostile import one_line, run, trace
from test_hostile_round4_numbers import _memory_doc

import tracekit
import tracekit.read.reader as R
from tracekit.read.memory_bound import MAX_MEMORY_BYTES

MIB = 1 << 20


@pytest.fixture
def box(tmp_path):
    for d in ("in", "home", "xdg", "cache"):
        (tmp_path / d).mkdir()
    return tmp_path


# 1. Memory numbers past what a device can hold are dropped on read, by both readers -------


def _planted(field: str, value) -> dict:
    """The mini trace with, on GPU 0 in step 1, a planted 1 MiB allocation and its free, and
    between them one event whose ``field`` is ``value`` (the others plain)."""
    doc = mini_trace()
    ev = {"ph": "i", "s": "t", "cat": "[memory]", "name": "[memory]", "pid": 1, "tid": 1}
    dev = {"Device Type": 1, "Device Id": 0}
    rows = [(1010, 1, MIB, MIB), (1015, 2, 4096, MIB + 4096), (1027, 1, -MIB, 4096)]
    for i, (ts, addr, nbytes, total) in enumerate(rows):
        args = {**dev, "Addr": addr, "Bytes": nbytes, "Total Allocated": total, "Total Reserved": 2 * MIB}
        if i == 1:
            args[field] = value
        doc["traceEvents"].append({**ev, "ts": ts, "args": args})
    return doc


def _read_both(path, monkeypatch):
    got = []
    for native in ("1", "0"):
        monkeypatch.setenv("TRACEKIT_NATIVE", native)
        raw = R.read_trace(path)
        got.append((raw.memory, raw.warnings))
    (mem, warnings), (mem2, warnings2) = got
    import pandas as pd

    pd.testing.assert_frame_equal(mem, mem2)
    assert warnings == warnings2
    return mem, warnings


FIELDS = ["Bytes", "Total Allocated", "Total Reserved"]
HUGE = [2**50, -(2**50), 1e300, -1e300, 2**70, 2**64 + 1, 1.5e308, float(2**50)]


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", HUGE, ids=repr)
def test_memory_numbers_past_the_bound_are_dropped_by_both_readers(tmp_path, monkeypatch, field, value):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_planted(field, value)))
    mem, warnings = _read_both(path, monkeypatch)
    assert len(mem) == 2  # the planted allocation and free, not the hostile event
    assert mem["bytes"].tolist() == [MIB, -MIB]
    assert warnings == [
        "dropped 1 memory events whose Bytes or Total is 2^50 (1 PiB) or more: no device holds that much"
    ]


@pytest.mark.parametrize("field", FIELDS)
def test_memory_numbers_under_the_bound_are_kept(tmp_path, monkeypatch, field):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_planted(field, 2**50 - 1)))
    mem, warnings = _read_both(path, monkeypatch)
    assert len(mem) == 3 and warnings == []
    assert np.abs(mem[["bytes", "total_allocated", "total_reserved"]].to_numpy()).max() == 2**50 - 1
    assert MAX_MEMORY_BYTES == 2.0**50


def test_memory_bound_counts_every_dropped_event_in_one_line(box):
    """1e300 and 2**70 on memory events flowed into sums and peaks; now: one notice counting
    them, and the memory table holds the planted numbers alone (1 MiB allocated and freed)."""
    doc = _planted("Bytes", 1e300)
    extra = [e for e in doc["traceEvents"] if e.get("cat") == "[memory]"][1]
    for i, v in enumerate((2**70, -1e300, 1e301)):
        doc["traceEvents"].append({**extra, "ts": 1020 + i, "args": {**extra["args"], "Bytes": v}})
    path = trace(box, "mem.json", doc)
    p = run(box, "analyze", path, "--format", "json", "--table", "memory", "--per-step", "--no-cache")
    one_line(p, 0, "dropped 4 memory events whose Bytes or Total is 2^50 (1 PiB) or more")
    rows = [r for r in json.loads(p.stdout)["tables"]["memory"] if r["step"] == 1 and r["phase"] == "step"]
    assert [(r["device"], r["events"], r["allocated_mb"], r["freed_mb"]) for r in rows] == [("gpu:0", 2, 1, 1)]
    a = tracekit.load(path, cache=False, jobs=1)
    assert "dropped 4 memory events" in " ".join(map(str, a.warnings))


def test_many_devices_of_huge_memory_bytes_stay_bounded(box):
    """Many devices whose every event is past the bound: nothing of them is kept or shown."""
    path = trace(box, "mem.json", _memory_doc(200, nbytes=2**70))
    p = run(box, "analyze", path, "--format", "json", "--no-cache")
    one_line(p, 0, "dropped 400 memory events")
    assert "memory" not in json.loads(p.stdout)["tables"]
