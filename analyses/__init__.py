"""Tables of the paper, one module each: pure functions of the labelled interval table.

Every function takes ``(intervals, steps)`` from :mod:`tracekit.attribute` and returns a
DataFrame with one row per step and key (a ``step`` column); :mod:`tracekit.analysis` averages
over complete steps. Times are milliseconds.
"""

from . import comm, gemm, idle, kernels, memcpy, modules, phases, timeline

#: name -> function, in the order reports show them.
TABLES = {
    "phases": phases.table,
    "modules": modules.table,
    "gemm": gemm.table,
    "comm": comm.table,
    "idle": idle.table,
    "kernels": kernels.table,
    "memcpy": memcpy.table,
    "timeline": timeline.table,
}

__all__ = ["TABLES"]
