"""Names the CLI offers as choices, written out so that importing the CLI imports no analysis."""

#: The tables ``--table`` can name, in report order: ``tracekit.analyses.REGISTRY``'s names
#: (tests/test_core_has_no_heavy_imports.py checks they are the same), written out so that
#: importing the CLI (``tracekit --help``, ``--version``, ``cache``) does not import the
#: analyses, and with them pandas, numpy and pyarrow.
TABLE_NAMES = [
    "findings",
    "throughput",
    "phases",
    "modules",
    "gemm",
    "gemm_shapes",
    "efficiency",
    "op_shapes",
    "comm",
    "collectives",
    "collective_sizes",
    "idle",
    "idle_causes",
    "idle_host",
    "launches",
    "critical_path",
    "critical_path_timeline",
    "kernels",
    "memcpy",
    "timeline",
    "top_kernels",
    "layers",
    "layer_spread",
    "critical_path_ranks",
    "stragglers",
    "collective_matches",
    "rank_summary",
    "ranks",
    "memory",
    "memory_modules",
    "memory_timeline",
]
