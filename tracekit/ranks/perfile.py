"""The work of one trace file, as a worker (local pool or Dask) or this process runs it.

:func:`tabulate_file` takes the file's analysis and tables from the result cache
(:mod:`tracekit.ranks.results`), or computes both (:func:`tracekit.ranks.analyse.fresh`) and
stores them there; what comes back to the parent is small: the tables, and the pipeline's output
with its intervals replaced by a handle to the cache entry (read by the parent only when a view
needs them).
"""

from __future__ import annotations

import copy
import functools
import os
import socket
from collections.abc import Callable

from ..pipeline import Attributed
from . import analyse
from .again import Again
from .analyse import Options
from .zipped import zipped


def per_file(parallel: bool, cache: bool, n_files: int) -> Callable:
    """What is run per file: in parallel, or with the cache, :func:`tabulate_file` (which keeps
    the intervals in memory only for one file analysed in this process); else
    :func:`analyse_only` (no cache: tables are computed when asked for)."""
    if not (parallel or cache):
        return analyse_only
    return functools.partial(tabulate_packed, keep=not parallel and n_files == 1)


#: What a worker returns for one file: its result, or one per rank of a merged file.
Result = tuple[Attributed, dict] | list[tuple[Attributed, dict]]


def tabulate_packed(path: str | os.PathLike, options: Options, keep: bool = False) -> Result:
    """:func:`tabulate_file`, whose tables, steps and windows are packed
    (:func:`tracekit.ranks.gathered.pack_tables`): cheaper to send back and to gather than frames.
    The memory rows are compressed here (:func:`~tracekit.ranks.zipped.zipped`), in the worker:
    the parent gathers every rank one after another, and compressing them there was a quarter of
    its gathering at 100 small ranks; sent so, a rank's result is also 45 KB smaller."""
    got = tabulate_file(path, options, keep)
    return [zipped(p) for p in got] if isinstance(got, list) else zipped(got)


def tabulate_file(path: str | os.PathLike, options: Options, keep: bool = False) -> Result:
    """:func:`~tracekit.ranks.analyse.analyse_file`, and the file's tables as one rank: the
    means over steps and the self-checks, unfiltered, keyed ``(kind, name)``; tables, steps and
    windows packed (:class:`~tracekit.ranks.gathered.Packed`, read as frames on access). Run in
    a worker (pool or Dask), so the parent only gathers small tables: a rank's tables cost the
    parent nothing but their concatenation.

    With ``options.cache`` the result comes from the result cache (:mod:`tracekit.ranks.results`)
    when it holds the file (no pipeline runs), and is stored there otherwise; the intervals
    are then a handle to the entry (a lazy Attributed), loaded when something needs them,
    unless ``keep`` (or the entry could not be written: they are returned in memory).
    A worker on another host than ``options.host`` always returns them in memory: the parent
    could not read its cache directory."""
    elsewhere = options.host is not None and options.host != socket.gethostname()
    if options.cache:
        from . import results

        got = results.load(path, options)
        if got is not None:
            att, tables = got
            return (_holding(att, att.load_intervals()) if elsewhere else att), tables
    return tabulate_fresh(path, options, keep or elsewhere)


def tabulate_fresh(path: str | os.PathLike, options: Options, keep: bool) -> Result:
    """:func:`tabulate_file` without looking in the result cache (but storing in it; a small
    file's parsed columns are not stored, see :data:`tracekit.ranks.analyse.SMALL_FILE`). A
    run of some tables only stores nothing: its result lacks the others."""
    from . import results

    key = results.result_key(path, options) if options.cache and options.tables is None else None
    got = analyse.fresh(path, options, cached=key is not None)
    if len(got) > 1:  # a file of several ranks: each its own result, kept in memory (not cached)
        return got
    att, tables = got[0]
    stored: object = results.store(att, tables, path, options, key) if key is not None else None
    if stored is None and not (keep or options.keep_intervals):
        stored = Again.of(path, options)  # nothing will read them: not sent back
    if stored is not None and not keep:
        att = _holding(att, stored)
    return att, tables


def _holding(att: Attributed, intervals: object) -> Attributed:
    """A copy of ``att`` holding ``intervals``. Not ``dataclasses.replace``: it reads every
    field through its property, so packed steps and windows came back as DataFrames, which the
    worker then pickled and the parent packed again (a third of the parent's gather per rank)."""
    out = copy.copy(att)
    out.intervals = intervals
    return out


def analyse_only(path: str | os.PathLike, options: Options) -> Result:
    """:func:`~tracekit.ranks.analyse.analyse_parts` in this process: tables are computed when
    asked for (a file of several ranks: one pair per rank)."""
    parts = analyse.analyse_parts(path, options)
    return (parts[0], {}) if len(parts) == 1 else [(a, {}) for a in parts]
