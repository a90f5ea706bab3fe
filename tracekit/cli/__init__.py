"""The ``tracekit`` command: the boundary between a person and the analysis.

Takes in: the command line (``tracekit analyze | explain | compare | cache | capture``).
Gives out: tables on the terminal or in files (JSON, CSV, Markdown, Parquet, HTML), one-line
errors and warnings on stderr, the exit code. ``main`` is the console script
(``tracekit = "tracekit.cli:main"``; ``python -m tracekit.cli`` too).

Open first: :mod:`tracekit.cli.commands` (the commands and their options). Then
:mod:`~tracekit.cli.io` (the one-line error handler, progress, where output goes) and
:mod:`~tracekit.cli.cache` (``tracekit cache``). Importing this package imports neither pandas
nor the renderers: ``tracekit --help`` stays fast.
"""

from .commands import main

__all__ = ["main"]
