"""Tables of the paper, one module each: pure functions of the labelled interval table.

Every table function takes ``(intervals, windows)`` from :mod:`tracekit.pipeline` (the
labelled interval table and the time engine's :class:`~tracekit.pipeline.windows.Windows`,
framed once per rank) and returns a DataFrame with one
row per step and key (a ``step`` column); :mod:`tracekit.analysis` aggregates over complete
steps as the table's spec says. Times are milliseconds.

Each module declares its table(s) in :data:`REGISTRY` (:mod:`._registry`); importing the
module here is all it takes to add a table to every output (docs/architecture.md).

Takes in: one rank's labelled intervals and its framed windows. Gives out: one DataFrame per
table, a row per step and key, with the units its spec declares. Open first:
:mod:`tracekit.analyses._registry` (``TableSpec``, ``register``), then any table, e.g.
:mod:`tracekit.analyses.phases`; :mod:`._common` holds what tables share.
"""

from . import (  # imported to register; the report order is _ORDER below
    collectives,
    comm,
    critical_path,
    critical_path_timeline,
    critical_wait,
    cross_rank,
    efficiency,
    findings,
    gemm,
    gemm_shapes,
    idle,
    idle_causes,
    idle_host,
    kernels,
    launches,
    layers,
    memcpy,
    memory,
    memory_modules,
    memory_timeline,
    modules,
    op_shapes,
    phases,
    ranks,
    throughput,
    timeline,
    top_kernels,
)
from ._registry import REGISTRY, TableSpec, column_unit, spec_of

#: Report order, by module (import order is alphabetical, and another module may import one
#: of these first). A new table module goes into the import above and here.
_ORDER = [
    m.__name__
    for m in (
        findings,
        throughput,
        phases,
        modules,
        gemm,
        gemm_shapes,
        efficiency,
        op_shapes,
        comm,
        collectives,
        idle,
        idle_causes,
        idle_host,
        launches,
        critical_path,
        critical_path_timeline,
        kernels,
        memcpy,
        timeline,
        top_kernels,
        layers,
        ranks,
        cross_rank,
        critical_wait,
        memory,
        memory_modules,
        memory_timeline,
    )
]


def _position(item: tuple[str, TableSpec]) -> int:
    fn = item[1].func or item[1].derive or item[1].from_manifest or item[1].combine
    module = fn.__module__ if fn is not None else ranks.__name__
    return _ORDER.index(module) if module in _ORDER else len(_ORDER)


_sorted = sorted(REGISTRY.items(), key=_position)
REGISTRY.clear()
REGISTRY.update(_sorted)

#: name -> function of one rank's ``(intervals, windows)``, in the order reports show them.
TABLES = {name: s.func for name, s in REGISTRY.items() if s.func is not None}

__all__ = ["REGISTRY", "TABLES", "TableSpec", "column_unit", "spec_of"]
