"""Progress of an analysis, for whoever listens (the CLI's progress bar); silent otherwise.

The pipeline calls :func:`fraction` with how far the current file is (reading, decoding,
linking, attributing) and :func:`file_done` when a file is finished; a listener installed with
:func:`listening` receives ``("fraction", x)`` and ``("done", 1.0)`` events. Ranks analysed in
other processes report only ``done``. Costs nothing when nobody listens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Listener = Callable[[str, float], None]
_listener: ContextVar[Listener | None] = ContextVar("tracekit_progress", default=None)

#: Share of a file's work done at the end of each stage.
READ, DECODED, LINKED = 0.35, 0.85, 0.95


def fraction(x: float) -> None:
    cb = _listener.get()
    if cb is not None:
        cb("fraction", min(max(float(x), 0.0), 1.0))


def file_done() -> None:
    cb = _listener.get()
    if cb is not None:
        cb("done", 1.0)


@contextmanager
def listening(callback: Listener) -> Iterator[None]:
    token = _listener.set(callback)
    try:
        yield
    finally:
        _listener.reset(token)
