"""Read: a trace file's bytes to columnar events (:mod:`tracekit.read.reader`)."""
