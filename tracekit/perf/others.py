"""Convolution, normalisation, element-wise and reduction readers.

Convolutions count FLOPs as PyTorch's counter does (forward and each gradient the same
``2·N·prod(out spatial)·prod(weight)``); norms count a few FLOPs per element and their bytes;
element-wise ops and reductions count bytes only: inputs read once, the output written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from math import prod

from . import formulas
from .model import OpModel, Reader, dims_text
from .shapes import SIZES, Args


@dataclass(frozen=True)
class ConvSig:
    """Argument positions of a convolution op: input, weight, bias (tensors) and the concrete
    indices of stride, padding, dilation, transposed, output_padding, groups; ``grad``: the
    backward's grad_output (its input and weight follow) and ``mask`` its output_mask."""

    x: int
    stride: int
    padding: int
    dilation: int
    bias: int | None = None
    transposed: int | None = None
    groups: int | None = None
    mask: int | None = None


CONV = {
    "aten::convolution": ConvSig(0, 3, 4, 5, bias=2, transposed=6, groups=8),
    "aten::_convolution": ConvSig(0, 3, 4, 5, bias=2, transposed=6, groups=8),
    "aten::conv1d": ConvSig(0, 3, 4, 5, bias=2, groups=6),
    "aten::conv2d": ConvSig(0, 3, 4, 5, bias=2, groups=6),
    "aten::conv3d": ConvSig(0, 3, 4, 5, bias=2, groups=6),
    "aten::cudnn_convolution": ConvSig(0, 3, 2, 4, groups=5),
    "aten::miopen_convolution": ConvSig(0, 4, 3, 5, bias=2, groups=6),
    "aten::convolution_backward": ConvSig(1, 4, 5, 6, transposed=7, groups=9, mask=10),
}


def _per_dim(a: Args, i: int, n: int) -> tuple[int, ...] | None:
    """A stride/padding/dilation list, one value per spatial dim (a single value repeats)."""
    v = a.ints(i)
    if v is None or len(v) not in (1, n) or any(x < 0 for x in v):
        return None
    return v * n if len(v) == 1 else v


def conv(sig: ConvSig, a: Args) -> OpModel | None:
    """A convolution forward, or its backward (``sig.mask``): each gradient asked for costs
    the forward's FLOPs."""
    x, w = a.tensor(sig.x), a.tensor(sig.x + 1)
    if x is None or w is None or len(x) < 3 or len(x) != len(w) or not a.dtype(sig.x):
        return None
    n_sp = len(x) - 2
    s, p, d = (_per_dim(a, i, n_sp) for i in (sig.stride, sig.padding, sig.dilation))
    transposed = a.flag(sig.transposed) if sig.transposed is not None else False
    groups = a.number(sig.groups) if sig.groups is not None else 1
    if s is None or p is None or d is None or transposed is None or not groups or 0 in s:
        return None
    size = SIZES[a.dtype(sig.x)]
    if sig.mask is None:
        out_sp = tuple(formulas.conv_out(*t) for t in zip(x[2:], w[2:], s, p, d))
        if min(out_sp) <= 0:
            return None
        flops = formulas.conv(x[0], x[2:] if transposed else out_sp, w)
        c_out = w[1] * int(groups) if transposed else w[0]
        moved = a.nbytes(sig.x) + a.nbytes(sig.x + 1) + float(x[0] * c_out * prod(out_sp)) * size
        moved += a.nbytes(sig.bias) if sig.bias is not None else 0.0
        grads = 1
    else:  # convolution_backward(grad_output, input, weight, ...): the forward's output is grad_output
        g, mask = a.tensor(0), a.bools(sig.mask)
        if g is None or len(g) != len(x) or mask is None or len(mask) < 2:
            return None
        grads = int(mask[0]) + int(mask[1])
        flops = grads * formulas.conv(x[0], x[2:] if transposed else g[2:], w)
        reads = a.nbytes(0) + a.nbytes(sig.x) + a.nbytes(sig.x + 1)
        moved = reads + a.nbytes(sig.x) * mask[0] + a.nbytes(sig.x + 1) * mask[1]
    return OpModel(
        family="conv",
        flops=flops,
        bytes=moved,
        dtype=a.dtype(sig.x),
        formula=f"{grads}·2·N·prod(output spatial)·prod(weight): x={dims_text(x)} w={dims_text(w)}",
        shape=f"x={dims_text(x)} w={dims_text(w)} stride={list(s)} pad={list(p)}",
    )


@dataclass(frozen=True)
class NormSig:
    """A norm op: ``x`` (the activations), ``params`` (weight, bias), ``rms``, ``backward``,
    ``acts``: activation-sized tensors read plus written (forward: x in, y out)."""

    x: int
    params: tuple[int, ...]
    rms: bool = False
    backward: bool = False
    acts: int = 2


NORMS = {
    "aten::layer_norm": NormSig(0, (2, 3)),
    "aten::native_layer_norm": NormSig(0, (2, 3)),
    "aten::native_layer_norm_backward": NormSig(1, (5, 6), backward=True, acts=3),
    "aten::group_norm": NormSig(0, (2, 3)),
    "aten::native_group_norm": NormSig(0, (1, 2)),
    "aten::batch_norm": NormSig(0, (1, 2)),
    "aten::_batch_norm_impl_index": NormSig(0, (1, 2)),
    "aten::native_batch_norm": NormSig(0, (1, 2)),
    "aten::_native_batch_norm_legit": NormSig(0, (1, 2)),
    "aten::cudnn_batch_norm": NormSig(0, (1, 2)),
    "aten::miopen_batch_norm": NormSig(0, (1, 2)),
    "aten::native_batch_norm_backward": NormSig(1, (2,), backward=True, acts=3),
    "aten::cudnn_batch_norm_backward": NormSig(0, (2,), backward=True, acts=3),
    "aten::miopen_batch_norm_backward": NormSig(0, (2,), backward=True, acts=3),
    "aten::rms_norm": NormSig(0, (2,), rms=True),
    "aten::_fused_rms_norm": NormSig(0, (2,), rms=True),
    "aten::_fused_rms_norm_backward": NormSig(1, (4,), rms=True, backward=True, acts=3),
    "_C::rms_norm": NormSig(1, (2,), rms=True),
    "_C::fused_add_rms_norm": NormSig(0, (2,), rms=True, acts=4),
}


def norm(sig: NormSig, a: Args) -> OpModel | None:
    """FLOPs (:func:`tracekit.perf.formulas.norm`) and bytes: ``acts`` activation-sized
    tensors plus the parameters (read, and written as gradients in backward)."""
    x = a.tensor(sig.x)
    if x is None or not a.dtype(sig.x):
        return None
    params = sum(a.nbytes(i) for i in sig.params)
    moved = sig.acts * a.nbytes(sig.x) + params * (2 if sig.backward else 1)
    kind = ("RMS" if sig.rms else "layer/batch") + (" backward" if sig.backward else "")
    return OpModel(
        family="norm",
        flops=formulas.norm(prod(x), sig.rms, sig.backward),
        bytes=moved,
        dtype=a.dtype(sig.x),
        formula=f"{kind} norm: {formulas.norm(1, sig.rms, sig.backward):g} FLOPs/element · {prod(x)}",
        shape=f"x={dims_text(x)}",
    )


def _bytes_only(family: str, a: Args, moved: float, what: str) -> OpModel | None:
    first = next((i for i in range(len(a.dims)) if a.tensor(i) is not None), None)
    if first is None:
        return None
    return OpModel(family, 0.0, moved, a.dtype(first), f"bytes only: {what}", f"x={dims_text(a.dims[first])}")


def elementwise(a: Args) -> OpModel | None:
    """Every tensor input read once, the (broadcast) output written once at the first input's dtype."""
    tensors = [i for i in range(len(a.dims)) if a.tensor(i) is not None]
    if not tensors:
        return None
    out = max(prod(a.dims[i]) for i in tensors) * SIZES[a.dtype(tensors[0])]
    return _bytes_only("elementwise", a, sum(a.nbytes(i) for i in tensors) + out, "inputs + output")


def copy(a: Args) -> OpModel | None:
    """``copy_(self, src)``: src read, self written."""
    return _bytes_only("elementwise", a, a.nbytes(0) + a.nbytes(1), "source read + destination written")


def fill(a: Args) -> OpModel | None:
    """``fill_``/``zero_``: the tensor written."""
    return _bytes_only("elementwise", a, a.nbytes(0), "tensor written")


def reduction(dims_at: int | None, a: Args) -> OpModel | None:
    """The input read, the reduced output written (``dims_at``: the concrete index of the
    reduced dims; None: a row-wise op such as softmax, whose output is the input's size)."""
    x = a.tensor(0)
    if x is None or not a.dtype(0):
        return None
    if dims_at is None:
        out = prod(x)
    else:
        dims = a.ints(dims_at)
        one = a.number(dims_at)
        out = formulas.reduced_elements(
            x, dims if dims is not None else (int(one),) if one is not None else None
        )
    inputs = sum(a.nbytes(i) for i in range(len(a.dims)))
    return _bytes_only("reduction", a, inputs + float(out) * SIZES[a.dtype(0)], "input + reduced output")


ELEMENTWISE = [
    *("abs neg exp exp2 expm1 log log1p log2 sqrt rsqrt sigmoid tanh relu gelu silu erf sin cos",),
    *("reciprocal pow clamp clamp_min clamp_max threshold threshold_backward gelu_backward",),
    *("silu_backward sigmoid_backward tanh_backward hardtanh leaky_relu elu mish softplus where",),
    *("masked_fill mul add sub div rsub lerp addcmul addcdiv maximum minimum eq ne lt le gt ge",),
    *("logical_and logical_or logical_not bitwise_and bitwise_or bitwise_not bitwise_xor sign",),
    *("floor ceil round trunc remainder fmod clone _to_copy native_dropout square floor_divide",),
    "nan_to_num",
]
#: Reductions and the concrete index of their ``dim`` argument.
REDUCTIONS = {
    **dict.fromkeys(("sum mean amax amin max min prod var std argmax argmin logsumexp any all",), 1),
    "norm": 2,
    "linalg_vector_norm": 2,
}
#: Row-wise ops: their output is the size of their input.
ROW_OPS = (
    "_softmax softmax _log_softmax log_softmax _softmax_backward_data _log_softmax_backward_data cumsum",
)

READERS: dict[str, Reader] = {
    **{name: partial(conv, sig) for name, sig in CONV.items()},
    **{name: partial(norm, sig) for name, sig in NORMS.items()},
    **{f"aten::{n}{t}": elementwise for line in ELEMENTWISE for n in line.split() for t in ("", "_")},
    **{f"aten::{n}": partial(reduction, i) for line, i in REDUCTIONS.items() for n in line.split()},
    **{f"aten::{n}": partial(reduction, None) for line in ROW_OPS for n in line.split()},
    "aten::copy_": copy,
    "aten::fill_": fill,
    "aten::zero_": fill,
}
