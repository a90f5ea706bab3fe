"""GEMM readers: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``matmul``, ``linear``, ``_scaled_mm``
(fp8) and grouped GEMMs, each giving ``(batch, m, n, k)`` from the recorded sizes.

The sizes are the logical ones the profiler records (``mm(A[M,K], B[K,N])``, whatever the
strides). ``matmul`` and ``linear`` are modelled too, but the pipeline takes the innermost
modelled op, so they count only where no ``mm``/``addmm``/``bmm`` inside them was recorded.
"""

from __future__ import annotations

from math import prod

from . import formulas
from .model import OpModel
from .shapes import SIZES, Args

#: Output bytes per element where a GEMM's output dtype differs from its inputs' (not recorded):
#: fp8 GEMMs write bf16/fp16 (as TraceLens assumes), int8 GEMMs int32.
OUT_SIZE = {"fp8": 2, "int8": 4}


def _model(a: Args, ia: int, ib: int, bmnk: tuple[int, int, int, int], bias: int | None) -> OpModel | None:
    """The model of a GEMM of operands ``ia``, ``ib`` (and a bias or added input ``bias``)."""
    b, m, n, k = bmnk
    dtype = a.dtype(ia)
    if not dtype or min(bmnk) < 0:
        return None
    has_bias = bias is not None and a.tensor(bias) is not None
    out_size = OUT_SIZE.get(dtype, SIZES[dtype])
    moved = a.nbytes(ia) + a.nbytes(ib) + (a.nbytes(bias) if has_bias and bias is not None else 0.0)
    moved += float(b * m * n) * out_size
    formula = f"2·B·M·N·K{' + B·M·N' if has_bias else ''} = 2·{b}·{m}·{n}·{k}" + (
        f" + {b}·{m}·{n}" if has_bias else ""
    )
    return OpModel(
        family="gemm",
        flops=formulas.gemm(b, m, n, k, has_bias),
        bytes=moved,
        dtype=dtype,
        formula=formula,
        shape=f"B={b} M={m} N={n} K={k}",
        gemm=(b, m, n, k),
    )


def _two_d(a: Args, ia: int, ib: int, bias: int | None = None) -> OpModel | None:
    x, w = a.tensor(ia), a.tensor(ib)
    if x is None or w is None or len(x) != 2 or len(w) != 2 or x[1] != w[0]:
        return None
    return _model(a, ia, ib, (1, x[0], w[1], x[1]), bias)


def _batched(a: Args, ia: int, ib: int, bias: int | None = None) -> OpModel | None:
    x, w = a.tensor(ia), a.tensor(ib)
    if x is None or w is None or len(x) != 3 or len(w) != 3 or x[0] != w[0] or x[2] != w[1]:
        return None
    return _model(a, ia, ib, (x[0], x[1], w[2], x[2]), bias)


def mm(a: Args) -> OpModel | None:
    """``mm(A[M,K], B[K,N])``."""
    return _two_d(a, 0, 1)


def addmm(a: Args) -> OpModel | None:
    """``addmm(C, A[M,K], B[K,N])``: the add of C counts ``M·N``."""
    return _two_d(a, 1, 2, bias=0)


def bmm(a: Args) -> OpModel | None:
    """``bmm(A[B,M,K], B[B,K,N])``."""
    return _batched(a, 0, 1)


def baddbmm(a: Args) -> OpModel | None:
    """``baddbmm(C, A[B,M,K], B[B,K,N])``."""
    return _batched(a, 1, 2, bias=0)


def _broadcast(x: tuple[int, ...], y: tuple[int, ...]) -> int | None:
    """The number of matrices of broadcast batch dims ``x`` and ``y`` (None: they do not broadcast)."""
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + x, (1,) * (n - len(y)) + y
    if any(p != q and 1 not in (p, q) for p, q in zip(x, y)):
        return None
    return prod(max(p, q) for p, q in zip(x, y))


def matmul(a: Args) -> OpModel | None:
    """``matmul(A, B)`` as torch runs it: a 2-D ``B`` folds ``A``'s leading dims into M (one
    ``mm``); vectors give M or N = 1; else a batched product over the broadcast batch dims."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or not x or not w:
        return None
    if len(w) == 1:  # matrix-vector (or a dot product)
        return _model(a, 0, 1, (1, prod(x[:-1]), 1, x[-1]), None) if x[-1] == w[0] else None
    if len(w) == 2:
        return _model(a, 0, 1, (1, prod(x[:-1]), w[1], x[-1]), None) if x[-1] == w[0] else None
    m = x[-2] if len(x) >= 2 else 1
    batch = _broadcast(x[:-2], w[:-2])
    if batch is None or x[-1] != w[-2]:
        return None
    return _model(a, 0, 1, (batch, m, w[-1], x[-1]), None)


def linear(a: Args) -> OpModel | None:
    """``linear(X[..., K], W[N, K], bias)``: M is the product of X's leading dims."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or not x or len(w) != 2 or x[-1] != w[1]:
        return None
    return _model(a, 0, 1, (1, prod(x[:-1]), w[0], w[1]), 2)


def scaled_mm(a: Args) -> OpModel | None:
    """``_scaled_mm(A[M,K], B[K,N], scale_a, scale_b, bias, ...)`` (fp8): ``2·M·N·K`` (+ bias)."""
    return _two_d(a, 0, 1, bias=4)


def grouped_mm(a: Args) -> OpModel | None:
    """``_grouped_mm(A, B, offs, ...)``: ``2·T·N·K`` for tokens ``T`` (A's leading dims) against
    their group's ``B[K, N]``; 3-D by 3-D is ``G`` batched GEMMs; 2-D by 2-D (the weight
    gradient) splits K between groups: ``2·M·N·K_total``."""
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(x) not in (2, 3) or len(w) not in (2, 3):
        return None
    if len(x) == 3 and len(w) == 3:
        return _model(a, 0, 1, (x[0], x[1], w[2], x[2]), None) if x[0] == w[0] else None
    return _model(a, 0, 1, (1, prod(x[:-1]), w[-1], x[-1]), None)


def scaled_grouped_mm(a: Args) -> OpModel | None:
    """``_scaled_grouped_mm(A, B, scale_a, scale_b, offs, ...)``: as :func:`grouped_mm`."""
    return grouped_mm(a)


#: Third-party ops that are ``linear`` by another name (``x[..., K]``, ``w[N, K]``, bias): they
#: count where they launch their own kernels (AITER's Triton GEMM, vLLM's ROCm skinny GEMMs);
#: where they fall back to ``torch.nn.functional.linear`` its ``aten::mm`` is the innermost.
LINEAR_LIKE = ("aiter::gemm_a16w16", "vllm::rocm_unquantized_gemm")

READERS = {
    **dict.fromkeys(LINEAR_LIKE, linear),
    "aten::mm": mm,
    "aten::addmm": addmm,
    "aten::bmm": bmm,
    "aten::baddbmm": baddbmm,
    "aten::matmul": matmul,
    "aten::linear": linear,
    "aten::_scaled_mm": scaled_mm,
    "aten::_grouped_mm": grouped_mm,
    "aten::_scaled_grouped_mm": scaled_grouped_mm,
}
