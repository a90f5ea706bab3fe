""":class:`OpModel`: what the perf model says of one op call (its family, FLOPs, bytes, dtype, shape).

The family modules (:mod:`.gemm`, :mod:`.attention`, :mod:`.others`) each hold a table
``op name -> reader``; a reader turns an op's :class:`~tracekit.perf.shapes.Args` into an
:class:`OpModel`, or None when the arguments are not the shapes its formula needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .shapes import Args

#: The families, in report order. GEMM, attention, convolution and normalisation count FLOPs;
#: element-wise ops and reductions count bytes only (their FLOPs are 0).
FAMILIES = ("gemm", "attention", "conv", "norm", "elementwise", "reduction")
FLOP_FAMILIES = frozenset({"gemm", "attention", "conv", "norm"})


@dataclass(frozen=True)
class OpModel:
    """One op call as the perf model sees it.

    ``flops``: floating-point operations (a multiply-add is 2); ``bytes``: bytes its inputs and
    outputs take at their dtypes (what a kernel that reads each input once and writes each
    output once moves); ``dtype``: the dtype of its first tensor input (the peak it is measured
    against); ``formula``: the formula with the numbers put in, for ``tracekit explain``;
    ``shape``: the sizes it was computed from; ``gemm``: ``(batch, m, n, k)`` for a GEMM.
    """

    family: str
    flops: float
    bytes: float
    dtype: str
    formula: str
    shape: str = ""
    gemm: tuple[int, int, int, int] | None = None


Reader = Callable[[Args], "OpModel | None"]


def dims_text(shape: tuple[int, ...]) -> str:
    """``(2, 3)`` -> ``[2, 3]``."""
    return "[" + ", ".join(map(str, shape)) + "]"
