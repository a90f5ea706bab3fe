"""Read: a trace file's bytes to columnar events.

Takes in: a path (a Kineto / PyTorch profiler Chrome trace, ``.json`` or ``.json.gz``; or a
directory, whose trace files :mod:`~tracekit.read.files` lists). Gives out: a
:class:`~tracekit.read.reader.RawTrace`, the events as columns (times in int64 ns, the event
kinds of :mod:`~tracekit.read.schema`), with the file's metadata and its reading warnings; or a
one-line :class:`~tracekit.errors.TraceError`.

Open first: :mod:`tracekit.read.reader` (``read_trace`` ties the pieces together). Then
:mod:`~tracekit.read.files` (finding and bounded reading), :mod:`~tracekit.read.streaming`
(slice by slice as the text arrives) and :mod:`~tracekit.read.parallel` (byte ranges on forked
processes), :mod:`~tracekit.read.schema` + :mod:`~tracekit.read.columns` +
:mod:`~tracekit.read.timetext` (fields, columns, exact times), :mod:`~tracekit.read.native` with
``_kineto.c`` (the C fast path), :mod:`~tracekit.read.cache` (the parse cache).

Nothing here imports pandas or numpy on import of the package: ``tracekit --help`` imports it.
"""
