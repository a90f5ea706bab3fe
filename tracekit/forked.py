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

The parts shared with :mod:`tracekit.read.parallel`: :func:`fork` (signals held across it, the
child always leaving through ``os._exit``), :func:`send` / :func:`receive` (a protocol-5 pickle
with its arrays as raw bytes), :func:`reap` (kill and wait).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import struct
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

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

    def child() -> None:
        os.close(out_r)
        send(out_w, _take(queue_r, jobs, run))

    pid = fork(child)
    os.close(out_w)
    done: dict[int, Any] = {}
    killed = False
    try:
        done = _take(queue_r, jobs, run)
        theirs = receive(out_r) or {}
    except BaseException:
        killed = True
        raise
    finally:
        os.close(queue_r)
        os.close(out_r)
        reap(pid, kill=killed)
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


def fork(body: Callable[[], object]) -> int:
    """Fork a child that runs ``body`` and exits, with status 0 when it returned, 1 when anything
    failed: it never returns into the caller's code nor runs its cleanup. Every signal is held
    across the fork (no handler runs between it and the child's ``try``); in the child, Ctrl-C
    ends it at once, as SIGTERM does. Returns the child's pid (see :func:`reap`)."""
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
        if pid == 0:
            _child(mask, body)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    return pid


def _child(mask: set, body: Callable[[], object]) -> NoReturn:
    status = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's cleanup (tracekit.cli_io)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        body()
        status = 0
    finally:
        os._exit(status)


def reap(pid: int, kill: bool = False) -> None:
    """Wait for the child to end, killed first when ``kill`` (a finished child that nobody
    waits for stays a zombie)."""
    if kill:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # reaped already
            return
    while True:
        try:
            os.waitpid(pid, 0)
            return
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def send(fd: int, obj: Any) -> None:
    """Write ``obj`` to ``fd``: the number of parts, their sizes, a pickle of ``obj`` whose
    arrays are out-of-band (protocol 5), then those arrays' raw bytes in turn."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    sizes = [len(head)] + [r.nbytes for r in raws]
    _write_all(fd, b"".join(_COUNT.pack(n) for n in [len(sizes), *sizes]) + head)
    for r in raws:
        _write_all(fd, r)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    with memoryview(data) as view:
        while view:
            view = view[os.write(fd, view) :]


def receive(fd: int, alloc: Callable[[int], Any] = bytearray) -> Any:
    """What :func:`send` wrote, read from ``fd``'s current position, each array into
    ``alloc(its size)`` (a bytearray: arrays made on it stay writable); None when it ends early
    (the child failed). The only place a child's results are unpickled."""
    try:
        (n,) = _COUNT.unpack(_exactly(fd, bytearray(_COUNT.size)))
        sizes = [_COUNT.unpack(_exactly(fd, bytearray(_COUNT.size)))[0] for _ in range(n)]
        head = _exactly(fd, bytearray(sizes[0]))
        buffers = [_exactly(fd, alloc(size)) for size in sizes[1:]]
    except EOFError:
        return None
    return pickle.loads(head, buffers=buffers)


def _exactly(fd: int, buf: Any) -> Any:
    """``buf`` filled from ``fd``, or EOFError."""
    view, got = memoryview(buf), 0
    while got < view.nbytes:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError
        got += k
    return buf
