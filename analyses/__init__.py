"""Tables of the paper, one module each: pure functions of the labelled interval table.

Every table function takes ``(intervals, windows)`` from :mod:`tracekit.pipeline` (the
labelled interval table and the time engine's windows table) and returns a DataFrame with one
row per step and key (a ``step`` column); :mod:`tracekit.analysis` aggregates over complete
steps as the table's spec says. Times are milliseconds.

Each module declares its table(s) in :data:`REGISTRY` (:mod:`._registry`); importing the
module here is all it takes to add a table to every output (docs/architecture.md).
"""

from . import (  # noqa: F401  (imported to register, in report order)
    comm,
    gemm,
    idle,
    kernels,
    layers,
    memcpy,
    modules,
    phases,
    ranks,
    timeline,
    top_kernels,
)
from ._registry import REGISTRY, TableSpec, column_unit, spec_of

#: name -> function of one rank's ``(intervals, windows)``, in the order reports show them.
TABLES = {name: s.func for name, s in REGISTRY.items() if s.func is not None}

__all__ = ["REGISTRY", "TABLES", "TableSpec", "column_unit", "spec_of"]
