"""The planted truth: device activities with the labels a trace's author meant, and plain
interval arithmetic (half-open ``[start, end)`` in integer ns) to compute expected tables.

Deliberately independent of ``tracekit.pipeline.intervals``: a test that computes its expectation with
the code under test cannot fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import pairwise
from typing import Any

__all__ = [
    "Activity",
    "Kernel",
    "MemoryEvent",
    "Op",
    "intersect_window",
    "measure",
    "shares",
    "subtract",
    "union",
]


@dataclass
class Activity:
    """One planted device activity (times in integer ns) with the labels it was meant to get.

    ``phase``: forward | backward | optimizer, or None (outside a phase). ``module``: the
    qualified name of the module whose forward launched it (or whose forward op created the
    backward node that did). ``category``, ``block`` and ``collective`` are whatever the author
    planted with :meth:`TraceBuilder.label` (the expected module category, timeline block,
    collective).
    """

    step: int | None
    start: int  # ns
    end: int  # ns
    kind: str  # kernel | memcpy | memset
    name: str
    stream: int
    correlation: int
    phase: str | None
    category: str | None  # module category (compute kernels), None: Other
    block: str | None  # timeline block (forward activities)
    collective: str | None  # comm kernels
    comm: bool = False
    gemm: bool = False
    launch_ts: int = 0  # ns, start of the runtime call
    launch_end: int = 0  # ns, end of the runtime call
    api: str = ""  # the runtime call's name
    module: str | None = None
    op: str | None = None  # the innermost CPU op that launched it

    @classmethod
    def launched(cls, x: Any, *, comm: bool = False, **labels: Any) -> Activity:
        """The activity a launch planted (``x``: :class:`~tracekit.testing.events.Launched`:
        times, name, stream, correlation) with the ``labels`` its author meant; ``gemm`` from
        the kernel name."""
        from .kernels import GEMMS

        return cls(
            start=x.start,
            end=x.end,
            kind=x.kind,
            name=x.name,
            stream=x.stream,
            correlation=x.correlation,
            launch_ts=x.launch_ts,
            launch_end=getattr(x, "launch_end", 0),
            api=getattr(x, "api", ""),
            comm=comm,
            gemm=x.name in GEMMS,
            **labels,
        )

    @property
    def compute(self) -> bool:
        return self.kind == "kernel" and not self.comm

    @property
    def iv(self) -> tuple[int, int]:
        return (self.start, self.end)

    @property
    def dur(self) -> int:
        return self.end - self.start


@dataclass
class Op:
    """A CPU op the builder recorded: its name, thread, start (ns), sequence number, module,
    and the shapes it was given (``input_dims``... as planted: Python values)."""

    name: str
    tid: int
    start: int
    seq: int | None
    module: str | None
    shapes: dict[str, Any] = field(default_factory=dict)


@dataclass
class MemoryEvent:
    """One planted allocation (``bytes`` > 0) or free (< 0) of the caching allocator (a
    ``[memory]`` event): when (ns), on which device (c10 device type and id, -1 for the CPU),
    its address and the allocator's totals after it (None in the legacy form), and the step,
    phase, module and innermost op it happened in."""

    ts: int
    bytes: int
    device_type: int
    device_id: int
    addr: int | None
    total_allocated: int | None
    total_reserved: int | None
    step: int | None
    phase: str | None
    module: str | None
    op: str | None


@dataclass
class Kernel:
    """A planted device activity and the op that launched it (``creator=`` takes either)."""

    activity: Activity
    op: Op | None

    @property
    def start(self) -> int:
        return self.activity.start

    @property
    def end(self) -> int:
        return self.activity.end


def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def measure(intervals: Iterable[tuple[int, int]]) -> int:
    return sum(e - s for s, e in union(intervals))


def intersect_window(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def subtract(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of ``a`` minus union of ``b``."""
    out = []
    bu = union(b)
    for s, e in union(a):
        cur = s
        for bs, be in bu:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


def shares(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[Fraction]:
    """Each interval's share of [lo, hi): at an instant with k intervals active each gets 1/k."""
    pts = sorted({lo, hi} | {min(max(x, lo), hi) for s, e in intervals for x in (s, e)})
    out = [Fraction(0)] * len(intervals)
    for a, b in pairwise(pts):
        if b <= a:
            continue
        active = [i for i, (s, e) in enumerate(intervals) if s <= a and e >= b]
        for i in active:
            out[i] += Fraction(b - a, len(active))
    return out
