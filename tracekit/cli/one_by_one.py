"""The tables of a run of many ranks, written to JSON one at a time.

``Analysis.tables()`` builds every table over every rank at once: for 1,000 small ranks that is
720k rows of frames, about 75 MB held at once by the process that gathers them, on top of what
it keeps per rank (docs/performance.md). The JSON writer needs one table at a time, except
for one fact that comes first in the document: how many values ``meta`` says were emptied
because they were not finite (:func:`tracekit.render.finite.finite_output`). So the tables are
computed twice, each big one let go at once: a first pass counts those values
(:meth:`OneByOne.count`), the writer's pass computes each big table again (small ones, the
findings and the cross-rank tables among them, are kept from the first).

Needs: an :class:`~tracekit.analysis.Analysis` and the names of its tables to write.
Gives: a mapping ``name -> DataFrame`` in the order ``Analysis.tables`` has them, whose values
are computed when read and not kept. Guarantees: the same frames as ``Analysis.tables``, and
the same JSON text (tests/test_one_by_one.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..render.finite import finite_frame

if TYPE_CHECKING:
    import pandas as pd

#: A table at most this big (its columns' arrays) is kept from the counting pass instead of
#: computed again: the findings and the cross-rank tables, a few rows a rank.
KEEP_BYTES = 1 << 20

#: Runs of at least this many ranks write their JSON a table at a time (fewer: every table
#: at once, as the other formats do; the second pass would cost more than it saves).
RANKS = 8


def wanted(analysis: Any, fmt: str, paper: bool) -> bool:
    """Whether a run writes its tables one by one: JSON, no paper columns, many ranks, each
    gathered from a worker (a rank held in memory holds its intervals, which dwarf its tables)."""
    ranks = analysis.ranks
    return fmt == "json" and not paper and len(ranks) >= RANKS and all(a.lazy for a in ranks.values())


class OneByOne(Mapping):
    """The tables ``names`` computed when read. ``whole``: they are the run's every table, in
    ``Analysis.tables``'s order (the cross-rank ones last, as ``rank_tables`` gives them);
    else in the order of ``names``, as ``Analysis.table`` gives each (``--table``)."""

    def __init__(self, analysis: Any, names: list[str], per_step: bool, whole: bool):
        from tracekit.analyses import REGISTRY

        self.analysis, self.per_step = analysis, per_step
        cross = [n for n in names if REGISTRY[n].cross_rank]
        self._cross: dict[str, pd.DataFrame] | None = None
        if whole and cross:
            self._cross = analysis.rank_tables(per_step)
            cross = [n for n in self._cross if n in cross]
        self.names = [n for n in names if n not in cross] + cross if whole else list(names)
        #: Values that were not finite (:meth:`count`); once counted, each table is read as
        #: the writer shows it (:func:`~tracekit.render.finite.finite_frame`).
        self.not_finite, self.counted = 0, False
        #: Tables small enough to keep from the counting pass (as the writer shows them).
        self._small: dict[str, pd.DataFrame] = {}

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self.names:
            raise KeyError(name)
        from tracekit.analyses import REGISTRY

        if name in self._small:
            return self._small[name]
        if not REGISTRY[name].cross_rank:
            df = self.analysis.table(name, self.per_step)
        else:
            if self._cross is None:
                self._cross = self.analysis.rank_tables(self.per_step)
            df = self._cross[name]
        return finite_frame(df)[0] if self.counted else df

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def count(self) -> OneByOne:
        """The first pass: every table computed once, its values that are not finite counted
        (:attr:`not_finite`), and let go."""
        for name in self.names:
            df, n = finite_frame(self[name])
            self.not_finite += n
            if df.memory_usage(index=False).sum() <= KEEP_BYTES:
                self._small[name] = df
        self.counted = True
        return self
