"""The ``tracekit`` command (:mod:`tracekit.cli.commands`)."""

from .commands import main

__all__ = ["main"]
