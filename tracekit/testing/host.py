"""Host ranges that are not ops, for :class:`~tracekit.testing.TraceBuilder`: python frames,
user annotations and runtime calls with no device work, on the current thread.

``with_stack=True`` records the python frames around each op (``python_function``, nested by
``Python id`` / ``Python parent id``); ``record_function(name)`` writes a ``user_annotation``
range (ProcessGroupNCCL's ``nccl:all_reduce`` around a collective); some runtime calls launch
nothing (``cudaEventRecord``, ``cudaStreamWaitEvent``). None of them plants a device activity.

A mixin: the builder supplies the event writer and the state (current thread, labels).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from .events import EventWriter

if TYPE_CHECKING:
    from .device import _State


class HostCalls:
    """The host-range half of the builder (see the module docstring)."""

    w: EventWriter
    _s: _State

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

    def runtime(self, name: str, us: float, cbid: int | None = None) -> None:
        """A runtime call with no device activity (``cudaEventRecord``, ``cudaStreamWaitEvent``)."""
        self.w.runtime_only(self._s.tid, name, us, cbid)
