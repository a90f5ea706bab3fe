"""Build PyTorch profiler (Kineto) traces with exactly known times, for tests.

``TraceBuilder`` writes a real Kineto-shaped Chrome trace (the event fields PyTorch writes:
``cpu_op`` ranges with ``Sequence number``, runtime launches with ``correlation``, kernels on
streams, ``fwdbwd``/``ac2g`` flows, ``nn.Module`` python_function events or tracekit's capture
annotations, ``record_param_comms``, ``ProfilerStep#N``) that ``tracekit.load`` analyses, and
keeps every planted device activity with the labels it was meant to get
(:class:`~tracekit.testing.truth.Activity`). ``tracekit.testing.strategies`` has hypothesis
strategies (hypothesis is imported only there). Nothing here imports torch.

Takes in: what a test plants (steps, phases, modules, kernels with exact times, ranks).
Gives out: a trace file ``tracekit.load`` reads, and the planted truth to compare the tables
with. Open first: :mod:`tracekit.testing.builder` (``TraceBuilder``). Then
:mod:`~tracekit.testing.truth` (the planted activities and the interval arithmetic of the truth),
:mod:`~tracekit.testing.kernels` (real kernel names), :mod:`~tracekit.testing.events` and
:mod:`~tracekit.testing.document` (the Kineto event shapes, the file around them),
:mod:`~tracekit.testing.device` (device calls), :mod:`~tracekit.testing.strategies`.

See docs/testing.md.
"""

from . import kernels
from .builder import TraceBuilder
from .document import write_trace
from .events import COMM_STREAM, COMPUTE_STREAM, COPY_STREAM, SIDE_STREAM
from .expected import Truth, expected_tables
from .llama import llama_training
from .truth import Activity, Kernel, MemoryEvent, Op, intersect_window, measure, subtract, union

__all__ = [
    "COMM_STREAM",
    "COMPUTE_STREAM",
    "COPY_STREAM",
    "SIDE_STREAM",
    "Activity",
    "Kernel",
    "MemoryEvent",
    "Op",
    "TraceBuilder",
    "Truth",
    "expected_tables",
    "intersect_window",
    "kernels",
    "llama_training",
    "measure",
    "subtract",
    "union",
    "write_trace",
]
