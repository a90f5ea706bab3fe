"""Allocator events for :class:`~tracekit.testing.TraceBuilder`: ``[memory]`` instants.

``profile_memory=True`` makes the profiler record each allocation and free of the caching
allocator as an instant event named ``[memory]`` on the thread that made it. Modern Kineto
writes it in category ``cpu_instant_event`` with ``Device Type`` (c10::DeviceType: 0 CPU,
1 CUDA, 6 HIP), ``Device Id`` (-1 for the CPU), ``Addr``, ``Bytes`` (negative for a free),
``Total Allocated`` and ``Total Reserved`` (the allocator's totals after it); torch 1.9's Kineto
wrote no category, no address and no totals (``legacy=True``).

A mixin: the builder supplies the clocks and the state (step, phase, module, op).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from .events import EventWriter
from .truth import MemoryEvent

if TYPE_CHECKING:
    from .device import _State

#: c10::DeviceType values Kineto writes.
CPU, CUDA, HIP = 0, 1, 6
#: Where planted addresses start (any value works; this one looks like a device pointer).
_BASE_ADDR = 0x7F00_0000_0000


class MemoryCalls:
    """The allocator half of the builder (see the module docstring)."""

    w: EventWriter
    _s: _State
    memory_events: list[MemoryEvent]

    if TYPE_CHECKING:

        def at(self, us: float) -> int: ...
        def _module(self) -> str | None: ...

    def _init_memory(self) -> None:
        """Per (device type, device): bytes allocated, bytes reserved (the highest allocation
        so far), live blocks (size -> addresses); the events planted."""
        self._allocated: dict[tuple[int, int], int] = defaultdict(int)
        self._reserved: dict[tuple[int, int], int] = defaultdict(int)
        self._live: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
        self._next_addr = _BASE_ADDR
        self.memory_events = []

    def memory(
        self,
        nbytes: int,
        *,
        device: int | None = None,
        device_type: int | None = None,
        at_us: float | None = None,
        addr: int | None = None,
        total_allocated: int | None = None,
        total_reserved: int | None = None,
        legacy: bool = False,
    ) -> MemoryEvent:
        """An allocation of ``nbytes`` (a free when negative) on GPU ``device`` (None: the CPU),
        now on the current thread (or at ``at_us``), as a ``[memory]`` instant event.

        ``device_type``: c10's device type (default CUDA for a device, CPU without one).
        ``addr``: an allocation gets a fresh address; a free takes the last live allocation of
        its size on that device. The totals default to the running sums the builder keeps per
        device (reserved: the highest allocation so far); given, they are written as given.
        ``legacy``: torch 1.9's form (no category, no address, no totals). Returns the planted
        event (:class:`~tracekit.testing.truth.MemoryEvent`), also in :attr:`memory_events`.
        """
        dtype = device_type if device_type is not None else (CPU if device is None else CUDA)
        did = -1 if device is None else device
        key = (dtype, did)
        addr = self._address(self._live[key], nbytes, addr)
        self._allocated[key] += nbytes
        self._reserved[key] = max(self._reserved[key], self._allocated[key])
        talloc = self._allocated[key] if total_allocated is None else total_allocated
        tres = self._reserved[key] if total_reserved is None else total_reserved
        ts = self.at(at_us) if at_us is not None else self.w.t[self._s.tid]
        where = {"name": "[memory]", "pid": self.w.pid, "tid": self._s.tid, "ts": self.w.ts(ts)}
        if legacy:
            args = {"Device Type": dtype, "Device Id": did, "Bytes": nbytes}
            self.w.events.append({"ph": "i", "s": "t", **where, "args": args})
        else:
            args = {"Ev Idx": len(self.memory_events), "Device Type": dtype, "Device Id": did, "Addr": addr,
                    "Bytes": nbytes, "Total Allocated": talloc, "Total Reserved": tres}  # fmt: skip
            self.w.events.append({"ph": "i", "cat": "cpu_instant_event", "s": "t", **where, "args": args})
        planted = MemoryEvent(
            ts=ts,
            bytes=nbytes,
            device_type=dtype,
            device_id=did,
            addr=None if legacy else addr,
            total_allocated=None if legacy else talloc,
            total_reserved=None if legacy else tres,
            step=self._s.step,
            phase=self._s.phase,
            module=self._module(),
            op=self._s.ops[-1].name if self._s.ops else None,
        )
        self.memory_events.append(planted)
        return planted

    def _address(self, live: dict[int, list[int]], nbytes: int, addr: int | None) -> int:
        """The address of an allocation (fresh unless given) or a free (the last live block of
        its size unless given); the live blocks are updated."""
        if nbytes >= 0:
            if addr is None:
                addr, self._next_addr = self._next_addr, self._next_addr + max(512, -(-nbytes // 512) * 512)
            live[nbytes].append(addr)
            return addr
        blocks = live[-nbytes]
        if addr is None:
            if blocks:
                return blocks.pop()
            addr, self._next_addr = self._next_addr, self._next_addr + 512
            return addr
        if addr in blocks:
            blocks.remove(addr)
        return addr
