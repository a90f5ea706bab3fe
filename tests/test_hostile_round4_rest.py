"""Hostile input, round 4 (issue 39), what was left: huge memory numbers bounded on read, a
SIGTERM to the whole process group of a run with workers, and ``table("stragglers")`` of a run
without collectives.

As the other rounds (:mod:`test_hostile`): the real CLI in a subprocess under limits, checking
the promise of docs/security.md (exit 0 with right output, or exit 2 with one line; a signal
stops the run cleanly, its workers with it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from bad_inputs import mini_trace
from signal_harness import held_run, signal_group, stop_capture
from test_hostile import _env, _ranks, one_line, run, trace
from test_hostile_round4 import TINY, _rank_pid
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
    assert [(r["device"], r["events"], r["allocated_mb"], r["freed_mb"]) for r in rows] == [
        ("gpu:0", 2, 1, 1)
    ]
    a = tracekit.load(path, cache=False, jobs=1)
    assert "dropped 4 memory events" in " ".join(map(str, a.warnings))


def test_many_devices_of_huge_memory_bytes_stay_bounded(box):
    """Many devices whose every event is past the bound: nothing of them is kept or shown."""
    path = trace(box, "mem.json", _memory_doc(200, nbytes=2**70))
    p = run(box, "analyze", path, "--format", "json", "--no-cache")
    one_line(p, 0, "dropped 400 memory events")
    assert "memory" not in json.loads(p.stdout)["tables"]


# 2. A SIGTERM to the whole process group stops the run as one to the parent does -----------


def _group_pids(pgid: int) -> list[int]:
    got = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True, check=False)
    return [int(x) for x in got.stdout.split()]


@pytest.mark.parametrize("where", ["task", "start"])
def test_sigterm_to_the_process_group_with_jobs_is_one_line_and_exit_143(box, where):
    """``kill -TERM -- -PGID`` (``timeout``, a job scheduler) during ``analyze DIR -j 2``
    reaches the pool's workers as well as the parent: the run ends as one SIGTERM to the
    parent ends it: one line, exit 143, no worker left. The workers are held in their task
    or start-up (:data:`signal_harness.HELD`), so the signal cannot come after the run."""
    d = _ranks(box, 4)
    with held_run(where, ["analyze", d, "-j", "2", "--no-cache"], _env(box)) as p:
        assert len(_group_pids(p.pid)) >= 2  # the parent and a worker at least
        err = signal_group(p, signal.SIGTERM, "SIGTERM to the group")
    assert p.returncode == 143, (p.returncode, err)
    assert err.decode().splitlines() == ["tracekit: terminated"]
    end = time.monotonic() + 10
    while _group_pids(p.pid) and time.monotonic() < end:
        time.sleep(0.1)
    assert _group_pids(p.pid) == []


def _capture(args: list, out) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tracekit.capture.cli", *args, "--steps", "100000", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group: the signal goes to the launcher and its ranks
    )


def _stop_group(p: subprocess.Popen, rank: int) -> str:
    return stop_capture(p, lambda: os.killpg(p.pid, signal.SIGTERM), lambda: rank)


@pytest.mark.capture
def test_sigterm_to_the_capture_group_keeps_the_ranks_finished_steps(tmp_path):
    """SIGTERM to ``capture train``'s whole process group killed the rank at once (the default
    action), before it wrote its finished steps: "no finished step to keep", no trace. Now the
    rank stops as the launcher's SIGINT stops it: the same line, exit 143, manifest and trace
    as a SIGTERM to the launcher alone (test_hostile_round4)."""
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name)
    out = tmp_path / "run"
    p = _capture(["train", *TINY, "--warmup", "1"], out)
    err = _stop_group(p, _rank_pid(out, p))
    assert p.returncode == 143, (p.returncode, err)
    [line] = err.strip().splitlines()
    assert line.startswith("tracekit: error: capture terminated (SIGTERM)") and "traces kept: rank0." in line
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["error"], (m["status"], m["error"])
    [rank] = m["ranks"]
    assert rank["state"] == "interrupted" and rank["error"].startswith("terminated (SIGTERM) after")
    assert rank["exit_code"] == 143 and m["traces"] == [rank["trace"]]
    assert (out / rank["trace"]).stat().st_size > 0


@pytest.mark.capture
def test_sigterm_to_the_sweep_group_keeps_the_first_methods_trace(tmp_path):
    """The same for ``capture sweep``: its method's rank keeps its finished steps, every later
    method is ``not-run``, exit 143, one line."""
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name)
    out = tmp_path / "sweep"
    p = _capture(["sweep", *TINY, "--methods", "naive,zero2"], out)
    err = _stop_group(p, _rank_pid(out / "naive", p))
    assert p.returncode == 143, (p.returncode, err)
    [line] = err.strip().splitlines()
    assert line.startswith("tracekit: error: sweep terminated (SIGTERM)"), line
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["interrupted", "not-run"], rows
    m = json.loads((out / "naive" / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["traces"], m


# 3. table("stragglers") of a run without collectives ---------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_cross_rank_tables_of_ranks_without_collectives_are_empty(box, jobs):
    """Reported: ``table("stragglers")`` raised KeyError on a run with no collectives (fixed
    on main by d293003 for the mean view); the per-step view and a pool of workers too."""
    from tracekit.analyses.cross_rank import MATCH_COLUMNS, STRAGGLER_COLUMNS

    a = tracekit.load(_ranks(box, 2), cache=False, jobs=jobs)
    assert {"stragglers", "collective_matches"} <= set(a.names())
    for name, columns in (("stragglers", STRAGGLER_COLUMNS), ("collective_matches", MATCH_COLUMNS)):
        assert list(a.table(name).columns) == columns and a.table(name).empty
        per_step = a.table(name, per_step=True)
        assert per_step.empty and set(columns) <= set(per_step.columns), list(per_step.columns)
    assert a.tables()["stragglers"].empty


def test_a_cross_rank_table_of_one_rank_says_why_it_is_not_there(box):
    """One rank: ``stragglers`` does not apply (names() leaves it out); the KeyError said
    "unknown table", as for a misspelt name. It says why now; a misspelt name stays unknown."""
    a = tracekit.load(trace(box), cache=False, jobs=1)
    assert "stragglers" not in a.names()
    with pytest.raises(KeyError, match="'stragglers': compares ranks, and this run has one; tables: "):
        a.table("stragglers")
    with pytest.raises(KeyError, match="'straglers': unknown; tables: "):
        a.table("straglers")
