"""The forward pass of :func:`tracekit.testing.llama.llama_training`: a Llama-style decoder's
modules, ops and kernels on a :class:`~tracekit.testing.TraceBuilder`, each forward op's
autograd node (its backward ops and kernels) recorded for the backward pass.

Durations are the model's base microseconds scaled per step and per layer, plus a few ns of
jitter (:meth:`Forward.d`), so steps and layers differ and no two activities tie by accident.
Labels planted with ``b.label``: ``category`` (the module category the kernel is meant to get),
``block`` (the timeline block).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from .builder import TraceBuilder
from .events import COMM_STREAM, COMPUTE_STREAM, COPY_STREAM, SIDE_STREAM
from .kernels import (
    BMM,
    GEMM_A,
    GEMM_B,
    GEMM_C,
    GEMM_NN,
    GEMM_NT,
    K_ADD,
    K_CAT,
    K_COPY,
    K_COS,
    K_DIV,
    K_EMB_BW,
    K_EMB_SORT,
    K_FLASH_BWD,
    K_FLASH_BWD_DOT,
    K_FLASH_FWD,
    K_INDEX,
    K_LOGSOFTMAX,
    K_LOGSOFTMAX_BW,
    K_MEAN,
    K_MUL,
    K_NEG,
    K_NLL,
    K_NLL_BW,
    K_POW,
    K_RSQRT,
    K_SILU,
    K_SILU_BW,
    K_SIN,
    K_SOFTMAX,
    K_SOFTMAX_BW,
    K_SUM,
    NCCL_AG,
    NCCL_GENERIC,
)
from .truth import Op

#: ZeRO/DDP style arguments of ``record_param_comms`` (a group of 8 ranks).
RPC = {"dtype": "BFloat16", "Process Group Name": "0", "Group size": 8}
#: Idle gaps planted between decoder layers (us, cycled).
LAYER_GAPS_US = (7.3, 12.9, 4.1, 9.7, 15.2, 3.3)


@dataclass
class Unit:
    """A forward op that made an autograd node: what the backward pass replays."""

    creator: Op  # the innermost forward op (its ``Sequence number``, the flow's start)
    node: str
    ops: list  # [(backward op, [(kernel or "memset", base us)])]
    category: str | None
    layer: int | None
    scale: float


class Forward:
    """The forward pass on ``b`` (see the module docstring); ``o``: the scenario's options."""

    def __init__(self, b: TraceBuilder, o: dict[str, Any]) -> None:
        self.b, self.o = b, o
        self.rng = random.Random(o["seed"])
        self.nn_module = o["modules"] in ("nn_module", "both")
        self.step_scale = self.layer_scale = 1.0
        self.units: list[Unit] = []
        self.cur_layer: int | None = None

    # times -----------------------------------------------------------------------------------
    def d(self, us: float, jitter: bool = True) -> float:
        """A planted device duration (us, whole ns): base ``us`` scaled by step and layer,
        plus 0-97 ns of jitter."""
        ns = us * 1000 * self.step_scale * self.layer_scale
        if jitter:
            ns += self.rng.randint(0, 97)
        return self.q(ns)

    def q(self, ns: float) -> float:
        """``ns`` on the trace's time quantum, in us."""
        return self.b.w.qz(ns) / 1000

    def after(self, ns: int) -> float:
        """Absolute ``ns`` as microseconds after the builder's origin (``not_before_us``)."""
        return (ns - self.b.origin) / 1000

    def end(self, *streams: int) -> int:
        """The last end (ns) of the activities on ``streams``."""
        return max(self.b.w.stream_end[s] for s in streams)

    # structure -------------------------------------------------------------------------------
    @contextmanager
    def frame(self, name: str, pre: float = 0.6, post: float = 0.4) -> Iterator[None]:
        """A python frame, where the trace has python frames (``nn.Module`` events)."""
        with ExitStack() as stack:
            if self.nn_module:
                stack.enter_context(self.b.python(name, pre=pre, post=post))
            yield

    @contextmanager
    def module(self, cls: str, qualified: str) -> Iterator[None]:
        """A module's forward, with its ``forward`` frame under ``_call_impl``."""
        src = {
            "Linear": "torch/nn/modules/linear.py(125): forward",
            "Embedding": "torch/nn/modules/sparse.py(190): forward",
            "SiLU": "torch/nn/modules/activation.py(432): forward",
        }.get(cls, f"transformers/models/llama/modeling_llama.py({100 + 17 * len(cls)}): forward")
        with self.b.module(cls, qualified), self.frame(src):
            yield

    def unit(self, op: str, kernels: list, *, inner: tuple = (), bwd: tuple | None = None) -> None:
        """A forward op (and its ``inner`` op chain) launching ``kernels`` [(name, us)]; ``bwd``:
        (autograd node, [(backward op, [(kernel, base us)])]) for the backward pass."""
        with ExitStack() as stack:
            ops = [stack.enter_context(self.b.op(name)) for name in (op, *inner)]
            for name, us in kernels:
                self.b.kernel(name, us)
        if bwd is not None:
            node, bops = bwd
            category = self.b.labels["category"]
            self.units.append(Unit(ops[-1], node, bops, category, self.cur_layer, self.layer_scale))

    def linear(self, qualified: str, us: float, gemm: str, bgemms: tuple = (GEMM_NN, GEMM_NT)) -> None:
        with self.module("Linear", qualified), self.frame("<built-in function linear>", 0.3, 0.2):
            self.unit(
                "aten::linear",
                [(gemm, self.d(us))],
                inner=("aten::matmul", "aten::mm"),
                bwd=("MmBackward0", [("aten::mm", [(bgemms[0], us)]), ("aten::mm", [(bgemms[1], us * 1.1)])]),
            )

    def ew(self, op: str, kernel: str, us: float, node: str | None = None, bwd: list | None = None) -> None:
        """One elementwise op and kernel; ``bwd``: [(backward op, kernel, us)] (default: the same op)."""
        spec = None
        if node is not None:
            spec = (node, [(o, [(k, u)]) for o, k, u in (bwd or [(op, kernel, us)])])
        self.unit(op, [(kernel, self.d(us))], bwd=spec)

    def rmsnorm(self, qualified: str, us: float) -> None:
        with self.module("LlamaRMSNorm", qualified):
            self.ew("aten::to", K_COPY, us * 0.6, "ToCopyBackward0")
            self.ew("aten::pow", K_POW, us * 0.5, "PowBackward0", [("aten::pow", K_POW, us * 0.6)])
            self.ew("aten::mean", K_MEAN, us, "MeanBackward1", [("aten::div", K_DIV, us * 0.4)])
            self.ew("aten::add", K_ADD, us * 0.4)
            self.ew(
                "aten::rsqrt",
                K_RSQRT,
                us * 0.4,
                "RsqrtBackward0",
                [("aten::rsqrt_backward", K_MUL, us * 0.5)],
            )
            self.ew("aten::mul", K_MUL, us * 0.5, "MulBackward0", [("aten::mul", K_MUL, us * 0.5)])
            self.unit(
                "aten::mul",
                [(K_MUL, self.d(us * 0.55))],
                bwd=(
                    "MulBackward0",
                    [("aten::mul", [(K_MUL, us * 0.5)]), ("aten::sum", [(K_SUM, us * 0.9)])],
                ),
            )

    @contextmanager
    def rotary(self) -> Iterator[None]:
        """apply_rotary_pos_emb's ops inside attention: RoPE where the trace records the python
        frame that says so (nn.Module events come with stacks), else attention glue."""
        if self.nn_module:
            with (
                self.b.label(category="RoPE"),
                self.b.python("transformers/models/llama/modeling_llama.py(151): apply_rotary_pos_emb"),
            ):
                yield
        else:
            with self.b.label(category="Attention other"):
                yield

    def rope_ops(self, eager: bool) -> None:
        for _ in ("q", "k"):
            self.ew("aten::mul", K_MUL, 6, "MulBackward0")
            if eager:
                with self.b.op("aten::slice"):
                    pass
            self.ew("aten::neg", K_NEG, 3.5, "NegBackward0")
            self.unit("aten::cat", [(K_CAT, self.d(5))], bwd=("CatBackward0", []))
            self.ew("aten::mul", K_MUL, 6, "MulBackward0")
            self.unit("aten::add", [(K_ADD, self.d(4.2))], bwd=("AddBackward0", []))

    def bmm(self, us: float, backward_us: tuple[float, float]) -> None:
        self.unit(
            "aten::matmul",
            [(BMM, self.d(us))],
            inner=("aten::bmm",),
            bwd=(
                "BmmBackward0",
                [("aten::bmm", [(BMM, backward_us[0])]), ("aten::bmm", [(BMM, backward_us[1])])],
            ),
        )

    def eager_attention(self) -> None:
        with self.b.label(category="Bmm0"):
            self.bmm(31, (30, 29))
        with self.b.label(category="Softmax"):
            self.ew("aten::mul", K_MUL, 8, "MulBackward0")
            self.unit("aten::add", [(K_ADD, self.d(8.5))], bwd=("AddBackward0", []))
            self.unit(
                "aten::softmax",
                [(K_SOFTMAX, self.d(19))],
                inner=("aten::_softmax",),
                bwd=("SoftmaxBackward0", [("aten::_softmax_backward_data", [(K_SOFTMAX_BW, 23)])]),
            )
            self.ew("aten::to", K_COPY, 7, "ToCopyBackward0")
        with self.b.label(category="Bmm1"):
            self.bmm(28, (27, 26))

    def flash_attention(self) -> None:
        with self.b.label(category="Attention"):
            self.unit(
                "aten::scaled_dot_product_attention",
                [(K_FLASH_FWD, self.d(64))],
                inner=("aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward"),
                bwd=(
                    "ScaledDotProductFlashAttentionBackward0",
                    [
                        (
                            "aten::_scaled_dot_product_flash_attention_backward",
                            [(K_FLASH_BWD_DOT, 6), (K_FLASH_BWD, 150)],
                        )
                    ],
                ),
            )

    def attention(self, i: int) -> None:
        p = f"model.layers.{i}.self_attn"
        eager = self.o["attention"] == "eager"
        with self.module("LlamaAttention", p):
            with self.b.label(category="QKV"):
                self.linear(f"{p}.q_proj", 52, GEMM_A)
                self.linear(f"{p}.k_proj", 21, GEMM_B)
                self.linear(f"{p}.v_proj", 22, GEMM_B)
            for view in ("aten::view", "aten::transpose"):
                with self.b.op(view):
                    pass
            with self.rotary():
                self.rope_ops(eager)
            self.eager_attention() if eager else self.flash_attention()
            with self.b.label(category="Attention other"):
                self.unit(
                    "aten::contiguous",
                    [(K_COPY, self.d(9))],
                    inner=("aten::clone", "aten::copy_"),
                    bwd=("CloneBackward0", []),
                )
            with self.b.label(category="Output"):
                self.linear(f"{p}.o_proj", 47, GEMM_C)

    def mlp(self, i: int) -> None:
        p = f"model.layers.{i}.mlp"
        with self.module("LlamaMLP", p), self.b.label(category="MLP"):
            self.linear(f"{p}.gate_proj", 131, GEMM_A)
            with self.module("SiLU", f"{p}.act_fn"):
                self.unit(
                    "aten::silu",
                    [(K_SILU, self.d(11))],
                    bwd=("SiluBackward0", [("aten::silu_backward", [(K_SILU_BW, 14)])]),
                )
            self.linear(f"{p}.up_proj", 128, GEMM_A)
            self.ew("aten::mul", K_MUL, 12, "MulBackward0")
            self.linear(f"{p}.down_proj", 125, GEMM_B)

    def layer(self, i: int, first: bool) -> None:
        """Decoder layer ``i``, after a planted idle gap on the compute stream."""
        self.cur_layer, self.layer_scale = i, 1.0 + 0.09 * i
        gap = 16400 if first else LAYER_GAPS_US[i % len(LAYER_GAPS_US)] * 1000 * self.step_scale
        self.b.idle(self.q(gap))
        with self.b.label(block="attention"), self.module("LlamaDecoderLayer", f"model.layers.{i}"):
            with self.b.label(category="RMSNorm"):
                self.rmsnorm(f"model.layers.{i}.input_layernorm", 5)
            self.attention(i)
            with self.b.label(category=None):
                self.unit("aten::add", [(K_ADD, self.d(7))], bwd=("AddBackward0", []))
            with self.b.label(block="ffn"):
                with self.b.label(category="RMSNorm"):
                    self.rmsnorm(f"model.layers.{i}.post_attention_layernorm", 5.5)
                self.mlp(i)
                with self.b.label(category=None):
                    self.unit("aten::add", [(K_ADD, self.d(7.5))], bwd=("AddBackward0", []))

    # the pass --------------------------------------------------------------------------------
    def inputs(self) -> None:
        """Input ids to the device, and a ZeRO-3 style parameter gather that starts in an idle
        gap and runs into the embedding (its collective known from ``record_param_comms``)."""
        b = self.b
        with b.op("aten::to"), b.op("aten::_to_copy"):
            b.memcpy(self.d(4.4), "HtoD", stream=COMPUTE_STREAM, gap_us=self.q(1900))
        if self.o["comm"] and self.o["forward_allgather"]:
            with b.op("record_param_comms", args={"Collective name": "_allgather_base", **RPC}):
                b.runtime("cudaEventRecord", 1.2, 135)
                b.runtime("cudaStreamWaitEvent", 1.1, 147)
                b.collective_kernel(
                    "AllGather",
                    self.d(38),
                    kernel=NCCL_AG,
                    not_before_us=self.after(self.end(COMPUTE_STREAM) + b.w.qz(2100)),
                )

    def embedding(self) -> None:
        """The embedding; then a memcpy on the copy stream that starts under its kernel and runs
        into the idle gap after it, the rotary tables on the side stream, and a parameter gather
        whose collective only its ``nccl:all_gather`` range tells."""
        b, o = self.b, self.o
        with b.label(category="Embedding"), self.module("Embedding", "model.embed_tokens"):
            self.unit(
                "aten::embedding",
                [(K_INDEX, self.d(24))],
                inner=("aten::index_select",),
                bwd=(
                    "EmbeddingBackward0",
                    [("aten::embedding_dense_backward", [("memset", 2.2), (K_EMB_SORT, 6), (K_EMB_BW, 21)])],
                ),
            )
        emb_end = self.end(COMPUTE_STREAM)
        b.memcpy(self.d(11.5), "DtoD", stream=COPY_STREAM, not_before_us=self.after(emb_end - b.w.qz(4300)))
        if o["rotary_module"]:
            with b.label(category="RoPE"), self.module("LlamaRotaryEmbedding", "model.rotary_emb"):
                side = o["side_stream"]
                st = SIDE_STREAM if side else COMPUTE_STREAM
                with b.op("aten::matmul"), b.op("aten::bmm"):
                    pass
                with b.op("aten::cat"):
                    b.kernel(
                        K_CAT,
                        self.d(4.5),
                        stream=st,
                        not_before_us=self.after(emb_end - b.w.qz(9700)) if side else None,
                        gap_us=self.q(16400),
                    )
                with b.op("aten::cos"):
                    b.kernel(K_COS, self.d(3.9), stream=st)
                with b.op("aten::sin"):
                    b.kernel(K_SIN, self.d(3.7), stream=st)
        if o["comm"] and o["forward_allgather"]:
            with b.annotation("nccl:all_gather"):
                b.collective_kernel(
                    "AllGather",
                    self.d(27),
                    kernel=NCCL_GENERIC,
                    api="cuLaunchKernelEx",
                    stream=COMM_STREAM,
                    not_before_us=self.after(self.end(COMPUTE_STREAM, SIDE_STREAM) + b.w.qz(1300)),
                )

    def forward(self) -> None:
        """The whole forward pass of one step: inputs, the model, the loss."""
        b = self.b
        self.inputs()
        with self.module("LlamaForCausalLM", ""):
            with self.module("LlamaModel", "model"):
                self.embedding()
                for i in range(self.o["n_layers"]):
                    self.layer(i, first=i == 0)
                self.cur_layer, self.layer_scale = None, 1.0
                with b.label(block="after", category="RMSNorm"):
                    self.rmsnorm("model.norm", 5.2)
            with b.label(block="after", category="Linear"):
                self.linear("lm_head", 290, GEMM_C)
        with b.label(block="after", category=None), b.op("aten::cross_entropy_loss"):  # outside every module
            self.unit(
                "aten::log_softmax",
                [(K_LOGSOFTMAX, self.d(26))],
                inner=("aten::_log_softmax",),
                bwd=("LogSoftmaxBackward0", [("aten::_log_softmax_backward_data", [(K_LOGSOFTMAX_BW, 24)])]),
            )
            self.unit(
                "aten::nll_loss_nd",
                [(K_NLL, self.d(9))],
                inner=("aten::nll_loss_forward",),
                bwd=("NllLossBackward0", [("aten::nll_loss_backward", [(K_NLL_BW, 8)])]),
            )
