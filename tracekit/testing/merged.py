"""Several ranks in one file, as merging tools write them (TraceLens' TraceFusion).

:func:`merged_trace` takes one :class:`~tracekit.testing.TraceBuilder` per rank and writes what
TraceFusion writes: every rank's events in one ``traceEvents`` list, each integer ``pid``
(CPU process and devices alike), ``correlation`` and flow ``id`` offset by ``rank x`` a power
of ten above the largest value, ``args.rank`` on every event, the profiler's own ``Trace``
events dropped, and no ``distributedInfo`` (nor any other header). Each builder's planted
activities keep their own times: the truth of rank r is ``builders[r].activities``.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from .builder import TraceBuilder

__all__ = ["merged_trace"]


def _multiplier(values: list[int]) -> int:
    top = max([abs(v) for v in values] + [1])
    return 10 ** (math.ceil(math.log10(top)) + 1)


def merged_trace(builders: list[TraceBuilder], *, with_rank_arg: bool = True) -> dict:
    """The Chrome-trace dict of ``builders`` (rank r = ``builders[r]``) merged into one file
    (see the module docstring); ``with_rank_arg=False`` leaves out ``args.rank`` (merge
    scripts that only offset the pids)."""
    docs = [b.trace(distributed=False) for b in builders]
    first = docs[0]["traceEvents"]
    pids = [e["pid"] for e in first if isinstance(e.get("pid"), int)]
    corrs = [
        e["args"]["correlation"] for e in first if isinstance((e.get("args") or {}).get("correlation"), int)
    ]
    ids = [e["id"] for e in first if isinstance(e.get("id"), int)]
    mult = {"pid": _multiplier(pids), "correlation": _multiplier(corrs), "id": _multiplier(ids)}
    out: list[dict[str, Any]] = []
    for rank, doc in enumerate(docs):
        for e in doc["traceEvents"]:
            if e.get("cat") == "Trace":
                continue
            e = copy.copy(e)
            args = dict(e.get("args") or {})
            if with_rank_arg:
                args["rank"] = rank
            if isinstance(e.get("pid"), int):
                args["pid_raw"] = e["pid"]
                e["pid"] = e["pid"] + rank * mult["pid"]
            if isinstance(args.get("correlation"), int):
                args["correlation_raw"] = args["correlation"]
                args["correlation"] += rank * mult["correlation"]
            if isinstance(e.get("id"), int):
                e["id"] = e["id"] + rank * mult["id"]
            e["args"] = args
            out.append(e)
    return {"traceEvents": out}
