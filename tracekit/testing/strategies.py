"""Hypothesis strategies: random valid training traces with their planted truth.

``plans()`` draws a :class:`Plan`: plain data (steps of forward units in modules, backward
nodes linked to their forward ops, overlapping communication, copies, idle gaps, an optional
optimizer) that :meth:`Plan.build` turns into a :class:`~tracekit.testing.TraceBuilder`. Building
the same plan with other trace options (``start_ns``, ``big_ids``, ``ts_format``...) plants the
same device times, which is what invariance properties need. ``planted_traces()`` draws built
ones. Importing this module imports hypothesis (the ``test`` extra); ``tracekit.testing`` does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from . import kernels as k
from .builder import Kernel, TraceBuilder
from .events import COMPUTE_STREAM, SIDE_STREAM

__all__ = ["Plan", "PlannedStep", "Unit", "plans", "planted_traces"]

# (module class, qualified-name template, forward kernel, launching op)
MODULES = [
    ("Embedding", "model.embed_tokens", k.K_INDEX, "aten::embedding"),
    ("LlamaRMSNorm", "model.layers.{i}.input_layernorm", k.K_MUL, "aten::mul"),
    ("Linear", "model.layers.{i}.self_attn.q_proj", k.GEMM_A, "aten::mm"),
    ("Linear", "model.layers.{i}.self_attn.o_proj", k.GEMM_C, "aten::mm"),
    ("LlamaAttention", "model.layers.{i}.self_attn", k.K_FLASH_FWD, "aten::_flash_attention_forward"),
    ("LlamaMLP", "model.layers.{i}.mlp", k.GEMM_B, "aten::mm"),
    ("SiLU", "model.layers.{i}.mlp.act_fn", k.K_SILU, "aten::silu"),
    ("Linear", "lm_head", k.GEMM_C, "aten::mm"),
    (None, "", k.K_LOGSOFTMAX, "aten::_log_softmax"),  # the loss: outside every module
]
COLLECTIVES = ["AllReduce", "AllGather", "ReduceScatter", "Broadcast"]


@dataclass
class Unit:
    """A forward kernel in a module; ``backward``: its node's kernel time (None: no node)."""

    module: int
    layer: int
    dur_ns: int
    gap_ns: int
    stream: int
    backward: int | None
    backward_gap_ns: int


@dataclass
class PlannedStep:
    units: list[Unit]
    comm: list[tuple[str, str, int, int]]  # (phase, collective, dur_ns, gap_ns)
    memcpy_ns: int | None
    optimizer_ns: list[int]


@dataclass
class Plan:
    """Plain data for one rank's trace; ``options``: the TraceBuilder's keyword arguments."""

    steps: list[PlannedStep]
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, **overrides: Any) -> TraceBuilder:
        b = TraceBuilder(**{**self.options, **overrides})
        for s in self.steps:
            with b.step():
                made = _forward(b, s)
                _backward(b, s, made)
                if s.optimizer_ns:
                    with b.optimizer():
                        for ns in s.optimizer_ns:
                            b.kernel(k.K_ADAM, ns / 1000, op="aten::_fused_adam_")
        return b


def _forward(b: TraceBuilder, s: PlannedStep) -> list[tuple[Unit, Kernel]]:
    made = []
    if s.memcpy_ns is not None:
        b.memcpy(s.memcpy_ns / 1000, "HtoD")
    for u in s.units:
        cls, qual, kname, op = MODULES[u.module]
        qual = qual.format(i=u.layer)
        if cls is None:
            kern = b.kernel(kname, u.dur_ns / 1000, op=op, stream=u.stream, gap_us=u.gap_ns / 1000)
        else:
            with b.module(cls, qual):
                kern = b.kernel(kname, u.dur_ns / 1000, op=op, stream=u.stream, gap_us=u.gap_ns / 1000)
        made.append((u, kern))
    for phase, coll, dur, gap in s.comm:
        if phase == "forward":
            b.comm(coll, dur / 1000, gap_us=gap / 1000)
    return made


def _backward(b: TraceBuilder, s: PlannedStep, made: list[tuple[Unit, Kernel]]) -> None:
    nodes = [(u, kern) for u, kern in reversed(made) if u.backward is not None]
    comm = [c for c in s.comm if c[0] == "backward"]
    if not nodes and not comm:
        return
    with b.backward():
        for u, kern in nodes:
            assert u.backward is not None
            name, op = (k.GEMM_NN, "aten::mm") if kern.activity.gemm else (k.K_MUL, "aten::mul")
            b.kernel(name, u.backward / 1000, op=op, creator=kern, gap_us=u.backward_gap_ns / 1000)
        for _, coll, dur, gap in comm:
            with b.gradient_hook():
                b.comm(coll, dur / 1000, gap_us=gap / 1000)


def _ns(lo_us: int, hi_us: int, whole_us: bool) -> st.SearchStrategy[int]:
    if whole_us:
        return st.integers(lo_us, hi_us).map(lambda us: us * 1000)
    return st.integers(lo_us * 1000, hi_us * 1000)


@st.composite
def _units(draw: st.DrawFn, whole_us: bool) -> Unit:
    return Unit(
        module=draw(st.integers(0, len(MODULES) - 1)),
        layer=draw(st.integers(0, 2)),
        dur_ns=draw(_ns(1, 200, whole_us)),
        gap_ns=draw(st.one_of(st.just(0), _ns(0, 40, whole_us))),
        stream=draw(st.sampled_from([COMPUTE_STREAM, COMPUTE_STREAM, COMPUTE_STREAM, SIDE_STREAM])),
        backward=draw(st.one_of(st.none(), _ns(1, 300, whole_us))),
        backward_gap_ns=draw(st.one_of(st.just(0), _ns(0, 40, whole_us))),
    )


@st.composite
def _steps(draw: st.DrawFn, whole_us: bool, max_units: int) -> PlannedStep:
    units = draw(st.lists(_units(whole_us), min_size=1, max_size=max_units))
    comm = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["forward", "backward"]),
                st.sampled_from(COLLECTIVES),
                _ns(1, 150, whole_us),
                _ns(0, 60, whole_us),
            ),
            max_size=3,
        )
    )
    memcpy = draw(st.one_of(st.none(), _ns(1, 30, whole_us)))
    opt = draw(st.lists(_ns(1, 80, whole_us), max_size=2))
    return PlannedStep(units=units, comm=comm, memcpy_ns=memcpy, optimizer_ns=opt)


@st.composite
def plans(draw: st.DrawFn, max_steps: int = 3, max_units: int = 8) -> Plan:
    """A random valid plan: 1..max_steps steps, each with 1..max_units forward kernels."""
    options = {
        "modules": draw(st.sampled_from(["nn_module", "capture", "both"])),
        "autograd_thread": draw(st.booleans()),
        "flows": draw(st.booleans()),
        "ts_format": draw(st.sampled_from(["float", "int"])),
        "big_ids": draw(st.booleans()),
        "old_categories": draw(st.booleans()),
        "jitter_seed": draw(st.one_of(st.none(), st.integers(0, 2**16))),
    }
    whole_us = options["ts_format"] == "int"
    steps = draw(st.lists(_steps(whole_us, max_units), min_size=1, max_size=max_steps))
    return Plan(steps=steps, options=options)


def planted_traces(max_steps: int = 3, max_units: int = 8) -> st.SearchStrategy[TraceBuilder]:
    """Built traces: ``TraceBuilder``s whose ``activities`` are the planted truth."""
    return plans(max_steps=max_steps, max_units=max_units).map(lambda p: p.build())
