"""Per-rank work in parallel: a local process pool, or an existing Dask cluster.

Ranks are independent until the final aggregation, so each file is read, linked and attributed
in its own worker (:func:`tracekit.analysis.analyse_file`), and only its labelled interval
table comes back: the raw events of a rank live and die inside one worker, so the parent never
holds more than one rank's raw events (none at all when ``jobs > 1``).

* ``jobs=1``: in this process, one rank after another;
* ``jobs=N``: a :mod:`multiprocessing` pool of N workers. Workers ignore SIGINT: Ctrl-C reaches
  the parent only, which terminates the pool (no worker tracebacks, no hang) and re-raises
  :class:`KeyboardInterrupt`;
* ``scheduler="tcp://host:8786"`` (or a ``distributed.Client``): ``Client.map`` on an existing
  Dask cluster (``pip install 'tracekit[dask]'``). The workers need tracekit installed.

With ``keep_errors=True`` a file that raises :class:`~tracekit.errors.TraceError` yields that
error in its place instead of failing the whole run (the caller decides what a bad file means).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from . import progress
from .errors import TraceError


def default_jobs(n_files: int) -> int:
    return max(1, min(n_files, os.cpu_count() or 1))


class _Attempt:
    """``fn(file, *args)``, or the TraceError it raised when errors are kept (picklable)."""

    def __init__(self, fn: Callable, args: tuple, keep_errors: bool):
        self.fn, self.args, self.keep_errors = fn, args, keep_errors

    def __call__(self, item: tuple[int, Any]) -> tuple[int, Any]:
        i, f = item
        try:
            return i, self.fn(f, *self.args)
        except TraceError as e:
            if not self.keep_errors:
                raise
            return i, e


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def map_ranks(
    fn: Callable, files: Sequence[Any], *args, jobs: int = 1, scheduler: Any = None, keep_errors: bool = False
) -> list:
    """``[fn(f, *args) for f in files]``, in order, run as asked."""
    files = list(files)
    attempt = _Attempt(fn, args, keep_errors)
    if scheduler is not None:
        return _map_dask(attempt, files, scheduler)
    out: list = [None] * len(files)
    if jobs <= 1 or len(files) <= 1:
        for item in enumerate(files):
            i, out[i] = attempt(item)
            progress.file_done()
        return out
    pool = None
    try:
        # SIGINT is held while the workers fork: a Ctrl-C landing in a fork hook would be
        # swallowed there ("Exception ignored in _releaseLock"); it is delivered right after.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            pool = multiprocessing.Pool(min(jobs, len(files)), initializer=_ignore_sigint)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        for i, result in pool.imap_unordered(attempt, enumerate(files)):
            out[i] = result
            progress.file_done()
        pool.close()
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    finally:
        if pool is not None:
            pool.join()
    return out


def _map_dask(attempt: _Attempt, files: list, scheduler: Any) -> list:
    try:
        from distributed import Client
    except ImportError:
        raise RuntimeError("--scheduler needs Dask: pip install 'tracekit[dask]'") from None
    own = not isinstance(scheduler, Client)
    client = Client(scheduler) if own else scheduler
    futures = None
    try:
        futures = client.map(attempt, list(enumerate(files)), pure=False)
        return [r for _, r in client.gather(futures)]
    except KeyboardInterrupt:
        if futures is not None:
            client.cancel(futures)
        raise
    finally:
        if own:
            client.close()
