"""A whole Llama-style training trace with its planted truth, in one call.

    from tracekit.testing import llama_training, write_trace
    trace, truth = llama_training(n_layers=2, n_steps=2)
    write_trace(tmp_path / "rank0.pt.trace.json.gz", trace)
    truth.per_step["phases"]      # what tracekit's phases table must show, per step

:func:`llama_training` builds, on a :class:`~tracekit.testing.TraceBuilder`, N training steps of
a Llama-style decoder as DeepSpeed/ZeRO runs it on one rank of eight: input copies and a
parameter gather, the embedding, rotary tables on a side stream, N decoder layers (RMSNorm,
attention, MLP) with idle gaps between them, the loss; backward on the autograd thread, with
gradient collectives from the ``AccumulateGrad`` hooks (one hidden under the next layer's
compute, one partly exposed, the last bucket running into the optimizer); a FusedAdam step.
Every kernel has a real kernel name; steps and layers differ in duration. The options vary how
the trace records it (module events, threads, timestamp format, ids, categories, order). The
:class:`~tracekit.testing.expected.Truth` it returns holds the planted activities and the
expected tables (:func:`~tracekit.testing.expected.expected_tables`).
"""

from __future__ import annotations

from typing import Any

from .builder import TraceBuilder
from .events import COMM_STREAM, COMPUTE_STREAM
from .expected import Truth, expected_tables
from .kernels import K_ADAM, K_ADD, K_FILL, NCCL_AR, NCCL_GENERIC
from .llama_forward import RPC, Forward

__all__ = ["llama_training"]


def llama_training(
    n_layers: int = 2,
    n_steps: int = 2,
    *,
    attention: str = "eager",
    modules: str = "nn_module",
    autograd_thread: bool = True,
    fwd_thread_id: str = "real",
    comm: bool = True,
    forward_allgather: bool = True,
    side_stream: bool = True,
    rotary_module: bool = True,
    zero_grad: bool = True,
    optimizer: bool = True,
    ts_format: str = "float",
    big_ids: bool = False,
    old_categories: bool = False,
    shuffle: bool = False,
    seed: int = 0,
    first_step: int = 5,
) -> tuple[dict, Truth]:
    """The Chrome-trace dict of ``n_steps`` training steps of an ``n_layers`` decoder (numbered
    from ``first_step``), and its :class:`~tracekit.testing.expected.Truth`.

    ``attention``: ``"eager"`` (Bmm0 / Softmax / Bmm1 kernels) or ``"sdpa"`` (flash attention).
    ``modules``: ``"nn_module"`` (``nn.Module`` python_function events, with python frames),
    ``"capture"`` (``tracekit.module:`` / ``tracekit.phase:`` annotations) or ``"both"``.
    ``autograd_thread``: backward on a ``pt_autograd_0`` thread (else on the main thread).
    ``fwd_thread_id``: ``"real"`` (forward ops carry ``Fwd thread id`` 0, backward nodes 1, as
    PyTorch writes them) or ``"tid"`` (forward ops none, backward nodes the main thread's id).
    ``comm``: gradient and parameter collectives (``forward_allgather``: the two forward
    gathers); ``side_stream``: rotary tables on their own stream; ``rotary_module``: a
    ``LlamaRotaryEmbedding`` module; ``zero_grad`` / ``optimizer``: those ranges.
    ``ts_format``, ``big_ids``, ``old_categories``: as :class:`~tracekit.testing.TraceBuilder`;
    ``shuffle``: events in a random order. ``seed``: jitter of CPU and device times.
    """
    if attention not in ("eager", "sdpa") or modules not in ("nn_module", "capture", "both"):
        raise ValueError(f"attention {attention!r} or modules {modules!r} is not an option")
    if fwd_thread_id not in ("real", "tid") or n_layers < 1 or n_steps < 1:
        raise ValueError("fwd_thread_id is 'real' or 'tid'; n_layers and n_steps are at least 1")
    o: dict[str, Any] = dict(locals())
    b = TraceBuilder(
        world_size=8,
        modules=modules,
        autograd_thread=autograd_thread,
        fwd_thread_id=fwd_thread_id,
        ts_format=ts_format,
        big_ids=big_ids,
        old_categories=old_categories,
        first_step=first_step,
        jitter_seed=seed,
        unique_starts=True,
    )
    run = _Training(b, o)
    for i in range(n_steps):
        run.step(i)
    trace = b.trace(shuffle_seed=seed + 1 if shuffle else None)
    per, mean = expected_tables(b.activities, b.steps, n_layers)
    truth = Truth(list(b.steps), n_layers, list(b.activities), per_step=per, mean=mean, config=o)
    return trace, truth


class _Training(Forward):
    """One training step after another: forward (:class:`~tracekit.testing.llama_forward.Forward`),
    backward, optimizer, then the CPU waits for the device."""

    def step(self, i: int) -> None:
        b = self.b
        self.step_scale, self.layer_scale, self.units = 1.0 + 0.17 * i, 1.0, []
        b.cpu(40)
        with b.step(), b.label(block="before", category=None):
            if self.o["zero_grad"]:
                with b.zero_grad():
                    self.unit("aten::zero_", [(K_FILL, self.d(3.1))], inner=("aten::fill_",))
            with b.forward():
                self.forward()
            with b.label(block=None, category=None):
                self.backward()
                if self.o["optimizer"]:
                    self.optimizer()
            with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                b.synchronize()

    def backward(self) -> None:
        """``loss.backward()``: every recorded autograd node in reverse, each layer's gradient
        hooks (``AccumulateGrad``) where the layers change, the last bucket at the end."""
        b = self.b
        with (
            self.frame("torch/_tensor.py(648): backward"),
            self.frame("<built-in method run_backward of torch._C._EngineBase object at 0x7f3a2c1b0e40>"),
            b.backward(),
        ):
            b.idle(self.q(23700 * self.step_scale))  # the device idles before backward
            prev: Any = "head"
            for u in reversed(self.units):
                if prev not in (u.layer, "head"):
                    self.gradient_hooks(prev)
                prev = u.layer
                self.layer_scale = u.scale
                with b.label(category=u.category), b.backward_node(u.creator, u.node):
                    for op, kernels in u.ops:
                        with b.op(op):
                            for name, us in kernels:
                                if name == "memset":
                                    b.memset(self.d(us), op=None)
                                else:
                                    b.kernel(name, self.d(us))
            self.layer_scale = 1.0
            self.gradient_hooks(prev, last=True)

    def gradient_hooks(self, layer: int | None, last: bool = False) -> None:
        """Gradient hooks after a layer's backward: AccumulateGrad, whose post hook (DDP/ZeRO
        style) launches the gradient communication, nested in the node's evaluate_function range."""
        b = self.b
        with b.label(category=None), b.gradient_hook():
            with b.op("torch::autograd::AccumulateGrad"), b.op("aten::add_"):
                b.kernel(K_ADD, self.d(5.5))
            if self.o["comm"]:
                self.gradient_comm(layer, last)

    def gradient_comm(self, layer: int | None, last: bool) -> None:
        b, n_layers = self.b, self.o["n_layers"]
        if layer == n_layers - 1 and not last:  # fully overlapped with the next layer's backward
            with b.op("record_param_comms", args={"Collective name": "allreduce", **RPC}):
                with b.annotation("nccl:all_reduce"):
                    b.collective_kernel(
                        "AllReduce",
                        self.d(36),
                        kernel=NCCL_AR,
                        not_before_us=self.after(self.end(COMPUTE_STREAM) + b.w.qz(800)),
                    )
        elif layer == 0 and not last:  # a generic kernel: the collective only from the CPU side
            with b.op("record_param_comms", args={"Collective name": "reduce_scatter", **RPC}):
                b.collective_kernel(
                    "ReduceScatter",
                    self.d(44),
                    kernel=NCCL_GENERIC,
                    api="cuLaunchKernelEx",
                    not_before_us=self.after(self.end(COMPUTE_STREAM, COMM_STREAM) + b.w.qz(600)),
                )
        elif last:  # the last gradient bucket: exposed, and runs on into the optimizer
            with b.op("record_param_comms", args={"Collective name": "allreduce", **RPC}):
                b.collective_kernel(
                    "AllReduce",
                    self.d(112),
                    kernel=NCCL_AR,
                    not_before_us=self.after(self.end(COMPUTE_STREAM, COMM_STREAM) + b.w.qz(3100)),
                )

    def optimizer(self) -> None:
        """FusedAdam: the gradients zeroed (a memset), two fused Adam kernels."""
        b = self.b
        with b.optimizer():
            with b.op("aten::zero_"), b.op("aten::fill_"):
                b.memset(self.d(1.9), op=None, gap_us=self.q(61300 * self.step_scale))
            with b.op("aten::_fused_adam_"):
                b.kernel(K_ADAM, self.d(41))
                b.kernel(K_ADAM, self.d(39), gap_us=self.q(2200))
