"""Device activity for :class:`~tracekit.testing.TraceBuilder`: kernels, collectives, copies, sets.

A mixin: the builder supplies the clocks (``at``, ``ns``), the CPU side (``op``,
``backward_node``, ``_module``) and the state; these methods launch the device work and record
its planted truth.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .events import COMM_STREAM, COMPUTE_STREAM, COPY_STREAM, EventWriter
from .kernels import MEMCPY_DTOD, MEMCPY_DTOH, MEMCPY_HTOD, MEMSET, NCCL_GENERIC, NCCL_KERNELS
from .truth import Activity, Kernel, Op

_MEMCPY = {"HtoD": MEMCPY_HTOD, "DtoH": MEMCPY_DTOH, "DtoD": MEMCPY_DTOD}
# record_param_comms "Collective name" as torch.distributed writes it
_COLLECTIVE_NAME = {
    "AllReduce": "allreduce",
    "AllGather": "_allgather_base",
    "ReduceScatter": "_reduce_scatter_base",
    "Broadcast": "broadcast",
    "AllToAll": "all_to_all",
    "SendRecv": "send",
    "Reduce": "reduce",
}


@dataclass
class _State:
    step: int | None = None
    phase: str | None = None
    tid: int = 0
    backward: bool = False
    modules: list[str] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    labels: dict[str, Any] = field(default_factory=lambda: {"category": None, "block": None})


class DeviceCalls:
    """The device half of the builder (see the module docstring)."""

    w: EventWriter
    _s: _State
    origin: int
    activities: list[Activity]
    world_size: int

    if TYPE_CHECKING:

        def at(self, us: float) -> int: ...
        def ns(self, us: float) -> int: ...
        def op(
            self,
            name: str,
            args: dict | None = None,
            *,
            input_dims: list | None = None,
            input_types: list | None = None,
            input_strides: list | None = None,
            concrete_inputs: list | None = None,
        ) -> AbstractContextManager[Op]: ...
        def backward_node(
            self, creator: Op | Kernel, node: str | None = None
        ) -> AbstractContextManager[Op]: ...
        def _module(self) -> str | None: ...

    # device activity -------------------------------------------------------------------------
    def _launch(
        self,
        name: str,
        dur_us: float,
        *,
        kind: str,
        stream: int,
        gap_us: float,
        at_us: float | None,
        not_before_us: float | None,
        api: str | None = None,
        collective: str | None = None,
    ) -> Activity:
        """Launch one device activity from the current op and record it with its planted
        labels; a ``collective`` (comm kernel) carries no compute category."""
        comm = collective is not None
        if at_us is not None and not_before_us is not None:
            raise ValueError("at_us (exactly then) or not_before_us (then or later), not both")
        want = None if at_us is None else self.at(at_us)
        soft = None if not_before_us is None else self.at(not_before_us)
        x = self.w.launch(
            self._s.tid,
            name,
            self.ns(dur_us),
            stream=stream,
            gap=self.ns(gap_us),
            start=want if soft is None else soft,
            kind=kind,
            api=api,
        )
        if want is not None and x.start != want:
            raise ValueError(
                f"{name[:40]}: planted start {at_us} us is before its launch or the end "
                f"of stream {stream}'s previous activity; it would start at "
                f"{(x.start - self.origin) / 1000} us"
            )
        lab = self._s.labels
        act = Activity.launched(
            x,
            comm=comm,
            step=self._s.step,
            phase=self._s.phase,
            category=lab["category"] if kind == "kernel" and not comm else None,
            block=lab["block"],
            collective=collective,
            module=self._module(),
            op=self._s.ops[-1].name if self._s.ops else None,
        )
        self.activities.append(act)
        return act

    def _current_op(self) -> Op | None:
        return self._s.ops[-1] if self._s.ops else None

    def kernel(
        self,
        name: str,
        dur_us: float,
        *,
        op: str | None = None,
        creator: Op | Kernel | None = None,
        stream: int = COMPUTE_STREAM,
        gap_us: float = 0,
        at_us: float | None = None,
        api: str | None = None,
        not_before_us: float | None = None,
        **shapes: list,
    ) -> Kernel:
        """A kernel launched by ``op`` (a new CPU op of that name; else the current op).

        It starts ``gap_us`` after ``stream``'s last activity (and after its launch), or exactly
        at ``at_us`` (microseconds after the origin), or at ``not_before_us`` unless its launch
        or its stream is later. In backward, ``creator`` (the forward op or kernel) wraps the
        launch in that op's autograd node. ``shapes``: the new op's ``input_dims=``,
        ``input_types=``, ``input_strides=``, ``concrete_inputs=`` (see :meth:`TraceBuilder.op`).
        """
        if shapes and op is None:
            raise ValueError("shapes belong to a new op: give op= too")
        with ExitStack() as stack:
            if creator is not None:
                stack.enter_context(self.backward_node(creator))
            launching = stack.enter_context(self.op(op, None, **shapes)) if op is not None else None
            act = self._launch(
                name,
                dur_us,
                kind="kernel",
                stream=stream,
                gap_us=gap_us,
                at_us=at_us,
                api=api,
                not_before_us=not_before_us,
            )
        return Kernel(act, launching or self._current_op())

    def comm(
        self,
        collective: str,
        dur_us: float,
        *,
        kernel: str | None = None,
        stream: int = COMM_STREAM,
        gap_us: float = 0,
        at_us: float | None = None,
        not_before_us: float | None = None,
        nelems: int | tuple[int, int] | None = None,
        dtype: str = "BFloat16",
        group: str = "0",
        seq: int | None = None,
        name: str | None = None,
        extra: dict | None = None,
    ) -> Kernel:
        """A collective: ``record_param_comms`` (with its ``Collective name``), an ``nccl:*``
        annotation and the NCCL kernel (``NCCL_GENERIC`` where the name does not say it).
        ``nelems``: its ``In msg nelems`` / ``Out msg nelems`` (one number for both, or a pair;
        None: not recorded), of ``dtype``, in process group ``group`` with sequence number
        ``seq`` (``Seq``; None: not recorded); ``name``: the ``Collective name`` (default: the
        one torch writes for ``collective``); ``extra``: more ``record_param_comms`` args."""
        name = name or _COLLECTIVE_NAME.get(collective, collective.lower())
        args: dict = {
            "Collective name": name,
            "dtype": dtype,
            "Process Group Name": group,
            "Group size": self.world_size,
        }
        if nelems is not None:
            n_in, n_out = nelems if isinstance(nelems, tuple) else (nelems, nelems)
            args |= {"In msg nelems": n_in, "Out msg nelems": n_out}
        if seq is not None:
            args["Seq"] = seq
        args |= extra or {}
        with self.op("record_param_comms", args=args) as rpc:
            tag = name.strip("_")
            with self.w.rng_(self._s.tid, f"nccl:{tag}", "user_annotation"):
                k = self.collective_kernel(
                    collective,
                    dur_us,
                    kernel=kernel,
                    stream=stream,
                    gap_us=gap_us,
                    at_us=at_us,
                    not_before_us=not_before_us,
                )
        return Kernel(k.activity, rpc)

    def p2p(self, direction: str, peer: int, dur_us: float, **kw: Any) -> Kernel:
        """A send (``direction`` ``"send"``) to, or receive (``"recv"``) from, global rank
        ``peer``, as torch's NCCL process group records it: ``record_param_comms`` with
        ``Collective name`` send / recv and ``Dst Rank`` / ``Src Rank``, an ``nccl:send`` /
        ``nccl:recv`` annotation and the ``SendRecv`` kernel; ``kw``: :meth:`comm`'s."""
        key = {"send": "Dst Rank", "recv": "Src Rank"}[direction]
        return self.comm("SendRecv", dur_us, name=direction, extra={key: peer}, **kw)

    def collective_kernel(
        self,
        collective: str,
        dur_us: float,
        *,
        kernel: str | None = None,
        stream: int = COMM_STREAM,
        gap_us: float = 0,
        at_us: float | None = None,
        not_before_us: float | None = None,
        api: str | None = None,
    ) -> Kernel:
        """A collective's kernel alone, launched from the current op (``api``: the launch call,
        e.g. ``cuLaunchKernelEx``): for traces that record a collective otherwise than
        :meth:`comm` does (only ``record_param_comms``, only an ``nccl:*`` range, other names),
        built around it with :meth:`op` and :meth:`annotation`."""
        act = self._launch(
            kernel or NCCL_KERNELS.get(collective, NCCL_GENERIC),
            dur_us,
            kind="kernel",
            stream=stream,
            gap_us=gap_us,
            at_us=at_us,
            api=api,
            collective=collective,
            not_before_us=not_before_us,
        )
        return Kernel(act, self._current_op())

    def memcpy(
        self,
        dur_us: float,
        direction: str = "HtoD",
        *,
        stream: int = COPY_STREAM,
        gap_us: float = 0,
        at_us: float | None = None,
        not_before_us: float | None = None,
        op: str | None = "aten::copy_",
    ) -> Kernel:
        """A ``Memcpy HtoD/DtoH/DtoD`` from an ``op`` (None: the current op)."""
        with ExitStack() as stack:
            o = stack.enter_context(self.op(op)) if op is not None else None
            act = self._launch(
                _MEMCPY[direction],
                dur_us,
                kind="memcpy",
                stream=stream,
                gap_us=gap_us,
                at_us=at_us,
                not_before_us=not_before_us,
            )
        return Kernel(act, o or self._current_op())

    def memset(
        self,
        dur_us: float,
        *,
        stream: int = COMPUTE_STREAM,
        gap_us: float = 0,
        at_us: float | None = None,
        not_before_us: float | None = None,
        op: str | None = "aten::zero_",
    ) -> Kernel:
        """A ``Memset (Device)`` from an ``op`` (None: the current op)."""
        with ExitStack() as stack:
            o = stack.enter_context(self.op(op)) if op is not None else None
            act = self._launch(
                MEMSET,
                dur_us,
                kind="memset",
                stream=stream,
                gap_us=gap_us,
                at_us=at_us,
                not_before_us=not_before_us,
            )
        return Kernel(act, o or self._current_op())

    def synchronize(self) -> None:
        """``cudaStreamSynchronize``: the CPU waits until every planted activity has ended."""
        tid = self._s.tid
        end = max((a.end for a in self.activities), default=self.w.t[tid])
        self.w.runtime_only(tid, "cudaStreamSynchronize", 1)
        self.w.t[tid] = max(self.w.t[tid], end + self.w.qz(1000))
