"""The facade: ``tracekit.load(path)`` -> :class:`Analysis`, whose tables are DataFrames.

A file is one rank; a directory's files are grouped into ranks by distributedInfo (or the
capture manifest), else by process (:mod:`tracekit.ranks.grouping`): files of one process are successive
windows of one rank. Each rank is read, linked and
attributed once; every table is a function of that one labelled table (``analyses/``).
"""

from __future__ import annotations

import copy
import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tracekit.analyses import REGISTRY
from tracekit.analyses._registry import FEATURES, MEMORY_EVENTS, features_of, with_sources
from tracekit.analyses.findings import rules as read_findings_rules

from .aggregate import whole_numbers as _whole_numbers
from .errors import TraceError
from .filters import Filters
from .perf.devices import resolve as resolve_peaks
from .pipeline import Attributed
from .pipeline.checks import TraceWarning, as_warning
from .ranks import collective_ranks, critical_ranks, manifest_tables
from .ranks.analyse import Options
from .ranks.gathered import Computed, RankTables
from .ranks.grouping import directory_warnings, files_to_read, group_results
from .ranks.tables import PerRankTables
from .read.reader import DEFAULT_MAX_BYTES
from .strings import with_python_strings


@dataclass
class Analysis(PerRankTables):
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
    #: The pipeline's optional steps that ran (``load(tables=...)`` runs only those needed).
    features: frozenset[str] = FEATURES
    #: The memory timeline whole, not thinned (``load(full_series=True)``).
    full_series: bool = False
    #: The tables ``load`` was asked for (None: all): the run has no other.
    wanted: tuple[str, ...] | None = None
    #: The user's findings rules (``load(findings=...)``; None: the built-in ones).
    findings_rules: str | None = None

    def __post_init__(self) -> None:
        # With cores to spare for big intervals, every table at once (the self-checks read
        # three): two processes share them (:meth:`_compute`); else each when asked for.
        self._compute(self.names())
        found = [as_warning(w) for w in self.warnings]
        for rank, att in self.ranks.items():
            found += [as_warning(w, rank) for w in att.warnings]
            found += [as_warning(w, rank) for w in self._checks(rank)]
        self.warnings = found

    @property
    def mode(self) -> str:
        modes = {a.mode for a in self.ranks.values()}
        return "gpu" if "gpu" in modes else "cpu"

    @property
    @with_python_strings
    def intervals(self) -> pd.DataFrame:
        """The labelled interval table (all ranks, with a ``rank`` column)."""
        parts = [a.load_intervals().assign(rank=r) for r, a in self.ranks.items()]
        return pd.concat(parts, ignore_index=True)

    @property
    def meta(self) -> dict:
        """What JSON ``meta`` says about the run (:func:`tracekit.ranks.meta.meta_of`)."""
        from .ranks.meta import meta_of

        return meta_of(self)

    def filtered(self, filters: Filters) -> Analysis:
        """The same ranks and warnings, with tables computed over the intervals ``filters``
        keeps (a copy: the checks of ``__post_init__`` ran on the whole run already).
        Raises :class:`tracekit.filters.FilterError` for a ``module`` naming no category, or
        several without a comma list, and for ``step_ranges`` holding no complete step."""
        modules = [a.load_intervals(["module"])["module"] for a in self.ranks.values()]
        present = {c for m in modules for c in m.astype(str).unique()}
        steps = {s for a in self.ranks.values() for s in a.meta.get("complete_steps", [])}
        out = copy.copy(self)
        out.filters, out._computed, out._held = filters.resolved(present, steps), Computed(), {}
        return out

    def names(self) -> list[str]:
        """The tables of :meth:`PerRankTables.names` that apply to this run (:meth:`applies`),
        among those ``load`` was asked for."""
        wanted = self.wanted
        return [n for n in super().names() if self.applies(n) and (wanted is None or n in wanted)]

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

    def _manifest_rows(self, name: str) -> pd.DataFrame:
        """Table ``name``'s rows from the capture manifest (:mod:`tracekit.ranks.manifest_tables`), once."""
        key = ("manifest", name, -1)
        if key not in self._computed:
            steps = self.filters.steps
            self._computed[key] = manifest_tables.rows(REGISTRY[name], self.path, list(self.ranks), steps)
        return self._computed[key]

    @with_python_strings
    def table(self, name: str, per_step: bool = False) -> pd.DataFrame:
        """One table; ``per_step`` keeps a ``step`` column instead of the mean over steps."""
        spec = REGISTRY.get(name)
        if spec is None or (spec.cross_rank and not self.multi_rank):
            why = "compares ranks, and this run has one" if spec is not None else "unknown"
            raise KeyError(f"table {name!r}: {why}; tables: {', '.join(self.names())}")
        skipped = features_of([name]) - self.features
        if skipped:
            raise KeyError(
                f"table {name!r} needs the {'/'.join(sorted(skipped))} step(s), skipped by load(tables=...)"
            )
        if spec.combine is not None:  # from the run's other tables (the findings)
            return spec.combine(self._source(name, per_step), per_step, self.findings_rules)
        if spec.cross_rank or (spec.cross_fill and self.multi_rank):
            return self.rank_tables(per_step)[name]
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
            # A rank with no rows has untyped (object) columns: left out of the concatenation,
            # so the number columns keep their dtypes (object columns broke the HTML writer).
            rows = [p for p in parts if len(p)] or parts[:1]
            out, lengths = pd.concat(rows, ignore_index=True), [len(p) for p in parts]
        if self.multi_rank or spec.cross_fill:
            out.insert(0, "rank", np.repeat(np.fromiter(self.ranks, np.int64), lengths))
        if self.multi_rank and name in critical_ranks.SPLIT:  # waits at collectives split off
            out = critical_ranks.split(self, name, out, per_step)
        return _typed(spec, out)

    def _source(self, name: str, per_step: bool):
        """What a combining table (``name``) reads: another table of the run, None when it has
        none; each with a ``rank`` column (one rank's tables have none: its own number)."""
        have, rank = set(self.names()) - {name}, next(iter(self.ranks), 0)

        def get(n: str) -> pd.DataFrame | None:
            df = self.table(n, per_step) if n in have else None
            return df if df is None or "rank" in df.columns else df.assign(rank=rank)

        return get

    @with_python_strings
    def tables(self, per_step: bool = False) -> dict[str, pd.DataFrame]:
        """Every table of :meth:`names`, in report order (cross-rank tables last)."""
        names = self.names()
        self._compute(names)
        out = {n: self.table(n, per_step) for n in names if not REGISTRY[n].cross_rank}
        if self.multi_rank:  # the cross-rank tables (analyses/ranks.py)
            out.update({k: v for k, v in self.rank_tables(per_step).items() if k in names})
        return out

    @with_python_strings
    def rank_tables(self, per_step: bool = False) -> dict[str, pd.DataFrame]:
        """``ranks`` (step, phase, compute, exposed communication, idle per rank) and
        ``rank_summary`` (mean/min/median/max over ranks, slowest rank, stragglers); with
        ``per_step``, both per step (a ``step`` column: the ranks that have that step)."""
        from tracekit.analyses import ranks as ranks_table

        whole = None if per_step else self._computed.concat("phase_means", "phases", list(self.ranks))
        if per_step:
            out = self._rank_tables_per_step()
        elif whole is not None:  # every rank's, gathered compact: decoded at once
            out = ranks_table.tables_of_rows(list(self.ranks), whole[1], whole[0])
        else:
            out = ranks_table.tables({rank: self._phase_means(rank, copy=False) for rank in self.ranks})
        if collective_ranks.wanted(self):  # collectives matched across ranks (analyses/cross_rank.py)
            out.update(collective_ranks.cross(self)[0])
        if critical_ranks.wanted(self):  # the step's path across ranks (analyses/critical_wait.py)
            out.update(critical_ranks.path_ranks(self))
        return {k: _typed(REGISTRY.get(k), _whole_numbers(REGISTRY.get(k), v.copy())) for k, v in out.items()}

    def _rank_tables_per_step(self) -> dict[str, pd.DataFrame]:
        """``ranks`` and ``rank_summary`` of each step, from the ranks' per-step phase rows."""
        from tracekit.analyses import ranks as ranks_table

        rows = {r: self.filters.rows(self._per_step("phases", r)) for r in self.ranks}
        parts: dict[str, list[pd.DataFrame]] = {}
        for s in sorted({int(x) for df in rows.values() for x in df["step"]}):
            at = {r: df[df["step"] == s].drop(columns="step") for r, df in rows.items()}
            got = ranks_table.tables({r: df for r, df in at.items() if len(df)})
            for k, v in got.items():
                parts.setdefault(k, []).append(v.assign(step=s)[["step", *v.columns]])
        return {k: pd.concat(v, ignore_index=True) for k, v in parts.items()}


def _typed(spec, out: pd.DataFrame) -> pd.DataFrame:
    """``out`` with number columns as numbers however the ranks' tables were concatenated: an
    object column of numbers is inferred, and an empty table's ``step`` and value columns are
    int64 and float64 (an empty table's columns are untyped; from the Python API the per-step
    tables of multi-rank runs got object columns, and the HTML writer raised ``KeyError``)."""
    out = out.infer_objects()
    if out.empty and spec is not None:
        kinds = {"step": np.int64, **dict.fromkeys(spec.values, np.float64)}
        out = out.astype({c: t for c, t in kinds.items() if c in out and out[c].dtype == object})
    return out


@with_python_strings
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
    devices: str | None = None,
    peak_tflops: str | float | None = None,
    peak_bandwidth: float | None = None,
    tables: list[str] | tuple[str, ...] | None = None,
    full_series: bool = False,
    findings: str | None = None,
    keep_intervals: bool = True,
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
    ``devices``, ``peak_tflops``, ``peak_bandwidth``: the device peaks the % of peak and MFU
    are measured against (:func:`tracekit.perf.devices.resolve`; a bad value raises
    :class:`TraceError` before anything is read).
    ``tables``: the tables wanted (None: all); the run computes only those, and skips the
    pipeline's optional steps none of them needs (the perf model, the memory events): the
    result has no other table. ``full_series``: the memory timeline's every event and the
    critical path timeline's every piece, not thinned to a chart's points. ``findings``: a TOML
    file of findings rules that replace the built-in ones key by key
    (``tracekit/data/findings.toml``; an unknown key raises ValueError).
    ``keep_intervals``: False when nothing will read the ranks' intervals after their tables
    (no ``per_step`` view, no filter): ranks analysed by a pool without the result cache then
    send back none, and a view that reads them after all analyses the file again.

    The steps: :func:`_options` (check and gather what each file's work is told),
    :func:`_analyse_files` (each file read, linked and tabulated, in a pool or here), then
    :func:`_assemble` (files grouped into ranks, the :class:`Analysis`).
    """
    p = Path(path)
    options = _options(
        taxonomy, kernel_rules, max_bytes, cache, devices, peak_tflops, peak_bandwidth, tables, full_series
    )
    options.keep_intervals = keep_intervals
    if findings is not None:
        read_findings_rules(findings)  # checked before anything is read
    files, skipped, head_grouping = files_to_read(p, rank, strict, max_bytes)
    store, done = _analyse_files(p, files, options, jobs, scheduler)
    out = _assemble(p, rank, strict, files, skipped, head_grouping, store, done, options)
    out.findings_rules = findings
    return out


def _options(
    taxonomy, kernel_rules, max_bytes, cache, devices, peak_tflops, peak_bandwidth, tables, full_series
) -> Options:
    """What each file's work is told; the device peaks are checked first (a bad value or
    devices file raises :class:`TraceError` before anything is read), and so are the tables."""
    tflops = None if peak_tflops is None else str(peak_tflops)
    resolve_peaks([], devices, tflops, peak_bandwidth)  # checks the values and the devices file
    unknown = [n for n in tables or () if n not in REGISTRY]
    if unknown:
        raise KeyError(f"unknown table {unknown[0]!r}; tables: {', '.join(REGISTRY)}")
    return Options(
        taxonomy=taxonomy,
        kernel_rules=kernel_rules,
        max_bytes=max_bytes,
        cache=cache,
        devices=devices,
        peak_tflops=tflops,
        peak_bandwidth=peak_bandwidth,
        tables=None if tables is None else with_sources(tuple(tables)),
        full_series=full_series,
    )


def _analyse_files(p: Path, files: list, options: Options, jobs: int | None, scheduler) -> tuple:
    """``(store, done)``: every file analysed (:func:`tracekit.ranks.perfile.per_file`), by a
    pool of ``jobs``, a Dask ``scheduler`` or this process; ``done`` holds per file its
    ``[(slot, Attributed)]`` (one per rank it holds) or its :class:`TraceError`, and ``store``
    the tables of every slot, gathered compact as each file's result arrives."""
    from .ranks.perfile import per_file
    from .ranks.pool import default_jobs, map_ranks
    from .read.parallel import read_jobs

    if scheduler is not None:
        import socket

        options.host = socket.gethostname()
    workers = default_jobs(len(files)) if jobs is None else jobs
    parallel = scheduler is not None or (workers > 1 and len(files) > 1)
    if not parallel:  # one process: its file's decode may use the cores instead
        options.read_jobs = read_jobs() if jobs is None else max(1, jobs)
    store = RankTables()
    slots = itertools.count()

    def gather(i: int, got: Any) -> Any:
        """A file's result(s) folded into ``store``: ``[(slot, Attributed)]``, one per rank the
        file holds (a merged file holds several, :mod:`tracekit.ranks.merged`)."""
        if isinstance(got, TraceError):
            return got
        parts = got if isinstance(got, list) else [got]
        return [(slot, store.gather(slot, *p, options=options)) for slot, p in zip(slots, parts)]

    done = map_ranks(
        per_file(parallel, options.cache, len(files)),
        files,
        options,
        keep_errors=p.is_dir(),
        jobs=workers,
        scheduler=scheduler,
        gather=gather,
    )
    return store, done


def _assemble(p, rank, strict, files, skipped, head_grouping, store, done, options: Options) -> Analysis:
    """The :class:`Analysis` of the analysed files: failures skipped (or raised, when
    ``strict`` or when every file failed), files grouped into ranks, ``rank`` picked."""
    failed = [(f, e) for f, e in zip(files, done) if isinstance(e, TraceError)]
    if failed and (strict or len(failed) == len(done)):
        raise failed[0][1]
    skipped += [(f, e.problem) for f, e in failed]
    parts = [
        (files[i], slot, att)
        for i, got in enumerate(done)
        if not isinstance(got, TraceError)
        for slot, att in got
    ]
    files, kept, done = [f for f, _, _ in parts], [s for _, s, _ in parts], [a for _, _, a in parts]
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
        features=options.features,
        full_series=options.full_series,
        wanted=options.tables,
    )
