"""The table registry: what each table is, declared once beside the function that computes it.

An analysis module computes its table with a function ``table(intervals, windows)`` and declares
it with :func:`register`::

    @register("gemm", title="GEMM share of compute-kernel time", paper="XIII",
              keys=["phase"], values={"gemm_ms": MS, "compute_ms": MS, "percent": PCT})
    def table(intervals, windows): ...

The facade (:mod:`tracekit.analysis`), the terminal, HTML and file renderers, the CLI's
``--table`` choices and ``tracekit compare`` read :data:`REGISTRY`; none of them knows a table
by name. Units say how a column prints (``count`` and ``bytes`` are integers everywhere) and
how it aggregates over steps (see :class:`TableSpec`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

MS, US, PCT, COUNT, BYTES, INDEX = "ms", "us", "%", "count", "bytes", "index"
#: Units of the perf model's columns (docs/metrics.md "FLOPs, bytes and % of peak"): a mean
#: number of calls per step (not rounded), 10^9 FLOP, 10^9 bytes, 10^12 FLOP/s, 10^12 bytes/s,
#: FLOP per byte.
CALLS, GFLOP, GBYTE, TFLOPS, TBPS, FLOP_PER_BYTE = "calls", "GFLOP", "GB", "TFLOP/s", "TB/s", "FLOP/B"
#: A text value that ``finish`` derives from a row's values (efficiency's ``bound``): not summed
#: over steps, derived again from the means.
LABEL = "label"
#: Memory in MiB (2^20 bytes) and a rate per second (``tokens_per_s``: tokens/s).
MB, PER_S = "MB", "/s"
#: A bandwidth in 10^9 bytes per second (the collectives' algbw and busbw).
GBPS = "GB/s"
#: Units whose values are whole numbers (printed without decimals, integers in JSON).
INTEGER_UNITS = {COUNT, BYTES, INDEX}

#: How per-step rows become the reported row.
MEAN = "mean"  # sum over complete steps / number of complete steps (absent = 0)
STAGE_MEAN = "stage-mean"  # MEAN, but rows of an inference stage over the steps holding it
PER_STEP = "per-step"  # only meaningful per step: no mean row (e.g. step windows)
PRESENT_MEAN = "present-mean"  # each row's mean over the complete steps that hold it

#: What a table function reads: the labelled intervals, or the labelled memory events
#: (:attr:`tracekit.pipeline.Attributed.memory`).
INTERVALS, MEMORY_EVENTS = "intervals", "memory"
#: ... or the pieces of each step's critical path (:attr:`tracekit.pipeline.Attributed.critical`).
CRITICAL_PIECES = "critical"

Table = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]
#: The pipeline's optional features (its costly steps, run only when a table of the run needs
#: them; docs/performance.md "Pay only for what you use"): the perf model (``assign_flops``:
#: FLOPs, bytes and shapes per activity), the memory events (read, and ``label_memory``) and
#: the critical path (``find_critical_path``).
PERF, MEMORY, CRITICAL = "perf", "memory", "critical_path"
FEATURES = frozenset({PERF, MEMORY, CRITICAL})

#: Denominators every step has (:class:`Ratio`): the step's device window, the row's phase wall.
STEP_WINDOW, PHASE_WALL = "step window", "phase wall"


@dataclass(frozen=True)
class Ratio:
    """A ratio column: ``scale x num / of``, derived from the table's aggregated values.

    Ratio columns are never aggregated themselves: a table gives its sums per step, the mean
    over steps is taken of those (:func:`tracekit.aggregate.mean_over_steps`), and every ratio
    column is computed afterwards, per step and for the mean alike
    (:func:`tracekit.aggregate.derive_ratios`): a percent is a ratio of means, never a mean of
    ratios. ``of`` is the denominator:

    * a value column of the same row (``gemm_ms / compute_ms``, ``total_ms / count``);
    * with ``within`` (key columns, ``()`` for none), the sum of that column over the rows of
      the step sharing those keys: the row's share of the table's own total (kernel
      categories of a stage, top kernels);
    * :data:`STEP_WINDOW` / :data:`PHASE_WALL`: the step's device window / the wall of the
      row's phase (for the mean: their mean over the same steps).

    A zero denominator gives 0.
    """

    num: str
    of: str
    scale: float = 100.0
    within: tuple[str, ...] | None = None


@dataclass(frozen=True)
class TableSpec:
    """One table's declaration.

    * ``keys``: the label columns a row is identified by (besides ``step``, ``stage``, ``rank``);
    * ``values``: value column -> unit (``ms``, ``us``, ``%``, ``count``, ``bytes``);
    * ``aggregate``: :data:`MEAN`, :data:`STAGE_MEAN`, :data:`PRESENT_MEAN` (a row absent from
      a step says nothing about it: peaks) or :data:`PER_STEP` (the per-step rows, also as the
      mean view);
    * ``reads``: :data:`INTERVALS` (``func(intervals, windows)``) or :data:`MEMORY_EVENTS`
      (``func(memory, windows)``: the rank's memory events; a run with none has no such table)
      or :data:`CRITICAL_PIECES` (``func(pieces, windows)``: the rank's critical-path pieces);
    * ``shown``: False for a table kept for its chart and the files (JSON, CSV, Parquet), whose
      rows the terminal, Markdown and HTML tables leave out;
    * ``chart``: ``bar``, ``stacked`` or ``none`` (the HTML report's default chart);
    * ``ratios``: ratio column -> :class:`Ratio`: percents, shares and mean durations, derived
      from the aggregated columns (never averaged);
    * ``finish``: what else is derived after aggregation (a layer against the mean layer, the
      row order), from the aggregated columns;
    * ``derived``: column -> how ``finish`` derives it from the aggregated columns (a rate or
      a per-call figure: never summed over steps), as docs/cli.md shows it;
    * ``filters``: the filters (``phase``, ``module``) the table honours by computing on the
      filtered intervals; a filter on a key column (``phase``) also selects rows; a table that
      can honour neither way is left out of a filtered run;
    * ``top``: rows a terminal shows by default, largest ``sort_by`` first (None: all);
    * ``shorten``: column -> function giving the display form of long names (``--wide`` and
      every file format keep the full name);
    * ``source`` and ``derive``: a table computed from another table's rows (mean or per
      step) instead of from the intervals, e.g. the spread across layers;
    * ``compare``: the value column ``tracekit compare`` reports as B - A per key
      (``<name>_delta``); None: the table is not compared;
    * ``cross_rank``: a table over the ranks of a directory (only there);
    * ``cross_fill``: a per-rank table whose rows, on several ranks, come from the cross-rank
      stage instead (``Analysis.rank_tables``: the same rows with the columns only the ranks
      together can give, e.g. the collectives' wait and transfer); on one rank it has a
      ``rank`` column too;
    * ``combine``: a table computed from the run's other tables, not from one rank's
      intervals: ``combine(get, per_step, rules)`` where ``get(name)`` gives a table as the run
      reports it (None when the run has none) and ``rules`` is the user's rules file (or
      None), e.g. the findings; ``sources``: the tables it reads (a run asked for it computes
      them too, :func:`with_sources`);
    * ``needs``: the pipeline features (:data:`PERF`, :data:`MEMORY`) the table reads; a run
      whose tables need none of them skips those steps (:func:`features_of`);
    * ``series``: a long per-event series that ``func`` thins to a chart's points unless it is
      given ``points=None`` (the run's full series, ``--full-series``);
    * ``from_manifest`` and ``summary``: a table read from the capture manifest beside the
      traces (``manifest.json`` of a ``tracekit capture`` directory), not from the intervals:
      ``from_manifest(manifest)`` gives one row per rank and step (``rank``, ``step``
      columns), empty when the manifest has nothing for it (then the run has no such table);
      ``summary(rows)`` turns one rank's rows into its reported rows.
    """

    name: str
    title: str
    func: Table | None
    paper: str = ""
    keys: tuple[str, ...] = ()
    values: dict[str, str] = field(default_factory=dict)
    aggregate: str = MEAN
    chart: str = "bar"
    ratios: dict[str, Ratio] = field(default_factory=dict)
    finish: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    derived: dict[str, str] = field(default_factory=dict)
    filters: frozenset[str] = frozenset()
    top: int | None = None
    sort_by: str | None = None
    shorten: dict[str, Callable[[str], str]] = field(default_factory=dict)
    compare: str | None = None
    source: str | None = None
    derive: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    cross_rank: bool = False
    cross_fill: bool = False
    from_manifest: Callable[[dict], pd.DataFrame] | None = None
    summary: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    reads: str = INTERVALS
    shown: bool = True
    needs: frozenset[str] = frozenset()
    series: bool = False
    combine: Callable[[Callable[[str], pd.DataFrame | None], bool, str | None], pd.DataFrame] | None = None
    sources: tuple[str, ...] = ()

    @property
    def of_intervals(self) -> bool:
        """Computed from one rank's intervals (or its memory events, ``reads``) and windows
        (``func``): what each rank's worker computes, per step then as the mean."""
        return self.func is not None

    @property
    def heading(self) -> str:
        if not self.paper:
            return self.title
        return f"{self.title} (Table{'s' if ',' in self.paper else ''} {self.paper})"

    def unit(self, column: str) -> str:
        return self.values.get(column, "")


#: name -> spec, in the order reports show them.
REGISTRY: dict[str, TableSpec] = {}


def register(name: str, *, title: str, **kw) -> Callable[[Table], Table]:
    """Decorator: declare ``func`` as table ``name`` (see :class:`TableSpec` for the fields)."""

    def deco(func: Table) -> Table:
        declare(TableSpec(name=name, title=title, func=func, **kw))
        return func

    return deco


def declare(spec: TableSpec) -> TableSpec:
    """Add ``spec`` to the registry (tables that are not a function of one rank's intervals)."""
    if spec.name in REGISTRY and REGISTRY[spec.name].func is not spec.func:
        raise ValueError(f"table {spec.name!r} registered twice")
    REGISTRY[spec.name] = spec
    return spec


def features_of(names) -> frozenset[str]:
    """The pipeline features the tables ``names`` need (None: every table), with the tables
    they are derived from (``source``) and the memory of tables that read memory events."""
    if names is None:
        return FEATURES
    out: set[str] = set()
    for n in names:
        spec = REGISTRY[n]
        out |= spec.needs | ({MEMORY} if spec.reads == MEMORY_EVENTS else set())
        out |= {CRITICAL} if spec.reads == CRITICAL_PIECES else set()
        if spec.source:
            out |= features_of([spec.source])
    return frozenset(out)


def with_sources(names: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``names`` and, after them, the tables a combined table among them reads (``sources``)."""
    extra = [s for n in names for s in REGISTRY[n].sources if s not in names]
    return (*names, *dict.fromkeys(extra))


def spec_of(name: str) -> TableSpec | None:
    return REGISTRY.get(name)


def column_unit(name: str, column: str) -> str:
    """The unit of ``column`` of table ``name`` ('' when undeclared); ``paper_*`` columns share
    the unit of the column they sit beside."""
    spec = REGISTRY.get(name)
    if spec is None:
        return _guess_unit(column)
    return spec.unit(column.removeprefix("paper_")) or _guess_unit(column)


def _guess_unit(column: str) -> str:
    c = column.removeprefix("paper_")
    if c.endswith("_ms"):
        return MS
    if c.endswith("_us"):
        return US
    if c.endswith("_mb"):
        return MB
    if c.endswith("_per_s"):
        return PER_S
    if c.endswith("_pct") or c == "percent":
        return PCT
    if c in ("count", "ranks", "layers", "passes"):
        return COUNT
    if c.endswith("_rank") or c in ("rank", "step", "layer"):
        return INDEX
    return ""
