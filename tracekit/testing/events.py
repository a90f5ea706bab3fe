"""Kineto event writing: the exact event shapes a real PyTorch profiler trace holds.

:class:`EventWriter` keeps one CPU clock per thread and one device clock per stream, in integer
nanoseconds, and appends Chrome-trace events the way Kineto writes them: ``cpu_op`` and
``user_annotation`` ranges with ``External id``, ``python_function`` ranges with ``Python id`` /
``Python parent id``, runtime launches (``cudaLaunchKernel``, ``cuLaunchKernelEx``...) with
``correlation`` and ``cbid``, device kernels / memcpy / memset on streams with the same
``correlation``, ``ac2g`` flows, then the metadata and header of a real file
(:func:`tracekit.testing.document.document`). Old Kineto (PyTorch <= 1.13) is ``old_categories``: capitalised
categories, ``external id``, ``async_gpu`` flows, no driver calls, a bare header.

Times are written as float microseconds with nanosecond decimals (``ts_format="float"``, modern
Kineto) or integer microseconds (``"int"``, old Kineto: every time must then be a whole us).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self

from .kernels import _CBID, _DEFAULT_API, _DEVICE_CAT, _OLD_CATS

__all__ = [
    "COMM_STREAM",
    "COMPUTE_STREAM",
    "COPY_STREAM",
    "SIDE_STREAM",
    "EventWriter",
    "Launched",
    "Micros",
]

COMPUTE_STREAM = 7
COMM_STREAM = 20
COPY_STREAM = 13
SIDE_STREAM = 22

# the epoch-based clock of a real trace (ns): 2023-11-14, as Kineto's clock writes it
EPOCH_NS = 1_700_000_000_123_456


class Micros(float):
    """Float microseconds that remember their exact nanoseconds: :func:`write_trace` writes them
    as Kineto does (``1712195495519689.047``), exactly, where a float64 could not hold them."""

    ns: int

    def __new__(cls, ns: int) -> Self:
        obj = super().__new__(cls, ns / 1000)
        obj.ns = ns
        return obj

    def __reduce__(self) -> tuple[type, tuple[int]]:
        return (Micros, (self.ns,))


@dataclass
class Launched:
    """What one launch planted: the runtime call and the device activity (ns)."""

    name: str
    kind: str
    stream: int
    start: int
    end: int
    correlation: int
    launch_ts: int
    launch_end: int = 0  # ns, end of the runtime call
    api: str = ""  # the runtime call's name


class EventWriter:
    """Clocks, ids and Kineto-shaped events of one process (one rank) and its device.

    ``rng``: when given, CPU durations get 0-9 ns of jitter (so no two traces tie by accident);
    without it every time is exactly what was asked for. ``unique_starts``: nudge a device start
    that another activity already has by one quantum (some truths need an order of starts).
    """

    def __init__(
        self,
        *,
        ts_format: str = "float",
        big_ids: bool = False,
        old_categories: bool = False,
        rng: random.Random | None = None,
        pid: int = 48213,
        autograd_tid: int | None = 48301,
        device: int = 0,
        start_ns: int = EPOCH_NS,
        unique_starts: bool = False,
    ) -> None:
        if ts_format not in ("float", "int"):
            raise ValueError(f"ts_format must be 'float' or 'int', not {ts_format!r}")
        self.ts_format = ts_format
        self.old = old_categories
        self.big = big_ids
        self.rng = rng
        self.q = 1000 if ts_format == "int" else 1  # time quantum in ns
        self.pid = pid
        self.main = pid
        self.auto = autograd_tid if autograd_tid is not None else pid
        self.device = device
        start = start_ns - start_ns % self.q
        self.t: dict[int, int] = {self.main: start, self.auto: start}
        self.stream_end: dict[int, int] = defaultdict(int)
        self.events: list[dict] = []
        self.ext_stack: dict[int, list[int]] = defaultdict(list)
        self.py_stack: dict[int, list[int]] = defaultdict(list)
        self.n_corr = 0
        self.n_ext = 0
        self.n_py = 0
        self.n_flow = 0
        self.unique_starts = unique_starts
        self.used_starts: set[int] = set()

    # ids -------------------------------------------------------------------------------------
    def _id(self, n: int) -> int:
        """An id; with ``big_ids`` beyond 2**53 (float-unsafe), as some real traces have."""
        return (2**62 + n) if self.big else n

    def corr(self) -> int:
        self.n_corr += 1
        return self._id(100_000 + self.n_corr * 3)

    def ext(self) -> int:
        self.n_ext += 1
        return self._id(self.n_ext)

    def pyid(self) -> int:
        self.n_py += 1
        return self._id(900_000 + self.n_py)

    @property
    def extkey(self) -> str:
        return "external id" if self.old else "External id"

    # time ------------------------------------------------------------------------------------
    def qz(self, ns: float) -> int:
        """``ns`` rounded to the time quantum, at least one quantum."""
        return max(self.q, round(ns / self.q) * self.q)

    def cpu(self, us: float) -> int:
        jitter = self.rng.randint(0, 9) if self.rng is not None else 0
        return self.qz(us * 1000 + jitter)

    def adv(self, tid: int, us: float) -> None:
        self.t[tid] += self.cpu(us)

    def cat(self, c: str) -> str:
        return _OLD_CATS.get(c, c) if self.old else c

    def ts(self, ns: int) -> float | int:
        if self.ts_format == "int":
            if ns % 1000:
                raise ValueError(f"ts_format='int' needs whole microseconds, got {ns} ns")
            return ns // 1000
        return Micros(ns)

    # events ----------------------------------------------------------------------------------
    def emit(
        self,
        ph: str,
        cat: str,
        name: str,
        pid: int | str,
        tid: int | str,
        start: int,
        end: int | None = None,
        args: dict | None = None,
    ) -> dict:
        ev: dict[str, Any] = {
            "ph": ph,
            "cat": self.cat(cat),
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": self.ts(start),
        }
        if end is not None:
            ev["dur"] = self.ts(end - start)
        if args is not None:
            ev["args"] = args
        self.events.append(ev)
        return ev

    def flow(
        self, cat: str, name: str, fid: int, src: tuple[int, int, int], dst: tuple[int, int, int]
    ) -> None:
        """A flow from ``src`` to ``dst``, each ``(pid, tid, ns)``."""
        self.events.append(
            {
                "ph": "s",
                "id": fid,
                "pid": src[0],
                "tid": src[1],
                "ts": self.ts(src[2]),
                "cat": cat,
                "name": name,
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": fid,
                "pid": dst[0],
                "tid": dst[1],
                "ts": self.ts(dst[2]),
                "cat": cat,
                "name": name,
                "bp": "e",
            }
        )

    @contextmanager
    def rng_(
        self,
        tid: int,
        name: str,
        cat: str = "cpu_op",
        args: dict | None = None,
        pre: float = 0.6,
        post: float = 0.4,
        ext: bool = True,
    ) -> Iterator[dict]:
        """A CPU range on ``tid``; yields a box whose ``start`` (and, after, ``event``) it fills."""
        start = self.t[tid]
        a = dict(args or {})
        tagged = ext and cat in ("cpu_op", "user_annotation")
        if tagged:
            e = self.ext()
            a = {self.extkey: e, "Record function id": 0, **a}
            self.ext_stack[tid].append(e)
        self.adv(tid, pre)
        box: dict = {"start": start}
        try:
            yield box
        finally:
            self.adv(tid, post)
            if tagged:
                self.ext_stack[tid].pop()
            box["event"] = self.emit("X", cat, name, self.pid, tid, start, self.t[tid], a)

    @contextmanager
    def pyfunc(
        self, tid: int, name: str, args: dict | None = None, pre: float = 0.6, post: float = 0.4
    ) -> Iterator[int]:
        """A ``python_function`` range (``Python id`` / ``Python parent id`` nest them)."""
        pid_ = self.pyid()
        parent = self.py_stack[tid][-1] if self.py_stack[tid] else None
        start = self.t[tid]
        self.adv(tid, pre)
        self.py_stack[tid].append(pid_)
        try:
            yield pid_
        finally:
            self.py_stack[tid].pop()
            self.adv(tid, post)
            a = {"Python parent id": parent, "Python id": pid_, **(args or {})}
            self.emit("X", "python_function", name, self.pid, tid, start, self.t[tid], a)

    def runtime_only(
        self, tid: int, name: str, us: float, cbid: int | None = None, sync: dict | None = None
    ) -> int:
        """A runtime call with a correlation id and no device activity (event record, sync...);
        returns its correlation id. ``sync``: the ``cuda_sync`` event recent Kineto writes for
        it, over the call's time: ``kind`` ("Stream Wait Event", "Event Sync", "Stream Sync",
        "Context Sync"), ``stream`` (-1: none), and for an event ``wait_on_stream`` and
        ``wait_on_cuda_event_record_corr_id`` (the ``cudaEventRecord``'s correlation id)."""
        self.adv(tid, 0.4)
        s = self.t[tid]
        self.t[tid] += self.cpu(us)
        ext = self.ext_stack[tid][-1] if self.ext_stack[tid] else 0
        c = self.corr()
        args = {self.extkey: ext, "cbid": _CBID.get(name, 0) if cbid is None else cbid, "correlation": c}
        self.emit("X", "cuda_runtime", name, self.pid, tid, s, self.t[tid], args)
        if sync is not None:
            kind, stream = sync["kind"], sync.get("stream", -1)
            waits = {k: v for k, v in sync.items() if k.startswith("wait_on_")}
            a = {self.extkey: ext, "cuda_sync_kind": kind, **waits, "stream": stream, "correlation": c}
            self.emit(
                "X", "cuda_sync", kind, self.device, stream, s, self.t[tid], a | {"device": self.device}
            )
        return c

    def _device_start(self, stream: int, rt_start: int, gap: int, start: int | None) -> int:
        if start is None:
            start = max(self.stream_end[stream] + gap, rt_start + self.qz(2500))
        else:  # a planted start the CPU has not reached yet waits for the launch (and its stream)
            start = max(start, rt_start + self.qz(1500), self.stream_end[stream])
        while self.unique_starts and start in self.used_starts:
            start += self.q
        self.used_starts.add(start)
        return start

    def _device_args(self, kind: str, ext: int, stream: int, c: int, dur: int) -> dict[str, Any]:
        if kind == "kernel":
            return {
                self.extkey: ext,
                "queued": 0,
                "device": self.device,
                "context": 1,
                "stream": stream,
                "correlation": c,
                "registers per thread": 128,
                "shared memory": 49152,
                "blocks per SM": 1.2,
                "warps per SM": 4.8,
                "grid": [132, 1, 1],
                "block": [384, 1, 1],
                "est. achieved occupancy %": 6,
            }
        return {
            self.extkey: ext,
            "device": self.device,
            "context": 1,
            "stream": stream,
            "correlation": c,
            "bytes": 1 << 20,
            "memory bandwidth (GB/s)": (1 << 20) / max(dur, 1),
        }

    def launch(
        self,
        tid: int,
        name: str,
        dur: int,
        *,
        stream: int = COMPUTE_STREAM,
        gap: int = 0,
        start: int | None = None,
        kind: str = "kernel",
        api: str | None = None,
    ) -> Launched:
        """A runtime launch on ``tid`` and its device activity on ``stream``.

        The activity starts ``gap`` ns after the stream's last end and at least 2.5 us after the
        launch call, or at the planted ``start`` (never before its launch or its stream).
        """
        self.adv(tid, 0.3)
        rt_start = self.t[tid]
        rt_dur = self.cpu(1.6 if kind == "kernel" else 2.9)
        c = self.corr()
        if api is None or (self.old and api.startswith("cuLaunch")):
            api = _DEFAULT_API[kind]  # old Kineto recorded no driver API calls
        rcat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
        ext = self.ext_stack[tid][-1] if self.ext_stack[tid] else 0
        self.emit(
            "X",
            rcat,
            api,
            self.pid,
            tid,
            rt_start,
            rt_start + rt_dur,
            {self.extkey: ext, "cbid": _CBID.get(api, 0), "correlation": c},
        )
        begin = self._device_start(stream, rt_start, gap, start)
        end = begin + dur
        self.stream_end[stream] = max(self.stream_end[stream], end)
        args = self._device_args(kind, ext, stream, c, dur)
        self.emit("X", _DEVICE_CAT[kind], name, self.device, stream, begin, end, args)
        fcat, fname = ("async_gpu", api) if self.old else ("ac2g", "ac2g")
        self.flow(fcat, fname, c, (self.pid, tid, rt_start), (self.device, stream, begin))
        self.t[tid] = rt_start + rt_dur
        self.adv(tid, 0.2)
        return Launched(
            name=name,
            kind=kind,
            stream=stream,
            start=begin,
            end=end,
            correlation=c,
            launch_ts=rt_start,
            launch_end=rt_start + rt_dur,
            api=api,
        )
