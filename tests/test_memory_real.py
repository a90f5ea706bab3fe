"""The memory table on the real traces that record memory, against an independent reading.

tests/memory_oracle.py reads each trace's ``[memory]`` events with plain ``json`` and the rule
of docs/metrics.md ("Memory"); tracekit's per-step ``memory`` rows of the whole step (``phase``
``step``) must match it within 1% on every device: the event count exactly, the peak
allocation and the peak growth. The three shared traces that record memory cover the new
format on CUDA (HTA's df_index_resolver: 26,770 CUDA events), on ROCm (TraceLens's
normalization test: Device Type 6, no ProfilerStep), torch 1.9's (the Kineto ResNet-50
sample: ``Bytes`` only, so growth from the running sum and no peak allocation), and CPU
allocations in steps inferred from ``Optimizer.step`` ranges (TraceLens's DDP ResNet-18).
"""

from __future__ import annotations

import gzip
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from memory_oracle import reading
from shared_traces import copy_shared, shared_traces

import tracekit

pytestmark = pytest.mark.shared

MEMORY_TRACES = [
    "hta/df_index_resolver__df_index_resolver.json.gz",
    "kineto/tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    "tracelens/perf_model__normalization__normalization_layer_test.json.gz",
    "tracelens/mi300__ddp_resnet18_no_pool__train_resnet18.json.gz",
]


def _close(ours: float, truth: float | None) -> bool:
    if truth is None:
        return ours is None or math.isnan(ours)
    return abs(ours - truth) <= 0.01 * abs(truth) + 1e-9


@pytest.mark.parametrize("name", MEMORY_TRACES)
def test_step_peaks_match_an_independent_reading(name, tmp_path):
    path = copy_shared(name, tmp_path)
    truth = reading(path)
    a = tracekit.load(path, cache=False, jobs=1)
    rows = a.table("memory", per_step=True)
    rows = rows[rows["phase"] == "step"]
    assert len(rows), "no memory rows"
    gpus = 0
    for r in rows.itertuples(index=False):
        t = truth[(int(r.step), str(r.device))]
        assert r.events == t["events"], (r.step, r.device)
        assert _close(r.peak_allocated_mb, t["peak_allocated_mb"]), (r.step, r.device, r.peak_allocated_mb, t)
        assert _close(r.peak_growth_mb, t["peak_growth_mb"]), (r.step, r.device, r.peak_growth_mb, t)
        gpus += str(r.device).startswith("gpu:")
    assert gpus >= 1 or not any(d.startswith("gpu:") for _, d in truth)
    (complete,) = (set(s) for s in a.meta["complete_steps"].values())
    assert {s for s, _ in truth if s in complete} == set(rows["step"].astype(int))


def test_every_shared_trace_that_records_memory_is_checked():
    found = shared_traces()
    if not found:
        pytest.skip("no shared traces (a user's clone has no ../shared)")
    recorded = set()
    for p in found:
        with gzip.open(p) if p.name.endswith(".gz") else open(p, "rb") as f:
            if b'"[memory]"' in f.read():
                recorded.add(f"{p.parent.name}/{p.name}")
    assert recorded == set(MEMORY_TRACES)
