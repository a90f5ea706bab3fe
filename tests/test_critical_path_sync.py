"""Planted truth for the critical path's ``cuda_sync`` edges (issue 35.3, docs/metrics.md): where
a trace has the ``cuda_sync`` events of recent Kineto, their ``wait_on_stream`` and
``wait_on_cuda_event_record_corr_id`` decide what a wait or a sync waited on; the inference
stays for calls without them.

* ``event``: test_critical_path's event scenario, the calls with their ``cuda_sync`` events
  (args and inference agree): the same whole path, to the nanosecond;
* ``item``: its ``aten::item`` scenario with a ``Stream Sync`` event naming the stream;
* ``optimizer``: its host-bound optimizer, the sync a ``cudaEventSynchronize`` on an event
  recorded on the compute stream, with its ``Event Sync`` event;
* ``disagree``: the event is recorded on the producer's stream, but a short kernel on a third
  stream is launched after the producer and before the ``cudaEventRecord``: the inference (the
  last activity launched on another stream before the record) takes the short kernel, the args
  the producer, which truly gates the waiter. With the args the path is the planted one; with
  the ``cuda_sync`` events left out of the same trace it is not.
"""

from __future__ import annotations

import json
from functools import partial

import pytest
import test_critical_path
from test_critical_path import ABS, GEMM, _expected, _item, _optimizer, plant

import tracekit
from tracekit.testing import COMPUTE_STREAM, COPY_STREAM, SIDE_STREAM, TraceBuilder


def _wait(b: TraceBuilder, waits_on: int) -> None:
    """``cudaEventRecord`` on stream ``waits_on``, then ``cudaStreamWaitEvent`` for the side
    stream, each with the ``cuda_sync`` event recent Kineto writes."""
    rec = b.w.runtime_only(b.w.main, "cudaEventRecord", 1)
    ask = {"wait_on_stream": waits_on, "wait_on_cuda_event_record_corr_id": rec}
    b.w.runtime_only(
        b.w.main, "cudaStreamWaitEvent", 1, sync={"kind": "Stream Wait Event", "stream": SIDE_STREAM, **ask}
    )


def _event(b: TraceBuilder) -> dict:
    return test_critical_path._event(b, wait=partial(_wait, waits_on=COMPUTE_STREAM))


def _disagree(b: TraceBuilder) -> dict:
    with b.forward():
        producer = b.kernel(GEMM, 150, op="aten::mm")
        inside = (producer.start - b.origin) / 1000 + 40  # launched last, ends first
        b.kernel(GEMM, 10, op="aten::mm", stream=COPY_STREAM, not_before_us=inside)
        _wait(b, COMPUTE_STREAM)
        after = (producer.end - b.origin) / 1000
        waiter = b.kernel(GEMM, 30, op="aten::mm", stream=SIDE_STREAM, not_before_us=after)
    return {"first": producer.activity, "last": waiter.activity}


def _stream_sync(b: TraceBuilder) -> None:
    """test_critical_path's sync, with its ``Stream Sync`` event on the compute stream."""
    end = max(a.end for a in b.activities)
    us = (end - b.w.t[b._s.tid]) / 1000 + 0.6
    sync = {"kind": "Stream Sync", "stream": COMPUTE_STREAM}
    b.w.runtime_only(b._s.tid, "cudaStreamSynchronize", us, sync=sync)


def _event_sync(b: TraceBuilder) -> None:
    """test_critical_path's sync as ``cudaEventSynchronize`` on an event recorded on the compute
    stream after the work it waits for, with its ``Event Sync`` event."""
    rec = b.w.runtime_only(b._s.tid, "cudaEventRecord", 1)
    end = max(a.end for a in b.activities)
    us = (end - b.w.t[b._s.tid]) / 1000 + 0.6
    ask = {"wait_on_stream": COMPUTE_STREAM, "wait_on_cuda_event_record_corr_id": rec}
    b.w.runtime_only(b._s.tid, "cudaEventSynchronize", us, sync={"kind": "Event Sync", **ask})


def _sync_end(trace: dict, after: int) -> int:
    """test_critical_path's sync end, of the ``cudaEventSynchronize`` calls."""
    ends = [
        round((float(e["ts"]) + float(e["dur"])) * 1000)
        for e in trace["traceEvents"]
        if e.get("name") == "cudaEventSynchronize"
    ]
    return min(x for x in ends if x > after)


SCENARIOS = {"event": _event, "item": _item, "disagree": _disagree, "optimizer": _optimizer}


def _build(tmp, name: str, monkeypatch) -> tuple[list, dict, object]:
    if name == "item":
        monkeypatch.setattr(test_critical_path, "_sync", _stream_sync)
    if name == "optimizer":
        monkeypatch.setattr(test_critical_path, "_sync", _event_sync)
        monkeypatch.setattr(test_critical_path, "_sync_end", _sync_end)
    planted, trace, path, _ = plant(tmp, name, SCENARIOS[name])
    assert sum(e.get("cat") == "cuda_sync" for e in trace["traceEvents"]) == 3
    return planted, trace, path


def _path(path) -> tuple:
    a = tracekit.load(path, cache=False, jobs=1)
    return a.table("critical_path", per_step=True), a.table("idle", per_step=True).set_index("step")


@pytest.mark.parametrize("name", SCENARIOS)
def test_whole_path_recovered_exactly_with_the_sync_args(name, tmp_path, monkeypatch):
    planted, trace, path = _build(tmp_path, name, monkeypatch)
    got, idle = _path(path)
    kind = "event" if name == "disagree" else name
    phase = "optimizer" if name == "optimizer" else "forward"
    for n, p in planted:
        mine = got[got["step"] == n]
        have = {(r.kind, r.phase): r.time_ms for r in mine.itertuples()}
        want = {k: v / 1e6 for k, v in _expected(kind, trace, trace_tid(trace), p, phase).items() if v}
        assert have == pytest.approx(want, abs=ABS), (name, n)
        assert mine["time_ms"].sum() == pytest.approx(idle.loc[n, "window_ms"], abs=ABS)


def trace_tid(trace: dict):
    """The main thread: the one of the first ``cudaLaunchKernel``."""
    return next(e["tid"] for e in trace["traceEvents"] if e.get("name") == "cudaLaunchKernel")


def test_the_args_win_over_the_inference(tmp_path, monkeypatch):
    planted, trace, path = _build(tmp_path, "disagree", monkeypatch)
    with_args, _ = _path(path)
    old = dict(trace, traceEvents=[e for e in trace["traceEvents"] if e.get("cat") != "cuda_sync"])
    bare = tmp_path / "bare.pt.trace.json"
    bare.write_text(json.dumps(old))
    inferred, _ = _path(bare)
    for n, p in planted:
        first = p["first"]
        ours = with_args[(with_args["step"] == n) & (with_args["kind"] == "kernel")]["time_ms"].sum()
        theirs = inferred[(inferred["step"] == n) & (inferred["kind"] == "kernel")]["time_ms"].sum()
        producer_ms = (first.end - first.start) / 1e6
        waiter_ms = (p["last"].end - p["last"].start) / 1e6
        assert ours == pytest.approx(producer_ms + waiter_ms, abs=ABS)  # through the producer
        assert theirs == pytest.approx(0.010 + waiter_ms, abs=ABS)  # through the short kernel
