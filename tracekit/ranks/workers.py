"""A pool of worker processes that knows which file each worker is on, so a dead worker is an
error for that file, never a hang.

:class:`multiprocessing.Pool` replaces a worker that dies (SIGKILL from the kernel's OOM killer,
a crash in native code) and loses the task it was running: ``imap`` then waits forever. Here
each worker has its own pipe: it says which item it starts (``("start", i)``), then sends that
item's result (``("done", i, result)``, or ``("raise", i, exception)``, raised here). The parent
waits on every pipe and on every worker's sentinel (:func:`multiprocessing.connection.wait`),
so a worker that ends is seen at once: the item it had started is reported to ``on_death`` (the
caller's error for that file), the items of its batch it had not started go back to the queue,
and a new worker takes the queue on.
A worker that dies before it starts anything (twice in a row per worker slot) ends the run
with :class:`~tracekit.errors.RunError` instead of being started again and again.

Workers are forked (the platform's default start method), run ``initializer`` first (the
caller's signal set-up), and take batches of items (a list of ``(i, file)``) one at a time.
Any exception in the parent (Ctrl-C, SIGTERM as :class:`~tracekit.cli.io.Terminated`, a failed
gather) terminates and reaps every worker before it goes on.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import RunError

#: Deaths before a first item, per worker slot, that end the run (a worker that cannot start).
MAX_EMPTY_DEATHS = 2


def died(code: int | None) -> str:
    """What a worker's exit code says, for the file it was analysing."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return f"the worker analysing it was killed by {name}{hint}"
    return f"the worker analysing it died (exit status {code})"


def _work(conn: Connection, run: Callable[[tuple[int, Any]], tuple[int, Any]], initializer: Callable) -> None:
    """A worker: batches from ``conn`` until None; each item announced, then its result sent.
    A parent that went away (the pipe closed) ends it quietly."""
    initializer()
    try:
        while (batch := conn.recv()) is not None:
            for item in batch:
                conn.send(("start", item[0]))
                try:
                    got = run(item)
                except Exception as e:  # the caller's to raise (errors it keeps come back as results)
                    conn.send(("raise", item[0], e))
                    continue
                conn.send(("done", *got))
    except (EOFError, OSError):
        return


class _Worker:
    def __init__(self, ctx: Any, run: Callable, initializer: Callable) -> None:
        parent, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_work, args=(child, run, initializer), daemon=True)
        self.proc.start()
        child.close()
        self.conn, self.batch, self.current = parent, deque(), None  # type: ignore[var-annotated]
        self.started_any = False

    def give(self, batch: list) -> None:
        self.batch = deque(batch)
        self.conn.send(batch)

    def drain(self, on_result: Callable[[int, Any], None]) -> bool:
        """Handle every message waiting; False once the pipe is closed (the worker ended)."""
        try:
            while self.conn.poll():
                msg = self.conn.recv()
                if msg[0] == "start":
                    self.current, self.started_any = msg[1], True
                elif msg[0] == "raise":
                    raise msg[2]
                else:
                    _, i, result = msg
                    self.current = None
                    if self.batch and self.batch[0][0] == i:
                        self.batch.popleft()
                    on_result(i, result)
        except (EOFError, OSError):
            return False
        return True


def run_pool(
    run: Callable[[tuple[int, Any]], tuple[int, Any]],
    batches: Sequence[list],
    workers: int,
    on_result: Callable[[int, Any], None],
    on_death: Callable[[int, str], None],
    initializer: Callable[[], None],
) -> None:
    """Run ``run(item)`` for every item of ``batches`` in ``workers`` processes; each result
    goes to ``on_result(i, result)`` in this process as it arrives, each item whose worker died
    under it to ``on_death(i, why)``."""
    ctx = multiprocessing.get_context()
    queue = deque(batches)
    pool: list[_Worker] = []
    empty_deaths = 0
    try:
        for _ in range(min(workers, len(queue))):
            _start(ctx, run, initializer, pool).give(queue.popleft())
        while pool:
            ready = set(wait([w.conn for w in pool] + [w.proc.sentinel for w in pool]))
            for w in list(pool):
                alive = w.drain(on_result) if w.conn in ready or w.proc.sentinel in ready else True
                if alive and w.proc.sentinel not in ready and not w.batch:
                    if queue:
                        w.give(queue.popleft())
                    else:
                        w.conn.send(None)
                        _end(w)
                        pool.remove(w)
                    continue
                if alive and w.proc.sentinel not in ready:
                    continue
                w.drain(on_result)  # what it sent before it ended
                w.proc.join()
                pool.remove(w)
                w.conn.close()
                empty_deaths = _after_death(w, queue, on_death, empty_deaths)
                if empty_deaths > MAX_EMPTY_DEATHS * max(workers, 1):
                    raise RunError(f"the pool's workers die before they start ({died(w.proc.exitcode)})")
                if queue and len(pool) < workers:
                    _start(ctx, run, initializer, pool).give(queue.popleft())
    except BaseException:
        for w in pool:
            if w.proc.is_alive():
                w.proc.terminate()
        for w in pool:
            w.proc.join()
            w.conn.close()
        raise


def _start(ctx: Any, run: Callable, initializer: Callable, pool: list[_Worker]) -> _Worker:
    """A new worker, in ``pool`` before any signal can be handled: SIGINT and SIGTERM are held
    across the fork (a Ctrl-C landing in a fork hook would be swallowed there) and until the
    worker is in the list the parent terminates on an interrupt (none is left running)."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        w = _Worker(ctx, run, initializer)
        pool.append(w)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    return w


def _after_death(w: _Worker, queue: deque, on_death: Callable[[int, str], None], empty: int) -> int:
    """A worker ended with work left: the item it was on is an error, the rest go back."""
    left = list(w.batch)
    if not left:
        return empty
    if w.current is not None:
        on_death(w.current, died(w.proc.exitcode))
        left = [item for item in left if item[0] != w.current]
    if left:
        queue.appendleft(left)
    return 0 if w.current is not None or w.started_any else empty + 1


def _end(w: _Worker) -> None:
    """A worker told to stop: give it a moment, then make sure."""
    w.proc.join(timeout=5)
    if w.proc.is_alive():
        w.proc.terminate()
        w.proc.join()
    w.conn.close()
