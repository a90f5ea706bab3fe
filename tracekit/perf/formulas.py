"""The FLOP formula of each op family, one small function each (docs/metrics.md, "FLOPs and bytes").

A multiply-add is 2 FLOPs. Conventions follow PyTorch's FLOP counter
(``torch/utils/flop_counter.py``) and TraceLens' perf model (``TraceLens/PerfModel/perf_model.py``)
where they agree; where tracekit differs it says so here and in docs/metrics.md.
"""

from __future__ import annotations

from math import prod


def gemm(b: int, m: int, n: int, k: int, bias: bool = False) -> float:
    """``2·B·M·N·K``, plus ``B·M·N`` for the added bias or input of addmm/baddbmm/linear (as
    TraceLens counts it; PyTorch's counter leaves the add out)."""
    return 2.0 * b * m * n * k + (float(b * m * n) if bias else 0.0)


def causal_pairs(s_q: int, s_kv: int, bottom_right: bool) -> float:
    """Query-key pairs a causal mask keeps, in the continuous form that gives the usual half
    for a square mask (``S²/2``). PyTorch's SDPA aligns the mask to the top left (query i sees
    keys 0..i), flash-attn 2.1+ to the bottom right (the last query sees every key)."""
    if bottom_right:
        return s_q * s_kv - s_q * s_q / 2 if s_q <= s_kv else s_kv * s_kv / 2
    return s_q * s_q / 2 if s_q <= s_kv else s_q * s_kv - s_kv * s_kv / 2


def attention(b: int, h: int, s_q: int, s_kv: int, d_qk: int, d_v: int, pairs: float | None) -> float:
    """Forward: ``Q·Kᵀ`` and ``P·V``, ``2·B·H·pairs·(d_qk + d_v)`` with ``pairs = S_q·S_kv``
    (or the causal pairs). The softmax is left out, as the flash-attn benchmark, TraceLens
    and PyTorch's counter do."""
    return 2.0 * b * h * (s_q * s_kv if pairs is None else pairs) * (d_qk + d_v)


def attention_backward(
    b: int, h: int, s_q: int, s_kv: int, d_qk: int, d_v: int, pairs: float | None
) -> float:
    """Backward of a fused attention: five products, the scores recomputed (``Q·Kᵀ``), then
    ``dV``, ``dP``, ``dQ``, ``dK``: ``2·B·H·pairs·(3·d_qk + 2·d_v)``, 2.5x the forward when
    ``d_qk = d_v`` (the flash-attn benchmark's ratio; PyTorch's counter counts the same five)."""
    return 2.0 * b * h * (s_q * s_kv if pairs is None else pairs) * (3 * d_qk + 2 * d_v)


def conv(batch: int, out_spatial: tuple[int, ...], weight: tuple[int, ...]) -> float:
    """``2·N·prod(output spatial)·prod(weight)`` (weight ``[C_out, C_in/groups, *kernel]``), as
    PyTorch's counter; a transposed convolution uses its *input* spatial size instead (the
    caller passes it). The bias is left out."""
    return 2.0 * batch * prod(out_spatial) * prod(weight)


def conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    """One spatial output size of a convolution (PyTorch's formula)."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def norm(elements: int, rms: bool, backward: bool) -> float:
    """Layer/batch norm ``8`` FLOPs per element (mean 1, variance 3, normalise 2, affine 2),
    RMS norm ``4`` (square and sum 2, scale 1, weight 1); a backward pass twice its forward.
    A convention of tracekit's (TraceLens counts per-row terms too): norms are memory-bound,
    so their bytes, not their FLOPs, set their roofline."""
    return float(elements) * (4 if rms else 8) * (2 if backward else 1)


def reduced_elements(shape: tuple[int, ...], dims: tuple[int, ...] | None) -> int:
    """Elements left after reducing ``shape`` over ``dims`` (None or empty: every dimension)."""
    if not dims:
        return 1
    keep = [s for i, s in enumerate(shape) if i not in {d % len(shape) for d in dims}] if shape else []
    return prod(keep)
