"""Per-rank work in parallel: a local process pool, or an existing Dask cluster.

Ranks are independent until the final aggregation, so each file is read, linked, attributed
and tabulated in a worker (:func:`tracekit.ranks.perfile.tabulate_file`), and only its (small) tables
and a handle to its labelled intervals in the result cache (:mod:`tracekit.ranks.results`; the
intervals themselves when nothing can be stored) come back: the raw events of a rank live and
die inside one worker, so the parent never holds more than one rank's raw events (none at all
when ``jobs > 1``), and its own work per rank is gathering, not computing.

* ``jobs=1``: in this process, one rank after another;
* ``jobs=N``: a pool of N forked workers (:mod:`tracekit.ranks.workers`, which knows which file
  each worker is on: a worker that dies, as the OOM killer's SIGKILL kills it, is an error for
  that file, never a hang). Workers ignore SIGINT: Ctrl-C reaches the parent only, which
  terminates the pool (no worker tracebacks, no hang) and re-raises :class:`KeyboardInterrupt`;
* ``scheduler="tcp://host:8786"`` (or a ``distributed.Client``): ``Client.map`` on an existing
  Dask cluster (the ``dask`` extra: :func:`tracekit.errors.install_hint`). The workers need
  tracekit installed.

Small files go to the workers in batches (:func:`batch_size`): a task is a list of files, so
the per-task cost (pickling a message each way, a Dask scheduler round trip) is paid per batch.
Workers are started once per run (the pool) or are the cluster's own; each imports tracekit
once, on its first task, and keeps it.

With ``keep_errors=True`` a file that raises :class:`~tracekit.errors.TraceError` yields that
error in its place instead of failing the whole run (the caller decides what a bad file means);
so does any other failure on one file (``could not analyse (OverflowError: ...)``, named with
the file), a failure gathering its result, and a worker that died under it.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
from collections.abc import Callable, Sequence
from typing import Any

from .. import progress
from ..errors import RunError, TraceError, install_hint
from ..strings import python_strings
from . import workers


def default_jobs(n_files: int) -> int:
    return max(1, min(n_files, os.cpu_count() or 1))


class _Attempt:
    """``fn(file, *args)``, or the TraceError it raised when errors are kept (picklable).
    With ``sealed`` (a worker's), the result comes back pickled (:class:`_Sealed`)."""

    def __init__(self, fn: Callable, args: tuple, keep_errors: bool, sealed: bool = False):
        self.fn, self.args, self.keep_errors, self.sealed = fn, args, keep_errors, sealed

    def __call__(self, item: tuple[int, Any]) -> tuple[int, Any]:
        i, f = item
        try:
            with python_strings():  # in any process: a Dask worker has not inherited the setting
                got = self.fn(f, *self.args)
        except TraceError as e:
            if not self.keep_errors:
                raise
            got = e
        except Exception as e:  # a bug or an unforeseen input: this file's error, named
            if not self.keep_errors:
                raise
            got = _could_not(f, e)
        if not self.sealed:
            return i, got
        try:
            return i, _Sealed(got)
        except Exception as e:  # a result that cannot be pickled
            if not self.keep_errors:
                raise
            return i, _Sealed(_could_not(f, e))


class _Sealed:
    """A worker's result for one file, pickled in the worker and unpickled by the parent only
    just before it is gathered (:meth:`open`). A batch of files is one message, and the pool's
    result thread (or Dask's client) unpickles a whole message when it arrives, a batch or two
    ahead of the gathering: as objects, 64 small ranks' results cost the parent ~256 KB of
    memory each (pandas indexes, dtypes, arrays: 16 MB a batch), as bytes ~34 KB. So what is
    in flight stays small whatever the batch size, and only one rank's result is ever open."""

    __slots__ = ("blob",)

    def __init__(self, result: Any):
        self.blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)

    def open(self) -> Any:
        got, self.blob = pickle.loads(self.blob), b""
        return got


class _Batch:
    """:class:`_Attempt` over a batch of items: one task, one result message (picklable)."""

    def __init__(self, attempt: _Attempt):
        self.attempt = attempt

    def __call__(self, items: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
        return [self.attempt(item) for item in items]


#: Files at most this big (on average) are sent to workers in batches: the per-task cost
#: (a message each way, a scheduler round trip on Dask) then falls on a batch, not a file.
SMALL_FILE = 4 << 20


def batch_size(files: Sequence[Any], workers: int) -> int:
    """Files per task: about four tasks per worker, at most 64 files each; one file per task
    when files are big (the work then dwarfs the per-task cost, and a batch would hold several
    ranks' results in one message)."""
    sizes = []
    for f in files[:64]:
        try:
            sizes.append(os.stat(f).st_size)
        except (OSError, TypeError, ValueError):
            sizes.append(SMALL_FILE + 1)
    if not sizes or sum(sizes) / len(sizes) > SMALL_FILE:
        return 1
    return max(1, min(64, len(files) // (4 * max(workers, 1))))


def _ignore_sigint() -> None:
    """A worker: Ctrl-C is the parent's; SIGTERM (the pool's terminate) ends it at once. Its
    garbage collector skips what it was forked with (:func:`_worker_gc`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    _worker_gc()


#: A worker's first-generation collection threshold (CPython's default: 700 allocations).
WORKER_GC_THRESHOLD = 10_000


def _worker_gc() -> None:
    """The collector of a worker, which is tracekit's own process (never the caller's): the
    objects it was forked with (pandas, numpy, tracekit: a few hundred thousand) are frozen, so
    collections no longer walk them, and young objects are collected every 10,000 allocations,
    not 700. A small rank spent 4.4 ms of 150 in 240 collections, now 0.04 ms in one (a pandas
    table allocates thousands of small objects, few of them in cycles)."""
    gc.freeze()
    gc.set_threshold(WORKER_GC_THRESHOLD, *gc.get_threshold()[1:])


def _as_is(i: int, result: Any) -> Any:
    return result


def map_ranks(
    fn: Callable,
    files: Sequence[Any],
    *args,
    jobs: int = 1,
    scheduler: Any = None,
    keep_errors: bool = False,
    gather: Callable[[int, Any], Any] = _as_is,
) -> list:
    """``[gather(i, fn(f, *args)) for i, f in enumerate(files)]``, in order, run as asked.
    ``gather`` runs here, on each result as it arrives: it can fold what the caller keeps
    compact at once, so the results of all files are never held whole together."""
    files = list(files)
    attempt = _Attempt(fn, args, keep_errors)
    if scheduler is not None:
        return _map_dask(_Attempt(fn, args, keep_errors, sealed=True), files, scheduler, gather)
    out: list = [None] * len(files)
    if jobs <= 1 or len(files) <= 1:
        for item in enumerate(files):
            i, result = attempt(item)
            out[i] = _gathered(gather, i, result, files[i], keep_errors)
            progress.file_done()
        return out
    chunk = batch_size(files, min(jobs, len(files)))
    items = list(enumerate(files))
    batches = [items[j : j + chunk] for j in range(0, len(items), chunk)]

    def arrived(i: int, result: Any) -> None:
        out[i] = _gathered(gather, i, result.open(), files[i], keep_errors)
        progress.file_done()

    def lost(i: int, why: str) -> None:  # its worker died under it (the OOM killer's SIGKILL)
        err = TraceError(files[i], why)
        if not keep_errors:
            raise err
        out[i] = gather(i, err)
        progress.file_done()

    sealed = _Attempt(fn, args, keep_errors, sealed=True)
    workers.run_pool(sealed, batches, min(jobs, len(files)), arrived, lost, _ignore_sigint)
    return out


def _gathered(gather: Callable[[int, Any], Any], i: int, result: Any, file: Any, keep_errors: bool) -> Any:
    """``gather(i, result)``; with ``keep_errors``, a failure there is that file's error."""
    try:
        return gather(i, result)
    except Exception as e:
        if not keep_errors or isinstance(e, TraceError):
            raise
        return gather(i, _could_not(file, e))


def _could_not(file: Any, e: Exception) -> TraceError:
    """An unforeseen failure on one file, as that file's error (a directory's other ranks go on)."""
    if isinstance(e, MemoryError):
        return TraceError(file, "out of memory while analysing")
    return TraceError(file, f"could not analyse ({type(e).__name__}: {str(e)[:200]})")


def check_scheduler(address: str) -> str:
    """``address`` if it is the address of a Dask scheduler (``tcp://host:port``, ``tls://``,
    ``inproc://``, ``ucx://``..., or ``host:port``); ValueError saying why not otherwise."""
    try:
        from distributed.comm.addressing import parse_address, parse_host_port
    except ImportError:
        raise ValueError(f"needs Dask: {install_hint('dask')}") from None
    try:
        scheme, location = parse_address(address)
        if scheme not in ("inproc",):
            parse_host_port(location)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{address!r} is not a Dask scheduler address ({e}); e.g. tcp://host:8786") from None
    return address


def _client(scheduler: Any) -> Any:
    """A Client of the scheduler at ``scheduler``; :class:`RunError` saying what went wrong when
    there is none: nothing answered in time, or what answered is not a Dask scheduler."""
    try:
        from distributed import Client
    except ImportError:
        raise RunError(f"--scheduler needs Dask: {install_hint('dask')}") from None
    if isinstance(scheduler, Client):
        return scheduler
    try:
        return Client(scheduler)
    except MemoryError:  # Dask read a message length from a service that is not Dask
        raise RunError(
            f"--scheduler {scheduler}: the service there is not a Dask scheduler (its answer is not Dask's)"
        ) from None
    except (OSError, TimeoutError) as e:
        raise RunError(f"--scheduler {scheduler}: cannot connect to a Dask scheduler ({e})") from None
    except ValueError as e:
        raise RunError(f"--scheduler {scheduler}: not a Dask scheduler address ({e})") from None


def _map_dask(attempt: _Attempt, files: list, scheduler: Any, gather: Callable[[int, Any], Any]) -> list:
    client = _client(scheduler)
    from distributed import as_completed

    own = client is not scheduler
    futures = None
    try:
        workers = max(1, sum(client.nthreads().values()))
        k = batch_size(files, workers)
        items = list(enumerate(files))
        batches = [items[j : j + k] for j in range(0, len(items), k)]
        futures = client.map(_Batch(attempt), batches, pure=False)
        out: list = [None] * len(files)
        for fut in as_completed(futures):
            for i, result in fut.result():
                out[i] = _gathered(gather, i, result.open(), files[i], attempt.keep_errors)
                progress.file_done()
            fut.release()
        return out
    except KeyboardInterrupt:
        if futures is not None:
            client.cancel(futures)
        raise
    finally:
        if own:
            client.close()
