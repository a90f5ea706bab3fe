"""Host ranges that are not ops, for :class:`~tracekit.testing.TraceBuilder`: python frames,
user annotations and runtime calls with no device work, on the current thread.

``with_stack=True`` records the python frames around each op (``python_function``, nested by
``Python id`` / ``Python parent id``); ``record_function(name)`` writes a ``user_annotation``
range (ProcessGroupNCCL's ``nccl:all_reduce`` around a collective); some runtime calls launch
nothing (``cudaEventRecord``, ``cudaStreamWaitEvent``). None of them plants a device activity.

A mixin: the builder supplies the event writer and the state (current thread, labels).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .events import EventWriter

if TYPE_CHECKING:
    from .device import _State


class HostCalls:
    """The host-range half of the builder (see the module docstring)."""

    w: EventWriter
    _s: _State
    ns: Callable[[float], int]

    @property
    def labels(self) -> dict[str, Any]:
        """The labels planted here (a copy)."""
        return dict(self._s.labels)

    @contextmanager
    def python(
        self, frame: str, args: dict | None = None, pre: float = 0.6, post: float = 0.4
    ) -> Iterator[None]:
        """A ``python_function`` frame on the current thread, as ``with_stack=True`` writes them
        (``Python id`` / ``Python parent id`` nest them); e.g. ``apply_rotary_pos_emb``'s frame."""
        with self.w.pyfunc(self._s.tid, frame, args, pre=pre, post=post):
            yield

    @contextmanager
    def annotation(self, name: str) -> Iterator[None]:
        """A ``user_annotation`` range on the current thread (``record_function(name)``), such as
        the ``nccl:all_reduce`` range ProcessGroupNCCL writes around a collective."""
        with self.w.rng_(self._s.tid, name, "user_annotation"):
            yield

    def worker_collective(
        self, name: str, us: float, delay: float = 0.0, inner: Sequence[tuple[str, float, float]] = ()
    ) -> tuple[int, int]:
        """The work of a collective a ``c10d::*`` op just queued, as gloo runs it: a ``name``
        range (``gloo:all_reduce``) of ``us`` microseconds on a worker thread
        (``pt_gloo_runloop``), outside every op there, starting ``delay`` us after the current
        thread's time, holding the CPU ops gloo runs for it: ``inner``, each ``(op name, us
        after the range's start, us)`` (``("aten::copy_", 80, 5)``). The current thread's clock
        does not move (``cpu()`` plants its wait). Returns the range's (start, end) in ns."""
        w, tid, ns = self.w, self.w.pid + 77, self.ns
        start = w.t[self._s.tid] + ns(delay)
        w.emit("X", "user_annotation", name, w.pid, tid, start, start + ns(us), {"Ev Idx": 0})
        for op, at, dur in inner:
            w.emit("X", "cpu_op", op, w.pid, tid, start + ns(at), start + ns(at + dur), {"Ev Idx": 0})
        return start, start + ns(us)

    def runtime(self, name: str, us: float, cbid: int | None = None) -> None:
        """A runtime call with no device activity (``cudaEventRecord``, ``cudaStreamWaitEvent``)."""
        self.w.runtime_only(self._s.tid, name, us, cbid)
