"""Which ops have a model, and :func:`model`: an op call's :class:`~tracekit.perf.model.OpModel`
from its name and its recorded shape texts.

Read this module first. The tables of readers come from the family modules
(:mod:`.gemm`, :mod:`.attention`, :mod:`.others`), each reader a few lines over the formulas of
:mod:`.formulas`; docs/metrics.md ("FLOPs and bytes") writes every formula out. An op whose name
is not here, or whose shapes are not what its reader needs (missing, malformed, inconsistent),
has no model: the pipeline counts it as unmodelled, never drops it.
"""

from __future__ import annotations

from functools import lru_cache

from . import attention, gemm, others, shapes
from .model import FLOP_FAMILIES, OpModel, Reader

#: op name -> reader of its :class:`~tracekit.perf.shapes.Args`.
READERS: dict[str, Reader] = {**others.READERS, **attention.READERS, **gemm.READERS}

#: What a reader may raise on arguments that are not what it expects (it returns None for
#: what it checks; anything else is caught here and means "no model").
_BAD_ARGS = (TypeError, ValueError, IndexError, KeyError, ZeroDivisionError, OverflowError)

#: The most FLOPs or bytes one op call may be modelled with: what 10 PFLOP/s (or 10 PB/s) does
#: in a year, the longest duration an event may have (docs/security.md). Beyond it the shapes
#: are not a real op's (2^40-sized dims, products past int64): no model, never a number past
#: float64's range (FLOP sums overflowed to inf; dims past int64 were an OverflowError).
MAX_MODELLED = 1e24


def sane(got: OpModel) -> bool:
    """Whether a model's numbers are finite, non-negative and within :data:`MAX_MODELLED`, and
    its GEMM dims fit 64-bit integers."""
    return (
        0 <= got.flops <= MAX_MODELLED
        and 0 <= got.bytes <= MAX_MODELLED
        and all(0 <= d < 1 << 62 for d in got.gemm or ())
    )


def has_reader(name: str) -> bool:
    return name in READERS


@lru_cache(maxsize=1 << 16)
def model(name: str, dims: str | None, types: str | None, concrete: str | None) -> OpModel | None:
    """The model of one call of op ``name`` from the JSON texts of its ``Input Dims``,
    ``Input type`` and ``Concrete Inputs`` (None: no model). Cached per distinct combination."""
    reader = READERS.get(name)
    if reader is None:
        return None
    args = shapes.parse(dims, types, concrete)
    if args is None:
        return None
    try:
        got = reader(args)
    except _BAD_ARGS:
        return None
    return got if got is not None and sane(got) else None


__all__ = ["FLOP_FAMILIES", "READERS", "OpModel", "has_reader", "model"]
