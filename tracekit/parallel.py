"""Per-rank work in parallel: a local process pool, or an existing Dask cluster.

Ranks are independent until the final aggregation, so each file is read, linked and attributed
in its own worker (:func:`tracekit.analysis.analyse_file`), and only its labelled interval
table comes back: the raw events of a rank live and die inside one worker, so the parent never
holds more than one rank's raw events (none at all when ``jobs > 1``).

* ``jobs=1``: in this process, one rank after another;
* ``jobs=N``: :class:`concurrent.futures.ProcessPoolExecutor` with N workers;
* ``scheduler="tcp://host:8786"`` (or a ``distributed.Client``): ``Client.map`` on an existing
  Dask cluster (``pip install 'tracekit[dask]'``). The workers need tracekit installed.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Any, Callable, Sequence

from . import progress


def default_jobs(n_files: int) -> int:
    return max(1, min(n_files, os.cpu_count() or 1))


def map_ranks(fn: Callable, files: Sequence[Any], *args, jobs: int = 1,
              scheduler: Any = None) -> list:
    """``[fn(f, *args) for f in files]``, in order, run as asked."""
    files = list(files)
    if scheduler is not None:
        return _map_dask(fn, files, args, scheduler)
    if jobs <= 1 or len(files) <= 1:
        out = []
        for f in files:
            out.append(fn(f, *args))
            progress.file_done()
        return out
    with ProcessPoolExecutor(max_workers=min(jobs, len(files))) as pool:
        futures = [pool.submit(fn, f, *args) for f in files]
        for f in as_completed(futures):
            f.result()
            progress.file_done()
        return [f.result() for f in futures]


def _map_dask(fn: Callable, files: list, args: tuple, scheduler: Any) -> list:
    try:
        from distributed import Client
    except ImportError:
        raise RuntimeError("--scheduler needs Dask: pip install 'tracekit[dask]'") from None
    own = not isinstance(scheduler, Client)
    client = Client(scheduler) if own else scheduler
    try:
        futures = client.map(fn, files, *[[a] * len(files) for a in args], pure=False)
        return client.gather(futures)
    finally:
        if own:
            client.close()
