"""The facade: ``tracekit.load(path)`` -> :class:`Analysis`, whose tables are DataFrames.

A file is one rank; a directory's files are grouped into ranks by distributedInfo (or the
capture manifest), else by process (:mod:`tracekit.ranks.grouping`): files of one process are successive
windows of one rank. Each rank is read, linked and
attributed once; every table is a function of that one labelled table (``analyses/``).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyses import REGISTRY, TABLES
from tracekit.analyses._registry import MEMORY_EVENTS, PER_STEP, PRESENT_MEAN

from . import forked, progress
from .aggregate import mean_over_present as _mean_over_present
from .aggregate import mean_over_steps as _mean_over_steps
from .aggregate import whole_numbers as _whole_numbers
from .errors import TraceError
from .filters import Filters
from .pipeline import Attributed, run
from .pipeline.checks import TraceWarning, as_warning, check_rank
from .pipeline.taxonomy import kernel_rules, module_taxonomy
from .pipeline.windows import Windows, frame_windows
from .ranks import manifest_tables
from .ranks.gathered import Computed, RankTables
from .ranks.grouping import directory_warnings, files_to_read, group_results, host_of, process_of
from .read.reader import DEFAULT_MAX_BYTES, read_trace


@dataclass
class Options:
    taxonomy: str | None = None
    kernel_rules: str | None = None
    max_bytes: int = DEFAULT_MAX_BYTES
    cache: bool = True
    #: Processes that decode one big plain file (:mod:`tracekit.read.parallel`); 1 in a rank pool.
    read_jobs: int = 1
    #: The host of the process that gathers the results (set for a Dask cluster): a worker on
    #: another host sends the intervals back, since a handle to its cache would not be readable.
    host: str | None = None


#: Fewest intervals whose tables are worth a second process (:meth:`Analysis._compute`): below
#: it they take a few tens of milliseconds.
SHARED_ROWS = 20_000


def analyse_file(path: str | os.PathLike, options: Options, store_parsed: bool = True) -> Attributed:
    """Read one trace file and run the pipeline (:mod:`tracekit.pipeline`) on it; its parsed
    columns are stored in the parse cache only when ``store_parsed``."""
    tax = module_taxonomy(options.taxonomy)
    rules = kernel_rules(options.kernel_rules)
    raw = _read(path, options, store_parsed)
    progress.fraction(progress.DECODED)
    att = run(raw, tax, rules)
    att.warnings[:0] = raw.warnings
    progress.fraction(progress.LINKED)
    att.meta.update({k: raw.meta[k] for k in ("rank", "world_size", "devices", "events_in_file")})
    att.meta["pid"] = process_of(raw.events)
    att.meta["host"] = host_of(path, raw.meta.get("host_name"))
    return att


def _read(path: str | os.PathLike, options: Options, store: bool = True):
    """The parsed columns of ``path``: from its Parquet cache when valid, else read (and
    cached, when ``store``)."""
    if not options.cache:
        return read_trace(path, options.max_bytes, options.read_jobs)
    from .read import cache

    raw = cache.load(path, options.max_bytes)
    if raw is None:
        try:  # the identity of the bytes about to be read; checked again before storing
            key = cache.file_key(path, options.max_bytes) if store else None
        except OSError:
            key = None
        raw = read_trace(path, options.max_bytes, options.read_jobs)
        if key is not None:
            cache.store(raw, path, options.max_bytes, key)
    return raw


@dataclass
class Analysis:
    """Analysed trace(s): ``tables()`` gives ``{name: DataFrame}``, times in milliseconds."""

    path: str
    ranks: dict[int, Attributed]
    #: Every warning of the run: those given here, each rank's pipeline warnings (with its
    #: rank) and the self-checks (:mod:`tracekit.pipeline.checks`); exactly JSON ``meta.warnings``.
    warnings: list[TraceWarning] = field(default_factory=list)
    grouping: str = ""
    filters: Filters = field(default_factory=Filters)
    #: Files of a directory that were skipped (unreadable, not traces, not regular files):
    #: ``[{"file": name, "problem": why}]``; the result is then partial.
    skipped: list[dict] = field(default_factory=list)
    #: ``{(kind, name, rank): frame}`` computed once (workers' tables: :mod:`tracekit.ranks.gathered`).
    _computed: Any = field(default_factory=Computed, repr=False, compare=False)
    #: The one lazy rank whose intervals are held (:meth:`_rank_intervals`): {rank: DataFrame}.
    _held: dict = field(default_factory=dict, repr=False, compare=False)
    #: Processes that may compute the tables of the ranks held in memory (:meth:`_compute`).
    jobs: int = 1

    def __post_init__(self) -> None:
        # With cores to spare for big intervals, every table at once (the self-checks read
        # three): two processes share them (:meth:`_compute`); else each when asked for.
        self._compute(self.names())
        found = [as_warning(w) for w in self.warnings]
        for rank, att in self.ranks.items():
            found += [as_warning(w, rank) for w in att.warnings]
            found += [as_warning(w, rank) for w in self._checks(rank)]
        self.warnings = found

    def _checks(self, rank: int) -> list[TraceWarning]:
        """The rank's self-checks (:func:`~tracekit.pipeline.checks.check_rank`), computed once, with
        the rank left blank (the caller fills it in: the checks put it in no other place)."""
        key = ("checks", "", rank)
        if key not in self._computed:
            att = self.ranks[rank]
            tables = {n: self._per_step(n, rank) for n in ("phases", "modules", "kernels")}
            self._computed[key] = check_rank(None, tables, att.steps, att.meta)
        return self._computed[key]

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1

    @property
    def mode(self) -> str:
        modes = {a.mode for a in self.ranks.values()}
        return "gpu" if "gpu" in modes else "cpu"

    @property
    def intervals(self) -> pd.DataFrame:
        """The labelled interval table (all ranks, with a ``rank`` column)."""
        parts = [a.load_intervals().assign(rank=r) for r, a in self.ranks.items()]
        return pd.concat(parts, ignore_index=True)

    def _rank_intervals(self, rank: int) -> pd.DataFrame:
        """One rank's intervals. A lazy rank's (read from the result cache, :mod:`tracekit.ranks.results`)
        are loaded on demand and only the last one asked for is kept: the tables of many ranks
        are computed one rank after another without holding them all."""
        att = self.ranks[rank]
        if not att.lazy:
            return att.intervals
        if rank not in self._held:
            self._held.clear()
            self._held[rank] = att.load_intervals()
        return self._held[rank]

    @property
    def meta(self) -> dict:
        """What JSON ``meta`` says about the run (:func:`tracekit.ranks.meta.meta_of`)."""
        from .ranks.meta import meta_of

        return meta_of(self)

    def filtered(self, filters: Filters) -> Analysis:
        """The same ranks and warnings, with tables computed over the intervals ``filters``
        keeps (a copy: the checks of ``__post_init__`` ran on the whole run already).
        Raises :class:`tracekit.filters.FilterError` for a ``module`` naming no category, or
        several without a comma list."""
        modules = [a.load_intervals(["module"])["module"] for a in self.ranks.values()]
        present = {c for m in modules for c in m.astype(str).unique()}
        out = copy.copy(self)
        out.filters, out._computed, out._held = filters.resolved(present), Computed(), {}
        return out

    def names(self) -> list[str]:
        """The tables this analysis has: every registered one that applies (:meth:`applies`)
        and honours the filters."""
        return [
            n
            for n, s in REGISTRY.items()
            if self.applies(n) and self.filters.supports(REGISTRY.get(s.source or n, s))
        ]

    def applies(self, name: str) -> bool:
        """Whether the run has table ``name`` when no filter leaves it out: cross-rank tables
        on several ranks only, manifest tables where the manifest has their rows, memory
        tables where some trace records memory."""
        s = REGISTRY[name]
        return (
            (self.multi_rank or not s.cross_rank)
            and (s.from_manifest is None or not self._manifest_rows(name).empty)
            and (s.reads != MEMORY_EVENTS or self.has_memory)
        )

    @property
    def has_memory(self) -> bool:
        """Whether some rank's trace records memory events (``profile_memory=True``)."""
        return any(a.meta.get("memory_events", 0) for a in self.ranks.values())

    def _n_steps(self, att: Attributed) -> int:
        done = att.meta.get("complete_steps", [])
        if self.filters.steps is not None:
            done = [s for s in done if s in self.filters.steps]
        return len(done) or 1

    def table(self, name: str, per_step: bool = False) -> pd.DataFrame:
        """One table; ``per_step`` keeps a ``step`` column instead of the mean over steps."""
        spec = REGISTRY.get(name)
        if spec is None or (spec.cross_rank and not self.multi_rank):
            raise KeyError(f"unknown table {name!r}; tables: {', '.join(self.names())}")
        if spec.cross_rank:
            return self.rank_tables()[name]
        if spec.from_manifest is not None:
            return manifest_tables.table(spec, self._manifest_rows(name), per_step, self.multi_rank)
        if spec.derive is not None and spec.source:
            return _whole_numbers(spec, spec.derive(self.table(spec.source, per_step)))
        whole = None if per_step else self._computed.concat("mean", name, list(self.ranks))
        if whole is not None:  # every rank's, gathered compact: decoded at once
            out, lengths = whole
        else:
            parts = [self._rank_table(name, rank, per_step, copy=False) for rank in self.ranks]
            if not parts:
                return pd.DataFrame()
            out, lengths = pd.concat(parts, ignore_index=True), [len(p) for p in parts]
        if self.multi_rank:
            out.insert(0, "rank", np.repeat(np.fromiter(self.ranks, np.int64), lengths))
        return out

    def _manifest_rows(self, name: str) -> pd.DataFrame:
        """Table ``name``'s rows from the capture manifest (:mod:`tracekit.ranks.manifest_tables`), once."""
        key = ("manifest", name, -1)
        if key not in self._computed:
            steps = self.filters.steps
            self._computed[key] = manifest_tables.rows(REGISTRY[name], self.path, list(self.ranks), steps)
        return self._computed[key]

    def _rank_table(self, name: str, rank: int, per_step: bool, copy: bool = True) -> pd.DataFrame:
        """One rank's table (per step, or its mean over steps), computed once; the kept frame
        itself when not ``copy`` (for a caller that only reads it, such as a concatenation)."""
        if per_step:
            return _whole_numbers(REGISTRY[name], self.filters.rows(self._per_step(name, rank)))
        key = ("mean", name, rank)
        if key not in self._computed:
            spec = REGISTRY[name]
            df = self.filters.rows(self._per_step(name, rank))
            if spec.aggregate == PRESENT_MEAN:
                df = _mean_over_present(df, list(spec.keys))
            elif spec.aggregate != PER_STEP:
                df = _mean_over_steps(df, self._n_steps(self.ranks[rank]), list(spec.keys))
            if spec.finish is not None and not df.empty:
                df = spec.finish(df)
            self._computed[key] = _whole_numbers(spec, df)
        return self._computed[key].copy() if copy else self._computed[key]

    def _compute(self, names: list[str]) -> None:
        """Compute (once) each table of ``names``, per step and as its mean, for every rank whose
        intervals are in memory, on two processes (:func:`tracekit.forked.share`) when ``jobs``
        allows it and the intervals are many; else leave them to be computed when asked for.
        Either way each table is the same: computed by the same code, in one process or the other."""
        todo = [
            (n, r)
            for n in names
            for r, att in self.ranks.items()
            if REGISTRY[n].of_intervals and not att.lazy and ("mean", n, r) not in self._computed
        ]
        rows = sum(len(self.ranks[r].intervals) for r in {r for _, r in todo})
        if self.jobs < 2 or rows < SHARED_ROWS:
            return
        for got in forked.share(todo, self._computed_for):
            for key, value in got.items():
                self._computed[key] = value

    def _computed_for(self, job: tuple[str, int]) -> dict:
        """What computing one table of one rank adds to ``_computed`` (a job of :meth:`_compute`)."""
        name, rank = job
        self._rank_table(name, rank, per_step=False, copy=False)
        return {k: self._computed[k] for k in (("step", name, rank), ("mean", name, rank))}

    def tables(self, per_step: bool = False) -> dict[str, pd.DataFrame]:
        """Every table of :meth:`names`, in report order (cross-rank tables last)."""
        names = self.names()
        self._compute(names)
        out = {n: self.table(n, per_step) for n in names if not REGISTRY[n].cross_rank}
        if self.multi_rank:  # the cross-rank tables (analyses/ranks.py)
            out.update({k: v for k, v in self.rank_tables().items() if k in names})
        return out

    def rank_tables(self) -> dict[str, pd.DataFrame]:
        """``ranks`` (step, phase, compute, exposed communication, idle per rank) and
        ``rank_summary`` (mean/min/median/max over ranks, slowest rank, stragglers)."""
        from tracekit.analyses import ranks as ranks_table

        whole = self._computed.concat("phase_means", "phases", list(self.ranks))
        if whole is not None:  # every rank's, gathered compact: decoded at once
            out = ranks_table.tables_of_rows(list(self.ranks), whole[1], whole[0])
        else:
            out = ranks_table.tables({rank: self._phase_means(rank, copy=False) for rank in self.ranks})
        return {k: _whole_numbers(REGISTRY.get(k), v) for k, v in out.items()}

    def _phase_means(self, rank: int, copy: bool = True) -> pd.DataFrame:
        """The rank's phase times, mean per step (what the cross-rank tables compare); the kept
        frame itself when not ``copy``."""
        key = ("phase_means", "phases", rank)
        if key not in self._computed:
            df = self.filters.rows(self._per_step("phases", rank))
            self._computed[key] = _mean_over_steps(df, self._n_steps(self.ranks[rank]), ["phase"])
        return self._computed[key].copy() if copy else self._computed[key]

    def _per_step(self, name: str, rank: int) -> pd.DataFrame:
        """One rank's per-step table, computed once however often it is asked for."""
        key = ("step", name, rank)
        if key not in self._computed:
            spec = REGISTRY[name]
            rows = self.ranks[rank].memory if spec.reads == MEMORY_EVENTS else self._rank_intervals(rank)
            self._computed[key] = TABLES[name](self.filters.intervals(rows, spec), self._windows(rank))
        return self._computed[key].copy()

    def _windows(self, rank: int) -> Windows:
        """The rank's (step-filtered) windows, framed once for every table (:func:`frame_windows`)."""
        key = ("windows", "", rank)
        if key not in self._computed:
            self._computed[key] = frame_windows(self.filters.windows(self.ranks[rank].windows))
        return self._computed[key]


def load(
    path: str | os.PathLike,
    rank: int | None = None,
    *,
    taxonomy: str | None = None,
    kernel_rules: str | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    cache: bool = True,
    jobs: int | None = None,
    scheduler=None,
    strict: bool = False,
) -> Analysis:
    """Analyse a trace file, or a directory of per-rank trace files (``rank`` picks one).

    ``cache``: use and fill the Parquet cache of parsed columns (:mod:`tracekit.read.cache`) and the
    result cache (:mod:`tracekit.ranks.results`): a cached file's tables come without running the
    pipeline, its intervals are read when something needs them.
    ``jobs``: ranks analysed in parallel by a local process pool (default: one per core);
    ``scheduler``: address of (or a Client for) an existing Dask cluster to run them on instead.
    In a directory, files that cannot be analysed are skipped (the result is partial, see
    :attr:`Analysis.skipped`) unless ``strict``, or unless no file can be analysed: then the
    first file's :class:`TraceError` is raised.
    """
    options = Options(taxonomy=taxonomy, kernel_rules=kernel_rules, max_bytes=max_bytes, cache=cache)
    if scheduler is not None:
        import socket

        options.host = socket.gethostname()
    p = Path(path)
    files, skipped, head_grouping = files_to_read(p, rank, strict, max_bytes)
    from .ranks.perfile import per_file
    from .ranks.pool import default_jobs, map_ranks
    from .read.parallel import read_jobs

    workers = default_jobs(len(files)) if jobs is None else jobs
    parallel = scheduler is not None or (workers > 1 and len(files) > 1)
    if not parallel:  # one process: its file's decode may use the cores instead
        options.read_jobs = read_jobs() if jobs is None else max(1, jobs)
    store = RankTables()
    done = map_ranks(
        per_file(parallel, cache, len(files)),
        files,
        options,
        keep_errors=p.is_dir(),
        jobs=workers,
        scheduler=scheduler,
        gather=lambda i, got: got if isinstance(got, TraceError) else store.gather(i, *got, options=options),
    )
    failed = [(f, e) for f, e in zip(files, done) if isinstance(e, TraceError)]
    if failed and (strict or len(failed) == len(done)):
        raise failed[0][1]
    skipped += [(f, e.problem) for f, e in failed]
    kept = [i for i, got in enumerate(done) if not isinstance(got, TraceError)]
    files, done = [files[i] for i in kept], [done[i] for i in kept]
    ranks, grouping, alone = group_results(p, files, done)
    grouping = head_grouping or grouping
    if rank is not None:
        if rank not in ranks:
            raise TraceError(p, f"no rank {rank}; ranks here: {', '.join(map(str, sorted(ranks)))}")
        ranks = {rank: ranks[rank]}
    return Analysis(
        path=os.fspath(p),
        ranks=dict(sorted(ranks.items())),
        grouping=grouping,
        warnings=directory_warnings(done, skipped),
        skipped=[{"file": f.name, "problem": why} for f, why in skipped],
        _computed=Computed(store, {r: kept[j] for r, j in alone.items() if r in ranks}),
        jobs=options.read_jobs,
    )
