"""The work of one trace file, as a worker (local pool or Dask) or this process runs it.

:func:`tabulate_file` analyses one file (:func:`tracekit.analysis.analyse_file`) and computes
its tables as one rank, or takes both from the result cache (:mod:`tracekit.ranks.results`); what
comes back to the parent is small: the tables, and the pipeline's output with its intervals
replaced by a handle to the cache entry (read by the parent only when a view needs them).
"""

from __future__ import annotations

import copy
import functools
import os
import socket
from collections.abc import Callable
from dataclasses import replace

import pandas as pd

from tracekit.analyses import REGISTRY

from .. import analysis
from ..analysis import Analysis, Options
from ..pipeline import Attributed
from .gathered import pack_tables


def per_file(parallel: bool, cache: bool, n_files: int) -> Callable:
    """What is run per file: in parallel, or with the cache, :func:`tabulate_file` (which keeps
    the intervals in memory only for one file analysed in this process); else
    :func:`analyse_only` (no cache: tables are computed when asked for)."""
    if not (parallel or cache):
        return analyse_only
    return functools.partial(tabulate_packed, keep=not parallel and n_files == 1)


def tabulate_packed(path: str | os.PathLike, options: Options, keep: bool = False) -> tuple[Attributed, dict]:
    """:func:`tabulate_file`, whose tables, steps and windows are packed
    (:func:`tracekit.ranks.gathered.pack_tables`): cheaper to send back and to gather than frames."""
    return tabulate_file(path, options, keep)


def tabulate_file(path: str | os.PathLike, options: Options, keep: bool = False) -> tuple[Attributed, dict]:
    """:func:`analyse_file`, and the file's tables as one rank: the means over steps and the
    self-checks, unfiltered, keyed ``(kind, name)``; tables, steps and windows packed
    (:class:`~tracekit.ranks.gathered.Packed`, read as frames on access). Run in a worker (pool or
    Dask), so the parent only gathers small tables: a rank's tables cost the parent nothing
    but their concatenation.

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


#: A file at most this big on disk is kept in the cache as its result only (one entry, not a
#: parse cache entry as well): decoding it again, when its result cannot be used (other rule
#: files), costs about what writing and reading its parsed columns would.
SMALL_FILE = 4 << 20


def tabulate_fresh(path: str | os.PathLike, options: Options, keep: bool) -> tuple[Attributed, dict]:
    """:func:`tabulate_file` without looking in the result cache (but storing in it; a small
    file's parsed columns are not stored, see :data:`SMALL_FILE`)."""
    from . import results

    key = results.result_key(path, options) if options.cache else None
    att = analysis.analyse_file(path, options, store_parsed=key is None or not _small(path))
    tables = tables_of(att, path, options.read_jobs)
    # Module instances are read by no table or view after the pipeline: neither stored nor
    # sent back (they were a tenth of what the parent kept per rank).
    # Packed once (what the parent gathers, and what the result cache stores as it is).
    att, tables = pack_tables(replace(att, modules=pd.DataFrame()), tables)
    stored = results.store(att, tables, path, options, key) if key is not None else None
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


def _small(path: str | os.PathLike) -> bool:
    try:
        return os.stat(path).st_size <= SMALL_FILE
    except OSError:
        return False


def tables_of(att: Attributed, path: str | os.PathLike, jobs: int = 1) -> dict:
    """The tables of one file as one rank (see :func:`tabulate_file`), computed by up to
    ``jobs`` processes (:meth:`Analysis._compute`)."""
    one = Analysis(path=os.fspath(path), ranks={0: att}, jobs=jobs)
    for name, spec in REGISTRY.items():
        if spec.of_intervals:
            one._rank_table(name, 0, per_step=False)
    one._phase_means(0)
    # Per-step tables stay here: the report needs only the means (and --per-step recomputes
    # them from the intervals); shipping them would add a third to what the parent unpickles
    # and keeps per rank. The framed windows are the parent's to derive (from the rank's windows).
    return {k[:2]: v for k, v in one._computed.items() if k[0] not in ("step", "windows")}


def analyse_only(path: str | os.PathLike, options: Options) -> tuple[Attributed, dict]:
    """:func:`analyse_file` in this process: tables are computed when asked for."""
    return analysis.analyse_file(path, options), {}
