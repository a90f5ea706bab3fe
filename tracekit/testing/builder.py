""":class:`TraceBuilder`: a real Kineto-shaped trace in a few lines, with exact planted times.

    from tracekit.testing import TraceBuilder
    b = TraceBuilder()
    with b.step():
        with b.module("LlamaMLP", "model.layers.0.mlp"):
            mm = b.kernel(GEMM_A, dur_us=10, op="aten::mm")
        with b.backward():
            b.kernel(GEMM_NN, dur_us=20, op="aten::mm", creator=mm)
        with b.optimizer():
            b.kernel(K_ADAM, dur_us=5, op="aten::_fused_adam_")
    b.write(tmp_path / "rank0.pt.trace.json")

Every device activity is also recorded in :attr:`TraceBuilder.activities` with the labels it
was meant to get (step, phase, module, planted category...), in integer nanoseconds.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from tracekit.annotations import module_range, phase_range

from .device import DeviceCalls, _State
from .document import document, write_trace
from .events import (
    COMPUTE_STREAM,
    EPOCH_NS,
    EventWriter,
)
from .host import HostCalls
from .memory import MemoryCalls
from .truth import Activity, Kernel, MemoryEvent, Op

__all__ = ["Kernel", "MemoryEvent", "Op", "TraceBuilder"]

MODULE_EVENTS = ("nn_module", "capture", "both", "none")
#: The shape args ``record_shapes=True`` writes on an op, in the order Kineto writes them.
SHAPE_ARGS = {
    "concrete_inputs": "Concrete Inputs",
    "input_types": "Input type",
    "input_strides": "Input Strides",
    "input_dims": "Input Dims",
}


def _node_name(op_name: str) -> str:
    """The autograd node a forward op creates: ``aten::mm`` -> ``MmBackward0``."""
    base = op_name.rsplit("::", maxsplit=1)[-1].strip("_")
    return "".join(p.capitalize() for p in base.split("_") if p) + "Backward0"


class TraceBuilder(DeviceCalls, MemoryCalls, HostCalls):
    """Build one rank's Kineto trace: steps, modules, ops, kernels, backward, comm, optimizer.

    ``modules``: how module ranges are recorded: ``"nn_module"`` (python_function
    ``nn.Module: Cls_N`` events, as ``with_stack=True`` writes them), ``"capture"``
    (``tracekit.module:``/``tracekit.phase:`` annotations, as ``tracekit capture`` writes them),
    ``"both"`` or ``"none"``. ``autograd_thread``: backward runs on a ``pt_autograd_0`` thread
    (else on the main thread). ``flows``: write ``fwdbwd`` flows from forward op to backward
    node (else only ``Sequence number`` / ``Fwd thread id`` link them). ``jitter_seed``: add
    0-9 ns of CPU jitter (device times stay exact). ``legacy``: backward as the legacy
    ``torch.autograd.profiler`` and Kineto before torch 1.9 record it: nodes named
    ``AddmmBackward`` (no ``0``), no ``Sequence number`` or ``Fwd thread id``, no
    ``evaluate_function`` and no ``fwdbwd`` flows. ``fwd_thread_id``: ``"real"`` (forward ops
    carry ``Fwd thread id`` 0, backward nodes 1, as PyTorch writes them) or ``"tid"`` (forward
    ops none, backward nodes the main thread's id, as older PyTorch did). ``unique_starts``:
    nudge a device start another activity already has by one quantum. Times are microseconds
    (floats carry ns).
    """

    def __init__(
        self,
        *,
        rank: int = 0,
        world_size: int = 1,
        modules: str = "nn_module",
        autograd_thread: bool = True,
        flows: bool = True,
        ts_format: str = "float",
        big_ids: bool = False,
        old_categories: bool = False,
        first_step: int = 1,
        start_ns: int = EPOCH_NS,
        pid: int = 48213,
        device: int = 0,
        jitter_seed: int | None = None,
        legacy: bool = False,
        fwd_thread_id: str = "real",
        unique_starts: bool = False,
    ) -> None:
        if modules not in MODULE_EVENTS:
            raise ValueError(f"modules must be one of {MODULE_EVENTS}, not {modules!r}")
        if fwd_thread_id not in ("real", "tid"):
            raise ValueError(f"fwd_thread_id must be 'real' or 'tid', not {fwd_thread_id!r}")
        rng = random.Random(jitter_seed) if jitter_seed is not None else None
        self.w = EventWriter(
            ts_format=ts_format,
            big_ids=big_ids,
            old_categories=old_categories,
            rng=rng,
            pid=pid,
            autograd_tid=pid + 88 if autograd_thread else None,
            device=device,
            start_ns=start_ns,
            unique_starts=unique_starts,
        )
        self.rank, self.world_size = rank, world_size
        self.fwd_thread_id = fwd_thread_id
        self.nn_module = modules in ("nn_module", "both")
        self.capture = modules in ("capture", "both")
        self.flows = flows and not legacy
        self.legacy = legacy
        self.origin = self.w.t[self.w.main]
        self.activities: list[Activity] = []
        self.steps: list[int] = []
        self._next_step = first_step
        self._seq = 1
        self._s = _State(tid=self.w.main)
        self._instances: dict[str, int] = {}
        self._class_count: dict[str, int] = defaultdict(int)
        self._init_memory()

    # time ------------------------------------------------------------------------------------
    def ns(self, us: float) -> int:
        """``us`` microseconds as integer ns on the trace's time quantum."""
        ns = round(us * 1000)
        if ns % self.w.q:
            raise ValueError(f"{us} us is not a whole microsecond (ts_format='int')")
        return ns

    def cpu(self, us: float) -> None:
        """The current thread spends ``us`` outside any recorded op."""
        self.w.t[self._s.tid] += self.ns(us)

    def idle(self, us: float, stream: int = COMPUTE_STREAM) -> None:
        """Plant an idle gap: the next activity on ``stream`` starts ``us`` after its last end."""
        self.w.stream_end[stream] += self.ns(us)

    def at(self, us: float) -> int:
        """Absolute ns of ``us`` microseconds after the builder's origin (the first CPU time)."""
        return self.origin + self.ns(us)

    # structure -------------------------------------------------------------------------------
    @contextmanager
    def step(self, number: int | None = None) -> Iterator[int]:
        """A ``ProfilerStep#N`` range (numbers count up from ``first_step``); phase: forward."""
        n = self._next_step if number is None else number
        self._next_step = n + 1
        self.steps.append(n)
        first = len(self.activities)
        old = (self._s.step, self._s.phase)
        self._s.step, self._s.phase = n, "forward"
        with self.w.rng_(self.w.main, f"ProfilerStep#{n}", "user_annotation", pre=2, post=2):
            yield n
        self._s.step, self._s.phase = old
        mine = self.activities[first:]
        if mine:  # the device-side projection of the step range, like real traces
            self.w.emit(
                "X",
                "gpu_user_annotation",
                f"ProfilerStep#{n}",
                self.w.device,
                COMPUTE_STREAM,
                min(a.start for a in mine),
                max(a.end for a in mine),
                {"External id": 0},
            )

    @contextmanager
    def module(self, cls: str, qualified: str) -> Iterator[str]:
        """A module's forward call: ``nn.Module: Cls_N`` and/or ``tracekit.module:`` ranges."""
        if qualified not in self._instances:
            self._instances[qualified] = self._class_count[cls]
            self._class_count[cls] += 1
        inst = self._instances[qualified]
        tid = self._s.tid
        with ExitStack() as stack:
            if self.capture:
                stack.enter_context(
                    self.w.rng_(tid, module_range(cls, qualified), "user_annotation", pre=0.8, post=0.6)
                )
            if self.nn_module:
                stack.enter_context(
                    self.w.pyfunc(tid, f"nn.Module: {cls}_{inst}", {"Python module id": inst})
                )
                stack.enter_context(self.w.pyfunc(tid, "torch/nn/modules/module.py(1750): _call_impl"))
            self._s.modules.append(qualified)
            try:
                yield qualified
            finally:
                self._s.modules.pop()

    @contextmanager
    def _phase(self, phase: str, annotation: str | None) -> Iterator[None]:
        old = self._s.phase
        self._s.phase = phase
        with ExitStack() as stack:
            if self.capture:
                stack.enter_context(
                    self.w.rng_(self.w.main, phase_range(phase), "user_annotation", pre=0.5, post=0.5)
                )
            if annotation:
                stack.enter_context(self.w.rng_(self.w.main, annotation, "user_annotation"))
            try:
                yield
            finally:
                self._s.phase = old

    @contextmanager
    def forward(self) -> Iterator[None]:
        """The forward pass (a ``tracekit.phase:forward`` range with capture annotations)."""
        with self._phase("forward", None):
            yield

    @contextmanager
    def optimizer(self, name: str = "Optimizer.step#FusedAdam.step") -> Iterator[None]:
        """An ``Optimizer.step#...`` range: activities launched inside are optimizer time."""
        with self._phase("optimizer", name):
            yield

    @contextmanager
    def zero_grad(self, name: str = "Optimizer.zero_grad#FusedAdam.zero_grad") -> Iterator[None]:
        """An ``Optimizer.zero_grad#...`` range (forward time: it is not the optimizer step)."""
        with self.w.rng_(self.w.main, name, "user_annotation"):
            yield

    @contextmanager
    def backward(self) -> Iterator[None]:
        """``loss.backward()``: the autograd engine runs on its own thread (when it has one)."""
        w, main = self.w, self.w.main
        old = (self._s.tid, self._s.backward, self._s.ops, self._s.modules)
        with self._phase("backward", None):
            w.t[w.auto] = max(w.t[w.auto], w.t[main]) + (w.qz(5000) if w.auto != main else 0)
            self._s.tid, self._s.backward, self._s.ops, self._s.modules = w.auto, True, [], []
            try:
                yield
            finally:
                self._s.tid, self._s.backward, self._s.ops, self._s.modules = old
                w.t[main] = max(w.t[main], w.t[w.auto]) + (w.qz(3000) if w.auto != main else 0)

    @contextmanager
    def label(self, **labels: Any) -> Iterator[None]:
        """Plant expected labels (``category``, ``block``) on the activities launched inside."""
        old = dict(self._s.labels)
        self._s.labels.update(labels)
        try:
            yield
        finally:
            self._s.labels = old

    # ops -------------------------------------------------------------------------------------
    @contextmanager
    def op(
        self,
        name: str,
        args: dict | None = None,
        *,
        input_dims: list | None = None,
        input_types: list | None = None,
        input_strides: list | None = None,
        concrete_inputs: list | None = None,
    ) -> Iterator[Op]:
        """A CPU op (``cpu_op``). Forward ops carry the autograd ``Sequence number`` (ops share
        the number until a top-level op creates its node) and ``Fwd thread id`` 0. The shapes
        (``input_dims=[[8, 4096], [4096, 11008]]``, ``input_types=["c10::BFloat16", ...]``...)
        are written as ``record_shapes=True`` writes them: ``Input Dims``, ``Input type``,
        ``Input Strides``, ``Concrete Inputs``, each value as JSON."""
        given = {
            "input_dims": input_dims,
            "input_types": input_types,
            "input_strides": input_strides,
            "concrete_inputs": concrete_inputs,
        }
        shapes = {k: v for k, v in given.items() if v is not None}
        a: dict[str, Any] = {SHAPE_ARGS[k]: shapes[k] for k in SHAPE_ARGS if k in shapes} | dict(args or {})
        seq = None
        if not self._s.backward:
            seq = self._seq
            if not self.legacy:
                a["Sequence number"] = seq
                if self.fwd_thread_id == "real":
                    a["Fwd thread id"] = 0
        top = not self._s.ops
        with self.w.rng_(self._s.tid, name, "cpu_op", args=a) as box:
            op = Op(
                name=name, tid=self._s.tid, start=box["start"], seq=seq, module=self._module(), shapes=shapes
            )
            self._s.ops.append(op)
            try:
                yield op
            finally:
                self._s.ops.pop()
        if top and seq is not None:
            self._seq += 1

    @contextmanager
    def backward_node(self, creator: Op | Kernel, node: str | None = None) -> Iterator[Op]:
        """The autograd node ``creator``'s forward op made, run by the engine (in backward)."""
        if not self._s.backward:
            raise RuntimeError("backward_node() belongs inside backward()")
        fwd = creator.op if isinstance(creator, Kernel) else creator
        if fwd is None or fwd.seq is None:
            raise ValueError("the creator must be a forward op (or a kernel launched from one)")
        node = node or _node_name(fwd.name)
        if self.legacy:  # AddmmBackward0 -> AddmmBackward
            node = node.rstrip("0123456789")
        fwd_tid = 1 if self.fwd_thread_id == "real" else self.w.main
        args = {} if self.legacy else {"Sequence number": fwd.seq, "Fwd thread id": fwd_tid}
        tid = self._s.tid
        with ExitStack() as engine:
            if not self.legacy:
                engine.enter_context(
                    self.w.rng_(tid, f"autograd::engine::evaluate_function: {node}", args=dict(args))
                )
            with self.w.rng_(tid, node, args=dict(args)) as box:
                op = Op(name=node, tid=tid, start=box["start"], seq=fwd.seq, module=fwd.module)
                self._s.ops.append(op)
                try:
                    yield op
                finally:
                    self._s.ops.pop()
            if self.flows:
                self.w.n_flow += 1
                self.w.flow(
                    "fwdbwd",
                    "fwdbwd",
                    self.w._id(self.w.n_flow),
                    (self.w.pid, fwd.tid, fwd.start),
                    (self.w.pid, tid, box["start"]),
                )

    @contextmanager
    def gradient_hook(self, node: str = "torch::autograd::AccumulateGrad") -> Iterator[None]:
        """The engine running a node with no forward op (``AccumulateGrad``): gradient
        communication launched by its post hook (DDP/ZeRO style) runs in here."""
        if not self._s.backward:
            raise RuntimeError("gradient_hook() belongs inside backward()")
        name = node if self.legacy else f"autograd::engine::evaluate_function: {node}"
        with self.w.rng_(self._s.tid, name):
            yield

    def _module(self) -> str | None:
        if self._s.modules:
            return self._s.modules[-1]
        if self._s.backward and self._s.ops:
            return self._s.ops[0].module  # a backward node's forward module
        return None

    # output ----------------------------------------------------------------------------------
    def window(self, step: int) -> tuple[int, int]:
        """A step's GPU window (ns): first start to last end of the activities launched in it."""
        mine = [a for a in self.activities if a.step == step]
        if not mine:
            raise KeyError(f"step {step} launched no device activity")
        return min(a.start for a in mine), max(a.end for a in mine)

    def trace(self, *, shuffle_seed: int | None = None, distributed: bool = True) -> dict:
        """The Chrome-trace dict (``shuffle_seed``: events in a random order, as files may be)."""
        if not self.w.events:
            raise ValueError("nothing recorded yet")
        return document(
            self.w,
            rank=self.rank,
            world_size=self.world_size,
            shuffle_seed=shuffle_seed,
            distributed=distributed,
        )

    def write(self, path: str | Path, *, form: str = "object", **kwargs: Any) -> Path:
        """Write the trace as ``.json`` or ``.json.gz`` (by suffix); returns the path.
        ``form``: ``"object"`` (a document with ``traceEvents`` and Kineto's header),
        ``"array"`` (the bare array of events, as the Chrome trace event format allows) or
        ``"unterminated"`` (that array with no closing ``]``, as a writer that stopped leaves
        it); the array forms have no header (no ``distributedInfo``, no devices)."""
        return write_trace(path, self.trace(**kwargs), form)
