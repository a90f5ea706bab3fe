"""The event schema tracekit decodes from a Kineto trace, and the normalised event kinds.

The msgspec structs name only the fields the pipeline uses (every other key of every event is
skipped by the decoder, never materialised); ``_CATEGORY_KIND`` maps every vintage's category
names (``Kernel``/``kernel``, ``Runtime``/``cuda_runtime``, ``Operator``/``cpu_op``...) to one
small int per kind.
"""

from __future__ import annotations

from typing import Any

import msgspec

Number = int | float
Ident = int | str


class Args(msgspec.Struct, gc=False):
    """The ``args`` keys tracekit reads; all others are skipped by the decoder."""

    correlation: Ident | None = None
    seq: Ident | None = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Ident | None = msgspec.field(default=None, name="Fwd thread id")
    stream: Ident | None = None
    collective: str | None = msgspec.field(default=None, name="Collective name")
    bytes: Number | str | None = None
    size: Number | str | None = None  # an MTIA DMA request's bytes (a copy with no ``bytes``)
    name: str | None = None  # metadata events: process / thread names
    # The shapes of an op's inputs, kept as their JSON text (see SHAPE_FIELDS).
    input_dims: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Dims")
    input_types: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Concrete Inputs")
    # A collective's parameters (record_param_comms, and NCCL kernels since torch 2.1), as
    # their JSON text (see COMM_FIELDS).
    in_nelems: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="In msg nelems")
    out_nelems: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Out msg nelems")
    comm_dtype: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="dtype")
    group_size: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Group size")
    pg_name: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Process Group Name")
    pg_desc: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Process Group Description")
    comm_seq: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Seq")
    p2p_src: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Src Rank")
    p2p_dst: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw, name="Dst Rank")
    # ``[memory]`` events (profile_memory=True): see MEMORY.
    alloc_bytes: Number | str | None = msgspec.field(default=None, name="Bytes")
    device_type: Number | str | None = msgspec.field(default=None, name="Device Type")
    device_id: Number | str | None = msgspec.field(default=None, name="Device Id")
    total_allocated: Number | str | None = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Number | str | None = msgspec.field(default=None, name="Total Reserved")
    addr: Ident | None = msgspec.field(default=None, name="Addr")
    # ``cuda_sync`` events: see CUDA_SYNC.
    wait_corr: Ident | None = msgspec.field(default=None, name="wait_on_cuda_event_record_corr_id")
    wait_stream: Ident | None = msgspec.field(default=None, name="wait_on_stream")


class Event(msgspec.Struct, gc=False):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: Ident | None = None
    tid: Ident | None = None
    ts: Number | None = None
    dur: Number | None = None
    id: Ident | None = None
    args: Args | None = None


class TextTimeEvent(msgspec.Struct, gc=False):
    """An :class:`Event` whose ``ts``/``dur`` keep their JSON text (``b""`` when absent): for
    float times too large for float64 to hold their nanosecond decimals (epoch clocks)."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: Ident | None = None
    tid: Ident | None = None
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()
    id: Ident | None = None
    args: Args | None = None


class TraceDoc(msgspec.Struct, gc=False):
    traceEvents: list[Event]
    distributedInfo: dict[str, Any] | None = None
    deviceProperties: list[Any] | None = None
    schemaVersion: Ident | None = None
    baseTimeNanoseconds: int | None = None
    host_name: str | None = None


class TextTimeDoc(TraceDoc, gc=False):
    traceEvents: list[TextTimeEvent]  # type: ignore[assignment]


#: The ``args`` recorded with ``record_shapes=True``, each an event column of the same name
#: (:class:`Args`' field) holding the value's JSON text exactly as the file writes it
#: (whitespace and escapes included), ``""`` when absent, null or not UTF-8: shapes repeat, so
#: the columns are categorical and a reader parses each distinct text once.
SHAPE_FIELDS = {
    "input_dims": "Input Dims",
    "input_types": "Input type",
    "input_strides": "Input Strides",
    "concrete_inputs": "Concrete Inputs",
}

#: A collective's parameters, kept as raw JSON text like SHAPE_FIELDS (one column each; parsed
#: per distinct text by :mod:`tracekit.pipeline.comm_args`): message elements in and out, the
#: element type, the group's size, name and description, its sequence number, and a send's or
#: receive's peer (its global rank: ``Dst Rank`` of a send, ``Src Rank`` of a receive).
COMM_FIELDS = {
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "comm_dtype": "dtype",
    "group_size": "Group size",
    "pg_name": "Process Group Name",
    "pg_desc": "Process Group Description",
    "comm_seq": "Seq",
    "p2p_src": "Src Rank",
    "p2p_dst": "Dst Rank",
}
#: Every args value kept as its JSON text, in the native scanner's order (``_kineto.c``).
RAW_FIELDS = {**SHAPE_FIELDS, **COMM_FIELDS}

_DECODER = msgspec.json.Decoder(TraceDoc)
_TEXT_TIME_DECODER = msgspec.json.Decoder(TextTimeDoc)


# Normalised event kinds. Values are small ints in the ``kind`` column.
KERNEL, MEMCPY, MEMSET, RUNTIME, CPU_OP, ANNOTATION, PYTHON, FLOW_LAUNCH, FLOW_FWDBWD, MEMORY, CUDA_SYNC = (
    range(11)
)
KIND_NAMES = [
    "kernel",
    "memcpy",
    "memset",
    "runtime",
    "cpu_op",
    "annotation",
    "python",
    "flow_launch",
    "flow_fwdbwd",
    "memory",
    "cuda_sync",
]
#: MEMORY: an allocation (``Bytes`` > 0) or a free (< 0) of the caching allocator, which
#: ``profile_memory=True`` records as an instant event named ``[memory]``: modern Kineto in
#: category ``cpu_instant_event`` with ``Device Type`` (c10::DeviceType: 0 CPU, 1 CUDA, 6 HIP...),
#: ``Device Id``, ``Addr``, ``Bytes``, ``Total Allocated`` and ``Total Reserved``; torch 1.9's
#: Kineto with no category and no totals. Its columns: ``bytes`` (the signed ``Bytes``),
#: ``device_type``, ``device_id`` (ints, -1 when absent), ``total_allocated``,
#: ``total_reserved`` (float bytes, NaN when absent) and ``addr`` (-1 when absent); the
#: device and total columns hold those args on any kept event that has them.
MEMORY_EVENT = "[memory]"
#: CUDA_SYNC: a synchronisation as the device saw it (category ``cuda_sync``, recent Kineto:
#: "Stream Sync", "Context Sync", "Event Sync", "Stream Wait Event"), ``corr`` its runtime
#: call's correlation, ``stream`` the stream synchronised (or that waits). It has no ``Sequence
#: number`` nor ``Fwd thread id``: their columns hold its ``wait_on_cuda_event_record_corr_id``
#: (``seq``: the correlation of the ``cudaEventRecord`` waited on) and ``wait_on_stream``
#: (``fwd_tid``: the stream that event was recorded on), -1 when absent (no new column, so no
#: cost on traces without them); an event with both of a pair keeps the first.

_CATEGORY_KIND = {
    "kernel": KERNEL,
    "gpu_memcpy": MEMCPY,
    "memcpy": MEMCPY,
    "gpu_memset": MEMSET,
    "memset": MEMSET,
    "cuda_runtime": RUNTIME,
    "runtime": RUNTIME,
    "cuda_driver": RUNTIME,
    "hip_runtime": RUNTIME,
    "mtia_runtime": RUNTIME,
    "privateuse1_runtime": RUNTIME,
    "cpu_op": CPU_OP,
    "operator": CPU_OP,
    "user_annotation": ANNOTATION,
    "python_function": PYTHON,
    "ac2g": FLOW_LAUNCH,
    "async_cpu_to_gpu": FLOW_LAUNCH,
    "async_gpu": FLOW_LAUNCH,
    "fwdbwd": FLOW_FWDBWD,
    "cuda_sync": CUDA_SYNC,
}
#: Categories that exist in real traces and that tracekit deliberately does not use.
_KNOWN_UNUSED = {
    "trace",
    "gpu_user_annotation",
    "cpu_instant_event",
    "overhead",
    "python_function_other",
    "cuda_profiler_range",
    "kineto",
    "",
}

#: MTIA's device events (category ``mtia_ccp_events``, Kineto's MTIA_CCP_EVENTS, an alias of
#: CONCURRENT_KERNEL) are told apart by name: a DMA request is a copy (``args.direction``
#: HOST_TO_DEVICE / DEVICE_TO_HOST, ``args.size``), an event record or wait is synchronisation
#: (a stream waiting on another, no work: not read, as a CUDA stream wait is not), and every
#: other name is an execution on the device's processing elements (``pe_exe``, or the executable
#: a ``runFunction`` call named: ``merge``, ``remote``...): a kernel. docs/metrics.md, "MTIA".
MTIA_DEVICE = "mtia_ccp_events"
MTIA_COPY = ("dma_request",)
MTIA_SYNC = ("event_record", "event_wait")

_NOT_NUMBER = {str, type(None)}  # a decoded ``Number | str | None`` that is no number


def bytes_args(args: list[Args], kinds: list[int]) -> list:
    """Each event's bytes: ``Bytes`` of a memory event, ``size`` of a copy whose ``bytes`` is
    not a number (an MTIA DMA request), else ``bytes`` (the native scanner's rule too)."""
    out = [a.alloc_bytes if k == MEMORY else a.bytes for a, k in zip(args, kinds)]
    for i in [i for i, k in enumerate(kinds) if k == MEMCPY]:
        if type(out[i]) in _NOT_NUMBER:
            out[i] = args[i].size
    return out


def device_kind(categories: list[str]) -> str:
    """What a trace's device is, by the categories of its device events (the reader's
    ``device_categories``): ``mtia`` (MTIA's :data:`MTIA_DEVICE`), ``gpu`` (CUDA, ROCm) or, with
    none, ``cpu``."""
    if not categories:
        return "cpu"
    return "mtia" if MTIA_DEVICE in categories else "gpu"


#: python_function events kept: module frames and the rotary helper; the rest are dropped.
_PYTHON_KEEP_PREFIX = "nn.Module: "
_PYTHON_KEEP_SUBSTR = ("apply_rotary_pos_emb", "rotary")
#: DeepSpeed engine frames: engine.backward / engine.step are phase evidence (pipeline/evidence).
_PYTHON_KEEP_ENGINE = "deepspeed/runtime/engine.py("
#: The frames of a ``backward()`` call (``loss.backward()``, ``torch.autograd.backward``, the
#: engine call): what runs inside them outside any node is backward (pipeline/evidence).
_PYTHON_KEEP_AUTOGRAD = ("torch/_tensor.py(", "torch/autograd/__init__.py(", "torch/autograd/graph.py(")
_PYTHON_KEEP_ENGINE_CALL = "<built-in method run_backward of torch._C._EngineBase"


def _autograd_frame(name: str) -> bool:
    """A Python frame of a ``backward()`` call (see :data:`_PYTHON_KEEP_AUTOGRAD`)."""
    if name.startswith(_PYTHON_KEEP_ENGINE_CALL):
        return True
    return name.endswith((": backward", ": _engine_run_backward")) and any(
        p in name for p in _PYTHON_KEEP_AUTOGRAD
    )


#: What :func:`event_class` says of events that are not kept as a kind: metadata (process and
#: thread names), skipped quietly, or of an unknown category (counted in a warning).
METADATA, SKIP, UNKNOWN = -1, -2, -3


def event_class(ph: str | None, cat: str | None, name: str | None) -> int:
    """The kind of an event with this ``ph``, ``cat`` and ``name`` (``None`` when absent or
    null), or :data:`METADATA`, :data:`SKIP` or :data:`UNKNOWN`: the one definition of which
    events tracekit keeps, for the msgspec reader (per event) and the native one (per distinct
    triple)."""
    if ph == "M":
        return METADATA
    if name == MEMORY_EVENT and ph in ("i", "I"):  # whatever the category, or none (torch 1.9)
        return MEMORY
    if cat is None:
        return SKIP
    if cat == MTIA_DEVICE:
        return _mtia_class(ph, name)
    kind = _CATEGORY_KIND.get(cat)
    if kind is None:
        kind = _CATEGORY_KIND.get(cat.lower())
        if kind is None:
            return SKIP if cat.lower() in _KNOWN_UNUSED else UNKNOWN
    if kind == PYTHON:
        name = name or ""
        if name.startswith((_PYTHON_KEEP_PREFIX, _PYTHON_KEEP_ENGINE)) or "rotary" in name:
            return kind  # ("apply_rotary_pos_emb" contains "rotary": _PYTHON_KEEP_SUBSTR)
        if _autograd_frame(name):
            return kind
        return SKIP
    if kind <= CPU_OP or kind in (ANNOTATION, CUDA_SYNC):
        return kind if ph == "X" else SKIP
    if kind == FLOW_LAUNCH or ph not in ("s", "f", "t"):
        return SKIP  # launches are linked by correlation id, not by flow events
    return kind


def _mtia_class(ph: str | None, name: str | None) -> int:
    """The kind of an MTIA device event (:data:`MTIA_DEVICE`): complete events only."""
    if ph != "X" or name in MTIA_SYNC:
        return SKIP
    return MEMCPY if name in MTIA_COPY else KERNEL


def flow_phase(ph: str | None) -> str:
    """The ``flow_ph`` column's value for an event's ``ph``."""
    return ph if ph in ("s", "f", "t") else ""
