"""Every rank's frame of one kind (``steps``, ``windows``, ``critical``), read by the parent a
batch of ranks at a time.

A rank's frames are gathered encoded (:class:`~tracekit.ranks.gathered.RankTables`); decoding
one builds a pandas frame, about a millisecond whatever its rows. At 1,000 ranks, reading each
rank's on its own was most of the parent's report (1.8 s for the phase-overlap notice, 1.0 s
for the critical path's step bounds). :func:`stacked` decodes :data:`BATCH` ranks at once and
says which rank each row is, so a caller works on the batch with array operations.

Needs: a run (``Analysis``) with ``ranks`` and ``_computed``.
Guarantees: rows come in the order of ``ranks``, each rank's in its frame's order (what
concatenating the ranks' frames one by one gives); at most :data:`BATCH` ranks' frames are
decoded at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

#: Ranks whose gathered frames are decoded together (one decode, bounded memory).
BATCH = 64


def _batches(run: Any, name: str, ranks: list[int]) -> Iterator[tuple[list[int], Any]]:
    """``(ranks of the batch, (frame, lengths) or None)``: the batch's gathered frames decoded
    at once (:meth:`~tracekit.ranks.gathered.Computed.concat`), None when they are not all
    gathered alike."""
    concat = getattr(run._computed, "concat", None)
    for i in range(0, len(ranks), BATCH):
        part = ranks[i : i + BATCH]
        yield part, concat("att", name, part) if concat is not None else None


def stacked(run: Any, name: str, ranks: list[int]) -> Iterator[tuple[np.ndarray, pd.DataFrame]]:
    """``(rank of each row, frame)``: the ranks' ``Attributed.<name>`` concatenated, a batch
    at a time; a batch whose frames are not all gathered alike is concatenated here."""
    for part, whole in _batches(run, name, ranks):
        if whole is None:
            frames = [getattr(run.ranks[r], name) for r in part]
            whole = pd.concat(frames, ignore_index=True), [len(f) for f in frames]
        frame, lengths = whole
        yield np.repeat(np.asarray(part, np.int64), lengths), frame


def frames(run: Any, name: str, ranks: list[int]) -> Iterator[tuple[int, pd.DataFrame]]:
    """``(rank, frame)`` of the ranks' ``Attributed.<name>``: the gathered ones decoded
    :data:`BATCH` ranks at a time, else read one by one."""
    for part, whole in _batches(run, name, ranks):
        if whole is None:
            for r in part:
                yield r, getattr(run.ranks[r], name)
            continue
        frame, lengths = whole
        cut = np.cumsum([0, *lengths])
        for r, a, b in zip(part, cut[:-1], cut[1:]):
            yield r, frame.iloc[a:b]
