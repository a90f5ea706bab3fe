"""The trace file around the events: Kineto's metadata, the profiler's tail, the header, JSON text.

Kept apart from :mod:`tracekit.testing.events` (which writes the events themselves) so each
stays readable; this module uses that one, never the other way round.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path
from typing import Any

from .events import EventWriter, Micros
from .kernels import H100


def _metadata(self: EventWriter, t0: float) -> list[dict]:
    meta: list[dict] = []

    def m(name: str, pid: int, tid: int, args: dict) -> None:
        meta.append({"name": name, "ph": "M", "ts": t0, "pid": pid, "tid": tid, "args": args})

    m("process_name", self.pid, 0, {"name": "python3"})
    m("process_labels", self.pid, 0, {"labels": "CPU"})
    m("process_sort_index", self.pid, 0, {"sort_index": self.pid})
    m("process_name", self.device, 0, {"name": "python3"})
    m("process_labels", self.device, 0, {"labels": f"GPU {self.device}"})
    m("process_sort_index", self.device, 0, {"sort_index": 5000000 + self.device})
    streams = {e["tid"] for e in self.events if e.get("pid") == self.device and e.get("ph") == "X"}
    for s in sorted(streams):
        m("thread_name", self.device, s, {"name": f"stream {s} "})
        m("thread_sort_index", self.device, s, {"sort_index": s})
    m("thread_name", self.pid, self.main, {"name": f"thread {self.main} (pt_main_thread)"})
    m("thread_sort_index", self.pid, self.main, {"sort_index": self.main})
    if self.auto != self.main:
        m("thread_name", self.pid, self.auto, {"name": f"thread {self.auto} (pt_main_thread)"})
        m("thread_name", self.pid, self.auto, {"name": f"thread {self.auto} (pt_autograd_0)"})
        m("thread_sort_index", self.pid, self.auto, {"sort_index": self.auto})
    return meta


def _tail(t0: float, end: float) -> list[dict]:
    return [
        {
            "ph": "X",
            "cat": "Trace",
            "ts": t0,
            "dur": end - t0,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        },
        {
            "name": "process_sort_index",
            "ph": "M",
            "ts": t0,
            "pid": "Spans",
            "tid": 0,
            "args": {"sort_index": 536870912},
        },
        {
            "name": "Iteration Start: PyTorch Profiler",
            "ph": "i",
            "s": "g",
            "pid": "Traces",
            "tid": "Trace PyTorch Profiler",
            "ts": t0,
        },
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": end},
    ]


def document(
    self: EventWriter,
    *,
    rank: int = 0,
    world_size: int = 1,
    shuffle_seed: int | None = None,
    distributed: bool = True,
) -> dict:
    """The whole Chrome-trace dict: metadata, the events, the profiler's tail, the header."""
    t0 = min(e["ts"] for e in self.events if "ts" in e)
    end = max(e["ts"] + e.get("dur", 0) for e in self.events if "ts" in e)
    events = _metadata(self, t0) + self.events + _tail(t0, end)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(events)
    info: dict[str, Any] = {
        "backend": "nccl",
        "rank": rank,
        "world_size": world_size,
        "pg_count": 1,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": world_size,
                "ranks": list(range(world_size)),
            }
        ],
        "nccl_version": "2.26.2",
    }
    if self.old:
        return {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "traceEvents": events}
    trace: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [dict(H100, id=self.device)],
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "distributedInfo": info,
        "record_shapes": 1,
        "with_stack": 0,
        "trace_id": "5E1F0C0FFEE0000000000000000000AB",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": events,
        "traceName": "synthetic.pt.trace.json",
    }
    if not distributed:
        del trace["distributedInfo"]
    return trace


_EXACT = re.compile(r'"@tracekit-ns:(\d+)"')


def _exact(v: Any) -> Any:
    return f"@tracekit-ns:{v.ns}" if isinstance(v, Micros) and v.ns >= 0 else v


def _micros_text(m: re.Match) -> str:
    us, ns = divmod(int(m.group(1)), 1000)
    return f"{us}.{ns:03d}"


#: How a trace file can hold its events (the Chrome trace event format): a JSON object with
#: ``traceEvents`` (and the header), the bare array of events, or that array unterminated (no
#: closing ``]``, a comma after the last event: a writer that stopped before closing it).
FORMS = ("object", "array", "unterminated")


def dumps(trace: dict, form: str = "object") -> str:
    """JSON text of ``trace`` in ``form`` (:data:`FORMS`: the array forms drop the header);
    :class:`Micros` times written with their exact nanoseconds."""
    if form not in FORMS:
        raise ValueError(f"form must be one of {FORMS}, not {form!r}")
    events = [{k: _exact(v) for k, v in e.items()} for e in trace.get("traceEvents", [])]
    if form == "object":
        text = json.dumps({**trace, "traceEvents": events})
    elif form == "array":
        text = json.dumps(events)
    else:
        text = "[\n" + "".join(json.dumps(e) + ",\n" for e in events)
    return _EXACT.sub(_micros_text, text)


def write_trace(path: str | Path, trace: dict, form: str = "object") -> Path:
    """Write ``trace`` as .json or .json.gz (by suffix) in ``form`` (:data:`FORMS`); returns
    the path."""
    path = Path(path)
    text = dumps(trace, form)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path
