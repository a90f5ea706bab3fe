"""Ranks: a run's files to analysed ranks, each file's work done once, on a pool when there are
many.

Takes in: the trace files of a path (a file, or a directory of per-rank traces) and the run's
:class:`~tracekit.ranks.analyse.Options`. Gives out: per file, its pipeline output
(:class:`~tracekit.pipeline.Attributed`) and its tables as one rank, from the result cache or
computed afresh; grouped into ranks (by ``distributedInfo``, the capture manifest or the
process), with the warnings of a directory. :mod:`tracekit.analysis` (the facade) uses this
stage; nothing here imports the facade.

Open first: :mod:`tracekit.ranks.perfile` (what a worker runs per file). Then
:mod:`~tracekit.ranks.analyse` (one file analysed afresh), :mod:`~tracekit.ranks.tables` (each
rank's tables, computed once: the core the facade inherits), :mod:`~tracekit.ranks.results`
(the result cache), :mod:`~tracekit.ranks.pool` (process pools and Dask),
:mod:`~tracekit.ranks.grouping` and :mod:`~tracekit.ranks.rankhead` (files into ranks),
:mod:`~tracekit.ranks.gathered` and :mod:`~tracekit.ranks.packed_ipc` (small tables kept
compact), :mod:`~tracekit.ranks.meta` (the run's JSON ``meta``),
:mod:`~tracekit.ranks.manifest_tables` (tables read from a capture manifest).
"""
