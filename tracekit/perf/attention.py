"""Attention readers: PyTorch's SDPA backends and flash-attn's ops, forward and backward, dense
and variable-length, causal or not.

Each op is a :class:`Sig` (where its q, k, v and flags are in its argument list, from the op's
schema); one reader turns any of them into FLOPs (:func:`tracekit.perf.formulas.attention`).
Variable-length ops record only the packed token count, the number of sequences
(``cu_seqlens`` has n + 1 entries) and the longest sequence (``max_seqlen``): the sequences'
own lengths are tensors the profiler does not record. As TraceLens does, one sequence is
taken at the longest length and the other n - 1 share the rest equally (floor division):
exact when the sequences are equal, an estimate otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from . import formulas
from .model import OpModel, Reader
from .shapes import SIZES, Args


@dataclass(frozen=True)
class Sig:
    """Where an attention op keeps its arguments: ``q`` (k, v follow it); ``layout`` of q
    (``bhsd``: [B, H, S, D] as SDPA; ``bshd``: [B, S, H, D] as flash-attn; a 3-D q is
    variable-length [T, H, D]); ``causal``: the concrete index of ``is_causal``;
    ``mask_type``: of efficient attention's ``custom_mask_type`` (1: causal from the top
    left, 2: from the bottom right); ``cu``: of ``cu_seqlens_q``; ``max_q``: of
    ``max_seqlen_q`` (max_seqlen_k follows); ``bottom_right``: how its causal mask aligns."""

    q: int
    layout: str
    causal: int | None = None
    mask_type: int | None = None
    backward: bool = False
    cu: int | None = None
    max_q: int | None = None
    bottom_right: bool = False


SIGS = {
    "aten::scaled_dot_product_attention": Sig(0, "bhsd", causal=5),
    "aten::_scaled_dot_product_attention_math": Sig(0, "bhsd", causal=5),
    "aten::_scaled_dot_product_flash_attention": Sig(0, "bhsd", causal=4),
    "aten::_scaled_dot_product_flash_attention_for_cpu": Sig(0, "bhsd", causal=4),
    "aten::_scaled_dot_product_efficient_attention": Sig(0, "bhsd", causal=6),
    "aten::_scaled_dot_product_cudnn_attention": Sig(0, "bhsd", causal=6),
    "aten::_scaled_dot_product_fused_attention_overrideable": Sig(0, "bhsd", causal=5),
    "aten::_flash_attention_forward": Sig(0, "bshd", causal=8, cu=3, max_q=5),
    "aten::_efficient_attention_forward": Sig(0, "bshd", mask_type=9, cu=4, max_q=6),
    "flash_attn::_flash_attn_forward": Sig(0, "bshd", causal=5, bottom_right=True),
    "FlashAttnFunc": Sig(0, "bshd", causal=5, bottom_right=True),
    "flash_attn::_flash_attn_varlen_forward": Sig(0, "bshd", causal=9, cu=3, max_q=5, bottom_right=True),
    "FlashAttnVarlenFunc": Sig(0, "bshd", causal=9, cu=3, max_q=5, bottom_right=True),
    "aten::_scaled_dot_product_flash_attention_backward": Sig(1, "bhsd", causal=11, backward=True),
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": Sig(1, "bhsd", causal=7, backward=True),
    "aten::_scaled_dot_product_efficient_attention_backward": Sig(1, "bhsd", causal=11, backward=True),
    "aten::_scaled_dot_product_cudnn_attention_backward": Sig(1, "bhsd", causal=14, backward=True),
    "aten::_flash_attention_backward": Sig(1, "bshd", causal=11, backward=True, cu=6, max_q=8),
    "aten::_efficient_attention_backward": Sig(1, "bshd", mask_type=14, backward=True, cu=6, max_q=8),
    "flash_attn::_flash_attn_backward": Sig(1, "bshd", causal=11, backward=True, bottom_right=True),
    "flash_attn::_flash_attn_varlen_backward": Sig(
        1, "bshd", causal=15, backward=True, cu=9, max_q=11, bottom_right=True
    ),
}


def _heads(shape: tuple[int, ...], layout: str) -> tuple[int, int, int, int] | None:
    """``(batch, heads, seq, head_dim)`` of q, k or v (a 3-D tensor: one packed batch)."""
    if len(shape) == 3:
        return 1, shape[1], shape[0], shape[2]
    if len(shape) != 4:
        return None
    b, x, y, d = shape
    return (b, x, y, d) if layout == "bhsd" else (b, y, x, d)


def _causal(sig: Sig, a: Args) -> tuple[bool, bool] | None:
    """``(causal, bottom_right)``, None when the op's flag was not recorded."""
    if sig.mask_type is not None:
        t = a.number(sig.mask_type)
        return None if t not in (0, 1, 2) else (t != 0, t == 2)
    if sig.causal is None:
        return None
    flag = a.flag(sig.causal)
    return None if flag is None else (flag, sig.bottom_right)


def _sequences(sig: Sig, a: Args, s_q: int, s_kv: int) -> list[tuple[int, int, int]] | None:
    """``[(count, s_q, s_kv)]``: the sequences of a packed (variable-length) call, else one."""
    cu = a.tensor(sig.cu) if sig.cu is not None else None
    if cu is None or len(cu) != 1 or cu[0] < 2 or sig.max_q is None:
        return [(1, s_q, s_kv)]
    n = cu[0] - 1
    mq, mk = a.number(sig.max_q), a.number(sig.max_q + 1)
    if mq is None or mk is None or mq > s_q or mk > s_kv:
        return None
    if n == 1:
        return [(1, s_q, s_kv)]
    return [(1, int(mq), int(mk)), (n - 1, (s_q - int(mq)) // (n - 1), (s_kv - int(mk)) // (n - 1))]


def read(sig: Sig, a: Args) -> OpModel | None:
    """FLOPs and bytes of one attention call of signature ``sig``."""
    tq, tk, tv = a.tensor(sig.q), a.tensor(sig.q + 1), a.tensor(sig.q + 2)
    flags = _causal(sig, a)
    if tq is None or tk is None or tv is None or flags is None or not a.dtype(sig.q):
        return None
    q, k, v = (_heads(t, sig.layout) for t in (tq, tk, tv))
    if q is None or k is None or v is None or not (q[0] == k[0] == v[0] and k[1:3] == v[1:3]):
        return None
    (b, h, s_q, d_qk), (_, h_kv, s_kv, d_k), d_v = q, k, v[3]
    seqs = _sequences(sig, a, s_q, s_kv)
    if seqs is None or d_qk != d_k or h_kv == 0 or h % h_kv:
        return None
    causal, bottom_right = flags
    count = formulas.attention_backward if sig.backward else formulas.attention
    flops = sum(
        n * count(b, h, sq, sk, d_qk, d_v, formulas.causal_pairs(sq, sk, bottom_right) if causal else None)
        for n, sq, sk in seqs
    )
    size = SIZES[a.dtype(sig.q)]
    qkv = a.nbytes(sig.q) + a.nbytes(sig.q + 1) + a.nbytes(sig.q + 2)
    out = float(b * h * s_q * d_v) * size
    moved = 2 * (qkv + out) if sig.backward else qkv + out  # backward: + dout, out; writes dq, dk, dv
    kind = "backward 2·B·H·pairs·(3·d_qk + 2·d_v)" if sig.backward else "2·B·H·pairs·(d_qk + d_v)"
    pairs = "S_q·S_kv/2 (causal)" if causal and s_q == s_kv else ("causal pairs" if causal else "S_q·S_kv")
    lens = "" if len(seqs) == 1 else f", {sum(n for n, _, _ in seqs)} sequences (max {seqs[0][1]})"
    return OpModel(
        family="attention",
        flops=flops,
        bytes=moved,
        dtype=a.dtype(sig.q),
        formula=f"{kind}, pairs = {pairs}: B={b} H={h} S_q={s_q} S_kv={s_kv} d_qk={d_qk} d_v={d_v}{lens}",
        shape=f"B={b} H={h} H_kv={h_kv} S_q={s_q} S_kv={s_kv} D={d_qk}" + (" causal" if causal else ""),
    )


READERS: dict[str, Reader] = {name: partial(read, sig) for name, sig in SIGS.items()}
