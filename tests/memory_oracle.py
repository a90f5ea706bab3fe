"""An independent reading of a trace's ``[memory]`` events, written without tracekit's code.

docs/metrics.md ("Memory") defines the memory table; this is its per-step rule read literally,
with plain ``json``:

* a memory event is an event named ``[memory]`` whose args carry ``Bytes`` (positive: an
  allocation, negative: a free) and ``Device Type`` / ``Device Id``; new formats add ``Total
  Allocated`` and ``Total Reserved`` (the device's totals after the event), torch 1.9 has
  ``Bytes`` only;
* its device: Device Type 0 is ``cpu``, 1 (CUDA) and 6 (HIP, ROCm) are ``gpu:<Device Id>``;
* its step: the ``ProfilerStep#N`` range (``ph: X``) of its process that holds its timestamp,
  ``[ts, ts + dur)``; a process with no step ranges is placed by time among all of them. A
  trace with no ProfilerStep has steps 1, 2... bounded by its ``Optimizer.step#`` ranges (each
  step ends where one ends; the first begins at the trace's first event other than a memory
  event), and with fewer than two of those is one step, numbered 0;
* per step and device, the events in time order (equal times in file order):
  ``peak_allocated_mb`` is the highest ``Total Allocated`` (None where no event records it);
  ``peak_growth_mb`` is the largest rise above the allocation at the step's start: with totals,
  the highest total minus (the first event's total minus its bytes); without, the highest
  running sum of ``Bytes`` from 0; never below 0.

MB is 2**20 bytes (MiB, as torch's memory statistics count them). Used by
tests/test_memory_real.py, which compares tracekit's ``memory`` table with it.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

MB = float(1 << 20)
#: PyTorch's c10::DeviceType codes of the devices the table names.
CPU, CUDA, HIP = 0, 1, 6


def _events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def device_name(args: dict) -> str:
    kind, index = int(args.get("Device Type", -1)), int(args.get("Device Id", -1))
    if kind == CPU:
        return "cpu"
    if kind in (CUDA, HIP):
        return f"gpu:{index}"
    return f"device{kind}:{index}"


def _steps(events: list[dict]) -> list[tuple[int, object, float, float]]:
    """(number, pid, start, end) of every ProfilerStep range, times in microseconds; with none,
    the steps the ``Optimizer.step#`` ranges bound (two or more): step k ends where the k-th
    one ends and begins where the one before ended (the first: at the trace's first event)."""
    out, optimizer = [], []
    for e in events:
        name = str(e.get("name", ""))
        if e.get("ph") != "X" or str(e.get("cat", "")).startswith("gpu_"):
            continue  # a GPU-side projection (gpu_user_annotation) is not the CPU range
        start = float(e["ts"])
        end = start + float(e.get("dur", 0))
        if name.startswith("ProfilerStep#"):
            out.append((int(name.split("#", 1)[1]), e.get("pid"), start, end))
        elif name.startswith("Optimizer.step#"):
            optimizer.append((end, e.get("pid")))
    if out or len(optimizer) < 2:
        return out
    first = min(float(e["ts"]) for e in events if "ts" in e and e.get("name") != "[memory]")
    optimizer.sort(key=lambda r: r[0])
    starts = [first] + [end for end, _ in optimizer[:-1]]
    return [(k + 1, pid, lo, end) for k, ((end, pid), lo) in enumerate(zip(optimizer, starts))]


def _step_of(pid, ts: float, steps: list) -> int | None:
    own = [s for s in steps if s[1] == pid]
    for number, _, start, end in own or steps:
        if start <= ts < end:
            return number
    return None


def reading(path: Path) -> dict[tuple[int, str], dict]:
    """``{(step, device): {"events", "peak_allocated_mb", "peak_growth_mb"}}`` of a trace."""
    events = _events(path)
    steps = _steps(events)
    rows: dict[tuple[int, str], list] = defaultdict(list)
    for i, e in enumerate(events):
        args = e.get("args") or {}
        if e.get("name") != "[memory]" or "Bytes" not in args:
            continue
        ts = float(e["ts"])
        step = _step_of(e.get("pid"), ts, steps) if steps else 0
        if step is not None:
            rows[(step, device_name(args))].append((ts, i, args))
    return {key: _peaks(sorted(evs, key=lambda r: (r[0], r[1]))) for key, evs in rows.items()}


def _peaks(evs: list) -> dict:
    totals = [a.get("Total Allocated") for _, _, a in evs]
    recorded = [t for t in totals if isinstance(t, (int, float))]
    if len(recorded) == len(evs):
        first = evs[0][2]
        base = first["Total Allocated"] - first["Bytes"]
        growth = max(recorded) - base
    else:
        level, growth = 0, 0
        for _, _, a in evs:
            level += a["Bytes"]
            growth = max(growth, level)
    return {
        "events": len(evs),
        "peak_allocated_mb": max(recorded) / MB if recorded else None,
        "peak_growth_mb": max(growth, 0) / MB,
    }
