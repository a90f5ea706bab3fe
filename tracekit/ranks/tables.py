"""Each rank's tables, computed once: the per-rank core of :class:`tracekit.analysis.Analysis`.

:class:`PerRankTables` computes one rank's per-step tables (over its framed windows), their
means over complete steps, the self-checks and the phase means the cross-rank tables compare,
keeping each in ``_computed``; on two processes (:func:`tracekit.forked.share`) when the
intervals are many. The facade (``Analysis``) and a worker computing one file's tables
(:func:`tables_of`, for :mod:`tracekit.ranks.perfile`) are both one: the worker's tables are the
facade's, computed by the same code.

Needs: ``ranks`` ({rank: Attributed}), ``filters``, ``_computed``, ``_held`` and ``jobs`` on the
instance. Guarantees: each table of a rank is computed at most once per instance.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tracekit.analyses import REGISTRY, TABLES
from tracekit.analyses._registry import (
    CRITICAL_PIECES,
    FEATURES,
    INTERVALS,
    MEMORY_EVENTS,
    PER_STEP,
    PRESENT_MEAN,
    features_of,
)

from .. import forked
from ..aggregate import derive_ratios
from ..aggregate import mean_over_present as _mean_over_present
from ..aggregate import mean_over_steps as _mean_over_steps
from ..aggregate import whole_numbers as _whole_numbers
from ..filters import Filters
from ..pipeline import Attributed
from ..pipeline.checks import TraceWarning, check_rank
from ..pipeline.windows import Windows, frame_windows
from .gathered import Computed
from .window_tables import per_file_tables, windowed

#: Fewest intervals whose tables are worth a second process (:meth:`Analysis._compute`): below
#: it they take a few tens of milliseconds.
SHARED_ROWS = 20_000


class PerRankTables:
    """The tables of each rank of ``ranks``, computed once (a mixin: the instance holds the
    state, see the module's docstring)."""

    ranks: dict[int, Attributed]
    filters: Filters
    #: ``{(kind, name, rank): frame}`` computed once (workers' tables: :mod:`tracekit.ranks.gathered`).
    _computed: Any
    #: The one lazy rank whose intervals are held (:meth:`_rank_intervals`): {rank: DataFrame}.
    _held: dict
    #: Processes that may compute the tables of the ranks held in memory (:meth:`_compute`).
    jobs: int
    #: The pipeline's optional steps that ran (:data:`tracekit.analyses._registry.FEATURES`):
    #: a table that needs another one is not this run's.
    features: frozenset[str]
    #: Long per-event series whole (``--full-series``), not thinned (``TableSpec.series``).
    full_series: bool

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1

    def names(self) -> list[str]:
        """The tables this analysis has: every registered one that applies (cross-rank tables
        on several ranks only) and honours the filters."""
        return [
            n
            for n, s in REGISTRY.items()
            if (self.multi_rank or not s.cross_rank)
            and self.filters.supports(REGISTRY.get(s.source or n, s))
            and features_of([n]) <= self.features
        ]

    def _checks(self, rank: int) -> list[TraceWarning]:
        """The rank's self-checks (:func:`~tracekit.pipeline.checks.check_rank`), computed once, with
        the rank left blank (the caller fills it in: the checks put it in no other place)."""
        key = ("checks", "", rank)
        if key not in self._computed:
            att = self.ranks[rank]
            tables = {n: self._per_step(n, rank) for n in ("phases", "modules", "kernels")}
            self._computed[key] = check_rank(None, tables, att.steps, att.meta)
        return self._computed[key]

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

    def _n_steps(self, att: Attributed) -> int:
        done = att.meta.get("complete_steps", [])
        if self.filters.steps is not None:
            done = [s for s in done if s in self.filters.steps]
        return len(done) or 1

    def _rank_table(self, name: str, rank: int, per_step: bool, copy: bool = True) -> pd.DataFrame:
        """One rank's table (per step, or its mean over steps), computed once; the kept frame
        itself when not ``copy`` (for a caller that only reads it, such as a concatenation)."""
        spec = REGISTRY[name]
        if per_step:
            df = derive_ratios(spec, self._per_step(name, rank), self._windows(rank), None)
            return _whole_numbers(spec, self.filters.rows(df))
        key = ("mean", name, rank)
        if key not in self._computed:
            # Sums first, then ratios: the mean of each summed column over the steps, every
            # ratio column from those means (registry's Ratio), and only then the rows a
            # filter keeps (a share's denominator is the whole table's).
            n = self._n_steps(self.ranks[rank])
            df = self._per_step(name, rank)
            if spec.aggregate == PRESENT_MEAN:  # memory: over the steps that hold the row
                df = _mean_over_present(df, list(spec.keys))
            elif spec.aggregate != PER_STEP:
                df = _mean_over_steps(df, n, list(spec.keys))
            df = derive_ratios(spec, df, self._windows(rank), n)
            if spec.finish is not None and not df.empty:
                df = spec.finish(df)
            self._computed[key] = _whole_numbers(spec, self.filters.rows(df), mean=True)
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

    def _phase_means(self, rank: int, copy: bool = True) -> pd.DataFrame:
        """The rank's phase times, mean per step (what the cross-rank tables compare); the kept
        frame itself when not ``copy``."""
        key = ("phase_means", "phases", rank)
        if key not in self._computed:
            df = self.filters.rows(self._per_step("phases", rank))
            self._computed[key] = _mean_over_steps(df, self._n_steps(self.ranks[rank]), ["phase"])
        return self._computed[key].copy() if copy else self._computed[key]

    def _instances(self, rank: int) -> pd.DataFrame:
        """The rank's collective instances (what the cross-rank matching reads), computed once."""
        key = ("instances", "collectives", rank)
        if key not in self._computed:
            from tracekit.analyses.collectives import instances

            rows = self.filters.intervals(self._rank_intervals(rank), REGISTRY["collectives"])
            self._computed[key] = instances(rows, self._windows(rank))
        return self._computed[key]

    def _per_step(self, name: str, rank: int) -> pd.DataFrame:
        """One rank's per-step table, computed once however often it is asked for."""
        key = ("step", name, rank)
        if key not in self._computed and self._by_file(name, rank):
            self._per_file(rank)
        if key not in self._computed:
            spec = REGISTRY[name]
            att = self.ranks[rank]
            other = {MEMORY_EVENTS: "memory", CRITICAL_PIECES: "critical"}.get(spec.reads)
            rows = getattr(att, other) if other else self._rank_intervals(rank)
            self._computed[key] = self._func(name)(self.filters.intervals(rows, spec), self._windows(rank))
        return self._computed[key].copy()

    def _by_file(self, name: str, rank: int) -> bool:
        """Whether table ``name`` of ``rank`` is computed a window file at a time
        (:mod:`tracekit.ranks.window_tables`): an interval table of a rank of several files."""
        att = self.ranks[rank]
        return REGISTRY[name].reads == INTERVALS and att.lazy and windowed(att.__dict__["_intervals"])

    def _per_file(self, rank: int) -> None:
        """Every interval table of ``rank`` (a rank of several window files), per step, a file at
        a time: each file's intervals are read once and let go before the next's."""
        names = [n for n in self.names() if REGISTRY[n].of_intervals and self._by_file(n, rank)]
        names = [n for n in names if ("step", n, rank) not in self._computed]

        def compute(name: str, iv: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
            framed = frame_windows(self.filters.windows(windows))
            return self._func(name)(self.filters.intervals(iv, REGISTRY[name]), framed)

        att = self.ranks[rank]
        for name, df in per_file_tables(att.__dict__["_intervals"], att.windows, names, compute).items():
            self._computed[("step", name, rank)] = df

    def _func(self, name: str):
        """The table's function, with every point of a series when ``full_series``."""
        func = TABLES[name]
        return functools.partial(func, points=None) if REGISTRY[name].series and self.full_series else func

    def _windows(self, rank: int) -> Windows:
        """The rank's (step-filtered) windows, framed once for every table (:func:`frame_windows`)."""
        key = ("windows", "", rank)
        if key not in self._computed:
            self._computed[key] = frame_windows(self.filters.windows(self.ranks[rank].windows))
        return self._computed[key]


@dataclass
class OneRank(PerRankTables):
    """One file's tables as one rank (what :func:`tables_of` computes)."""

    ranks: dict[int, Attributed]
    jobs: int = 1
    filters: Filters = field(default_factory=Filters)
    features: frozenset[str] = FEATURES
    full_series: bool = False
    _computed: Any = field(default_factory=Computed, repr=False, compare=False)
    _held: dict = field(default_factory=dict, repr=False, compare=False)


def tables_of(att: Attributed, path: str | os.PathLike, options: Any) -> dict:
    """The tables of one file as one rank (see :func:`tracekit.ranks.perfile.tabulate_file`),
    computed by up to ``options.read_jobs`` processes (:meth:`PerRankTables._compute`): the
    tables ``options.tables`` names (every one when None) that the facade computes on creation
    (``Analysis.__post_init__``: on two processes when worth it, the self-checks), their means
    over steps and the phase means."""
    one = OneRank(
        ranks={0: att}, jobs=options.read_jobs, features=options.features, full_series=options.full_series
    )
    asked = (
        None if options.tables is None else {*options.tables, *(REGISTRY[n].source for n in options.tables)}
    )
    wanted = [n for n in one.names() if asked is None or n in asked]
    one._compute(wanted)
    one._checks(0)
    for name in wanted:  # kept in _computed; the copies these return would go unread
        if REGISTRY[name].of_intervals:
            one._rank_table(name, 0, per_step=False, copy=False)
    one._phase_means(0, copy=False)
    if {"collectives", "critical_path", "critical_path_ranks"} & set(
        wanted
    ):  # the cross-rank matching's input (collective_ranks)
        one._instances(0)
    # Per-step tables stay here: the report needs only the means (and --per-step recomputes
    # them from the intervals); shipping them would add a third to what the parent unpickles
    # and keeps per rank. The framed windows are the parent's to derive (from the rank's windows).
    return {k[:2]: v for k, v in one._computed.items() if k[0] not in ("step", "windows")}
