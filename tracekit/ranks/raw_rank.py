"""The raw traces of one rank, read as ``tracekit.load`` groups files into ranks: what
``tracekit explain`` looks at (it keeps every event, which ``tracekit analyze`` never does).

Needs: a file or a directory, the rank (default: the lowest) and how to read a file. Gives: that
rank's raw traces (several files: successive windows of one process; a merged file: its part of
that rank), each with ``meta["rank"]``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import TraceError
from ..read.files import trace_listing
from ..read.reader import RawTrace
from .grouping import (
    FileIdentity,
    files_of_rank,
    files_to_read,
    group_files,
    host_of,
    manifest_ranks,
    process_of,
)
from .merged import split_ranks


def rank_traces(
    path: str | os.PathLike, rank: int | None, read, max_bytes: int
) -> tuple[list[RawTrace], list[int]]:
    """The raw traces of ``rank`` (default: the lowest) of a file or a directory, ranks grouped
    as ``tracekit.load`` groups them (:mod:`tracekit.ranks.grouping`): every file of the rank
    (successive windows of one process), each with ``meta["rank"]``; and every rank there is.
    Only that rank's files (without ``rank``, the lowest rank's) are read when every file's rank
    can be told from its head, as for ``tracekit analyze --rank``
    (:func:`tracekit.ranks.grouping.files_to_read`)."""
    p = Path(path)
    found, _, by_head = files_to_read(p, rank, False, max_bytes, lowest=True)
    # a file that holds several ranks (tracekit.ranks.merged) is one trace per rank
    pairs = [(f, part) for f in found for raw in [read(f)] for part in (split_ranks(raw) or [raw])]
    files, raws = [f for f, _ in pairs], [r for _, r in pairs]
    from_manifest = manifest_ranks(p) if p.is_dir() else {}
    ids = [
        FileIdentity(
            rank=from_manifest.get(f.name) if r.meta.get("rank") is None else r.meta["rank"],
            pid=process_of(r.events),
            host=host_of(f, r.meta.get("host_name")),
        )
        for f, r in zip(files, raws)
    ]
    groups, _ = group_files(ids)
    if rank is None:
        rank = min(groups)
    if rank not in groups:
        raise TraceError(p, f"no rank {rank}; ranks here: {', '.join(map(str, sorted(groups)))}")
    out = [raws[i] for i in groups[rank]]
    for raw in out:
        raw.meta["rank"] = rank
    ranks = sorted(groups)
    if by_head is not None:  # only this rank's files were read: every rank from the heads
        heads = files_of_rank(p, trace_listing(p)[0], rank, max_bytes)
        ranks = heads[1] if heads is not None else ranks
    return out, ranks
