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
#: Memory in MiB (2^20 bytes) and a rate per second (``tokens_per_s``: tokens/s).
MB, PER_S = "MB", "/s"
#: Units whose values are whole numbers (printed without decimals, integers in JSON).
INTEGER_UNITS = {COUNT, BYTES, INDEX}

#: How per-step rows become the reported row.
MEAN = "mean"  # sum over complete steps / number of complete steps (absent = 0)
STAGE_MEAN = "stage-mean"  # MEAN, but rows of an inference stage over the steps holding it
PER_STEP = "per-step"  # only meaningful per step: no mean row (e.g. step windows)

Table = Callable[[pd.DataFrame, pd.DataFrame], pd.DataFrame]


@dataclass(frozen=True)
class TableSpec:
    """One table's declaration.

    * ``keys``: the label columns a row is identified by (besides ``step``, ``stage``, ``rank``);
    * ``values``: value column -> unit (``ms``, ``us``, ``%``, ``count``, ``bytes``);
    * ``aggregate``: :data:`MEAN`, :data:`STAGE_MEAN` or :data:`PER_STEP`;
    * ``chart``: ``bar``, ``stacked`` or ``none`` (the HTML report's default chart);
    * ``finish``: recomputes ratio columns (e.g. a mean duration) after aggregation, so they are
      ratios of means, never means of ratios;
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
    finish: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    filters: frozenset[str] = frozenset()
    top: int | None = None
    sort_by: str | None = None
    shorten: dict[str, Callable[[str], str]] = field(default_factory=dict)
    compare: str | None = None
    source: str | None = None
    derive: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    cross_rank: bool = False
    from_manifest: Callable[[dict], pd.DataFrame] | None = None
    summary: Callable[[pd.DataFrame], pd.DataFrame] | None = None

    @property
    def of_intervals(self) -> bool:
        """Computed from one rank's intervals and windows (``func``): what each rank's worker
        computes, per step then as the mean."""
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
