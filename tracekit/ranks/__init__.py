"""Ranks: a run's files grouped into ranks, each file's work in a pool (:mod:`tracekit.ranks.perfile`)."""
