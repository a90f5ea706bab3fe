"""tracekit's version: one place, below every module that needs it (the parse cache keys on it)
and the package's ``__init__``, which re-exports it."""

__version__ = "0.1.0"
