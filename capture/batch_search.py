"""The largest batch that fits (the paper's Table IV): doubling, then bisection.

:func:`largest_fitting` knows nothing of captures: ``fits(batch)`` runs one (in ``tracekit
capture sweep --max-batch``, a capture at that batch that does not run out of memory nor pass
``--memory-limit``) and says whether it fitted. Whether a batch fits is assumed monotonic: if
B fits, every smaller batch fits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Search:
    """What the search found: ``best`` (0 when even ``start`` did not fit), every batch tried
    in order with whether it fitted, and whether it stopped at ``cap`` while still fitting."""

    best: int = 0
    probes: list[tuple[int, bool]] = field(default_factory=list)
    capped: bool = False


def largest_fitting(fits: Callable[[int], bool], start: int = 1, cap: int = 1024) -> Search:
    """The largest batch in ``[start, cap]`` for which ``fits`` is true.

    Doubles from ``start`` until a batch does not fit (or ``cap`` is reached: the last probe is
    ``cap`` itself), then bisects between the last batch that fitted and the first that did
    not. Each batch is tried at most once; at most about 2 log2(cap / start) + 1 probes.
    """
    if start < 1 or cap < start:
        raise ValueError(f"need 1 <= start <= cap, got start {start}, cap {cap}")
    found = Search()

    def probe(batch: int) -> bool:
        ok = bool(fits(batch))
        found.probes.append((batch, ok))
        return ok

    if not probe(start):
        return found
    lo, hi = start, None
    while hi is None:
        if lo == cap:
            found.best, found.capped = cap, True
            return found
        nxt = min(lo * 2, cap)
        if probe(nxt):
            lo = nxt
        else:
            hi = nxt
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    found.best = lo
    return found
