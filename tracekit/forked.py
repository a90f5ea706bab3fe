"""Share a list of independent jobs between this process and one forked child.

pandas work holds the GIL, so only another process computes at the same time. The child is a
fork: it starts at once, with every input already in its memory (nothing is sent to it), and
sends back only its results, pickled (protocol 5, arrays as raw bytes), through a pipe. The two
processes take the jobs one at a time from a shared queue (a pipe of job numbers), so whichever
is free takes the next: no cost model decides who does what.

Whatever goes wrong in the child (an exception, a crash, a result that cannot be pickled) only
loses its results: :func:`share` then runs the jobs the child took in this process, so a caller
always gets every result, computed by the same code. Ctrl-C stops both: the parent kills and
reaps the child before the interrupt goes on.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any

_COUNT = struct.Struct("<Q")
#: Most jobs one queue holds: each is one byte in a pipe written before the fork.
MAX_JOBS = 255


def usable() -> bool:
    """Whether this process may fork a helper here: the platform forks, no other thread runs
    (a fork copies only the calling thread: a lock another thread held would stay held), and
    it is not itself a pool worker (which already has a core of its own)."""
    return (
        "fork" in mp.get_all_start_methods()
        and threading.active_count() == 1
        and not mp.current_process().daemon
    )


def share(jobs: Sequence[Any], run: Callable[[Any], Any]) -> list[Any]:
    """``[run(job) for job in jobs]``, computed by this process and a forked child together.
    ``run`` must have no effect a caller relies on beyond its result (the child's effects stay
    in the child). Run here alone when there are fewer than two jobs, too many for the queue,
    or :func:`usable` says no."""
    if len(jobs) < 2 or len(jobs) > MAX_JOBS or not usable():
        return [run(job) for job in jobs]
    queue_r, queue_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(queue_w, bytes(range(len(jobs))))
    os.close(queue_w)
    os.set_blocking(queue_r, False)
    # Ctrl-C is held back across the fork: in the child it must land inside the ``try`` below
    # (which always ends the child), never in the parent's code that the child shares.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs the parent's cleanup
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
            os.close(out_r)
            _send(out_w, _take(queue_r, jobs, run))
            os._exit(0)
        finally:
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    os.close(out_w)
    done: dict[int, Any] = {}
    try:
        done = _take(queue_r, jobs, run)
        theirs = _receive(out_r)
    except BaseException:
        os.kill(pid, signal.SIGKILL)
        raise
    finally:
        os.close(queue_r)
        os.close(out_r)
        _reap(pid)
    done.update(theirs)
    return [done[i] if i in done else run(job) for i, job in enumerate(jobs)]


def _take(queue: int, jobs: Sequence[Any], run: Callable[[Any], Any]) -> dict[int, Any]:
    """Run the jobs this process takes from the queue until it is empty: ``{number: result}``."""
    done: dict[int, Any] = {}
    while True:
        try:
            got = os.read(queue, 1)
        except BlockingIOError:
            return done
        if not got:
            return done
        done[got[0]] = run(jobs[got[0]])


def _send(fd: int, results: dict[int, Any]) -> None:
    """Write ``results`` to ``fd``: a pickle whose arrays follow it as raw bytes, each length first."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(results, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = [len(head)] + [r.nbytes for r in raws]
    with os.fdopen(fd, "wb", buffering=1 << 16) as f:
        f.write(_COUNT.pack(len(sizes)) + b"".join(_COUNT.pack(n) for n in sizes))
        f.write(head)
        for r in raws:
            f.write(r)


def _receive(fd: int) -> dict[int, Any]:
    """What :func:`_send` wrote, or ``{}`` when it is incomplete (the child failed)."""
    with os.fdopen(fd, "rb", closefd=False) as f:
        try:
            (n,) = _COUNT.unpack(_exactly(f, _COUNT.size))
            sizes = [_COUNT.unpack(_exactly(f, _COUNT.size))[0] for _ in range(n)]
            head = _exactly(f, sizes[0])
            buffers = [_exactly(f, size) for size in sizes[1:]]
        except EOFError:
            return {}
    return pickle.loads(head, buffers=buffers)


def _exactly(f, size: int) -> bytearray:
    """``size`` bytes of ``f`` (a bytearray: arrays made on it stay writable), or EOFError."""
    buf = bytearray(size)
    if f.readinto(buf) != size:
        raise EOFError
    return buf


def _reap(pid: int) -> None:
    """Wait for the child to end (a finished child that nobody waits for stays a zombie)."""
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue
