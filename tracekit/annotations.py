"""Names of the ranges that ``tracekit capture`` records, shared by capture and analysis.

Capture wraps work in ``torch.profiler.record_function`` ranges (``user_annotation`` events in
the trace) so its traces are unambiguous even without Python stacks:

* ``tracekit.phase:<phase>`` with phase one of :data:`PHASES`. Phase ranges apply by *time* to
  every thread of the process (backward kernels are launched from autograd threads that the
  main thread's range does not enclose).
* ``tracekit.module:<ClassName>:<qualified.name>`` around a module's forward, for example
  ``tracekit.module:Linear:model.layers.0.self_attn.q_proj``. These nest like the modules do
  and apply to the thread they were recorded on.

Analysis prefers these ranges over ``nn.Module: X_N`` python_function events when present.
This module must stay free of heavy imports: both layers import it.
"""

from __future__ import annotations

PHASE_PREFIX = "tracekit.phase:"
MODULE_PREFIX = "tracekit.module:"

TRAIN_PHASES = ("forward", "backward", "optimizer")
INFER_PHASES = ("prefill", "decode")
PHASES = TRAIN_PHASES + INFER_PHASES


def phase_range(phase: str) -> str:
    """Name of the range that marks ``phase``."""
    if phase not in PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(PHASES)}")
    return PHASE_PREFIX + phase


def module_range(class_name: str, qualified_name: str) -> str:
    """Name of the range around one module's forward call."""
    return f"{MODULE_PREFIX}{class_name}:{qualified_name}"


def parse_module_range(name: str) -> tuple[str, str] | None:
    """``(class_name, qualified_name)`` of a module range name, else None."""
    if not name.startswith(MODULE_PREFIX):
        return None
    cls, _, qual = name[len(MODULE_PREFIX) :].partition(":")
    return cls, qual


def parse_phase_range(name: str) -> str | None:
    """The phase a phase range name marks, else None."""
    if not name.startswith(PHASE_PREFIX):
        return None
    phase = name[len(PHASE_PREFIX) :]
    return phase if phase in PHASES else None
