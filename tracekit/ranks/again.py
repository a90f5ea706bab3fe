"""A rank's intervals by analysing its file again: what a worker of a run without the result
cache sends back instead of them, when the run said it will not read them
(``Options.keep_intervals``; :func:`tracekit.ranks.perfile.tabulate_fresh`).

Its tables come back computed, so a report reads no interval; the parent then holds a few
hundred bytes per rank instead of its intervals (megabytes each, times the ranks). Something
that reads them after all (a view, ``Analysis.intervals``) gets the same rows, computed again
from the same bytes: :class:`Again` refuses a file that changed since (its identity, as the
parse cache takes it: size, times, inode and a hash of its head and tail, :func:`file_key`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..errors import TraceError
from ..read.cache import file_key


@dataclass(frozen=True, slots=True)
class Again:
    """Where a rank's intervals come from: its file, analysed again with the run's options."""

    source: str
    identity: str
    options: Any

    @classmethod
    def of(cls, path: str | os.PathLike, options: Any) -> Again | None:
        """The handle of ``path`` as it is now; None when its identity cannot be taken (the
        intervals are then kept)."""
        try:
            return cls(os.fspath(path), file_key(path, options.max_bytes), options)
        except (OSError, ValueError):
            return None

    def sharing(self, options: Any, source: str) -> Again:
        """This handle holding ``options`` and ``source`` (when equal to its own) instead of its
        unpickled copies: what a parent keeps of each rank's handle."""
        same = options == self.options and source == self.source
        return dataclasses.replace(self, options=options, source=source) if same else self

    def load(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The intervals (only ``columns`` when given), from the file analysed again."""
        from .analyse import analyse_file

        try:
            same = file_key(self.source, self.options.max_bytes) == self.identity
        except OSError:
            same = False
        if not same:
            raise TraceError(self.source, "changed since it was analysed; analyse it again")
        options = dataclasses.replace(self.options, cache=False)
        return analyse_file(self.source, options, store_parsed=False).load_intervals(columns)
