"""Peers: the idle causes and launch statistics against HolisticTraceAnalysis 0.5 itself.

Over a whole trace (HTA does not clip to steps), per stream and cause, tracekit's gaps
(:func:`analyses.idle_causes.stream_gaps`) must sum to HTA's ``get_idle_time_breakdown`` with
``consecutive_kernel_delay=30``, and the launches HTA counts, their mean launch delay and the
activities shorter than their launch call must be HTA's ``get_cuda_kernel_launch_stats``. On
these traces every step is complete, so tracekit's intervals are the whole trace.
"""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
from shared_traces import shared_trace
from tracekit.analyses.idle_causes import CAUSES, stream_gaps
from tracekit.analyses.launches import HTA_APIS

import tracekit

pytestmark = [pytest.mark.shared, pytest.mark.peers]

pytest.importorskip("hta", reason="HolisticTraceAnalysis not installed (pip install 'tracekit[peers]')")

EXACT = [
    "kineto/tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    "hta/critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
]


@pytest.mark.parametrize("rel", EXACT)
def test_idle_causes_and_launches_match_hta(rel, tmp_path):
    from hta.trace_analysis import TraceAnalysis

    path = shared_trace(rel)
    shutil.copy(path, tmp_path / path.name)
    logging.disable(logging.CRITICAL)
    try:
        ta = TraceAnalysis(trace_dir=str(tmp_path), include_last_profiler_step=True)
        idle = ta.get_idle_time_breakdown(consecutive_kernel_delay=30, visualize=False)[0]
        stats = next(iter(ta.get_cuda_kernel_launch_stats(visualize=False).values()))
    finally:
        logging.disable(logging.NOTSET)
    a = tracekit.load(tmp_path / path.name, cache=False, jobs=1)
    iv = next(iter(a.ranks.values())).intervals
    g = stream_gaps(iv)
    ours = ((g["hi"] - g["lo"]) / 1e3).groupby([g["stream"], CAUSES[g["cause"].to_numpy()]]).sum()
    theirs = idle.set_index(["stream", "idle_category"])["idle_time"]
    theirs = theirs[theirs > 0]
    assert dict(ours) == pytest.approx({(int(s), c): v for (s, c), v in theirs.items()}, rel=1e-9)
    hta = iv[iv["runtime"].astype(str).isin(HTA_APIS).to_numpy()]
    delay = np.maximum(hta["start"] - hta["launch_end"], 0) / 1e3
    short = (hta["end"] - hta["start"]) < (hta["launch_end"] - hta["launch_ts"])
    assert len(hta) == len(stats)
    assert delay.mean() == pytest.approx(stats["launch_delay"].mean(), rel=1e-9)
    assert int(short.sum()) == int((stats["gpu_duration"] < stats["cpu_duration"]).sum())
