"""The error types that reach users as one line: a bad input file, a setting the run cannot use."""

from __future__ import annotations

import os


class TraceError(Exception):
    """A trace that cannot be analysed: names the file and the problem, in one line."""

    def __init__(self, path: str | os.PathLike | None, problem: str):
        self.path = None if path is None else os.fspath(path)
        self.problem = " ".join(str(problem).split())  # always one line
        super().__init__(str(self))

    def __reduce__(self):
        # Ranks are read in worker processes: the error must survive pickling back to the parent
        # (the default, TraceError(str(self)), fails and breaks the pool instead).
        return (self.__class__, (self.path, self.problem))

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}" if self.path else self.problem


class RunError(Exception):
    """What the run was told to use cannot be used (a Dask scheduler that cannot be reached or
    is not one): one line, exit status 2, no file named (it is not the trace's fault)."""


def install_hint(extra: str) -> str:
    """How to install the optional ``extra``: tracekit is not on PyPI (PyPI's ``tracekit`` name
    is not this project), so the hint names what works, a clone or a built wheel."""
    return (
        f"pip install -e '.[{extra}]' in a clone of tracekit, or pip install "
        f"'tracekit-<version>-<tags>.whl[{extra}]' from a built wheel (tracekit is not on PyPI)"
    )
