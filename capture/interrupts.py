"""How a capture rank stops on Ctrl-C or SIGTERM, and where it may not be cut.

The first Ctrl-C or SIGTERM raises ``KeyboardInterrupt`` in the rank's main thread, wherever it
is, so a long step stops at once and the finished steps' trace is written while the interrupt
unwinds (the launcher gives a rank ``GRACE_SECONDS`` for that). One place must not be cut:
``torch.profiler.profile.step()``. It ends the step's ``ProfilerStep#N`` range and opens the
next one in Python; an interrupt between the two left ``step_rec_fn`` holding a
``record_function`` that was never entered, and the profiler's exit then raised
``AssertionError: Expected record to be set`` before it wrote the trace: every finished step
was lost (a race of a few microseconds a step, seen once in CI). Inside :func:`deferred` an
interrupt is held and raised as the block ends.
"""

from __future__ import annotations

import signal


class Terminated(KeyboardInterrupt):
    """The rank was stopped by SIGTERM (unwinds as Ctrl-C does)."""


class _Held:
    """The interrupt that arrived inside :func:`deferred` blocks (none: ``None``), their depth."""

    depth = 0
    pending: type[KeyboardInterrupt] | None = None


def stop_on_first_interrupt(signum, frame) -> None:
    """Signal handler: the first Ctrl-C or SIGTERM stops the capture as the launcher's SIGINT
    does. A SIGTERM sent to the whole process group (``kill -TERM -- -PGID``, ``timeout``, a job
    scheduler) reaches the ranks as well as their launcher; by default it killed them before
    they wrote anything. After the first, Ctrl-C is ignored (the launcher's own SIGINT to the
    ranks follows a signal to the group) and SIGTERM is the default again: the launcher's stop
    after its grace period still ends the rank."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    error = Terminated if signum == signal.SIGTERM else KeyboardInterrupt
    if _Held.depth:
        _Held.pending = error
        return
    raise error


def install() -> None:
    """Make :func:`stop_on_first_interrupt` this process's SIGINT and SIGTERM handler."""
    signal.signal(signal.SIGINT, stop_on_first_interrupt)
    signal.signal(signal.SIGTERM, stop_on_first_interrupt)


class deferred:
    """A block an interrupt does not cut: one that arrives inside is raised when it ends
    (guarantees: the block ran to its end, or failed on its own error)."""

    def __enter__(self) -> None:
        _Held.depth += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        _Held.depth -= 1
        if _Held.depth or _Held.pending is None:
            return
        error, _Held.pending = _Held.pending, None
        if exc_type is None:  # else the block's own error is what happened
            raise error()
