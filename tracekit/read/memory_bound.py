"""The bound on a ``[memory]`` event's numbers: what one device's allocator can hold.

A ``[memory]`` event's ``Bytes`` is the size of one allocation (negative: a free) and its
``Total Allocated`` and ``Total Reserved`` the device's totals after it, all in bytes of one
device's memory (the GPU's, or the host's for ``Device Type`` 0). The largest accelerators hold
288 GB (2^38), the largest single hosts some tens of TB (2^45): no allocator on one device
counts past 2^50 bytes (1 PiB). A value at or past it (``1e300``, ``2**70``, ``1e400`` read as
infinity) is not a measurement: such an event is dropped on read, with one notice that counts
them, instead of flowing into the sums, peaks and charts of the memory tables. Both readers (the
C scanner and msgspec) fill the same columns; the rule runs on those columns in
:meth:`tracekit.read.columns._FrameBuilder.finish`, so the two agree by construction.
"""

from __future__ import annotations

import numpy as np

from .schema import MEMORY

#: A memory event whose ``Bytes``, ``Total Allocated`` or ``Total Reserved`` is at or past this
#: in magnitude is dropped on read (1 PiB: no device's allocator holds that much).
MAX_MEMORY_BYTES = float(1 << 50)
_FIELDS = ("bytes", "total_allocated", "total_reserved")


def past_memory_bound(parts: list[dict]) -> np.ndarray | None:
    """Needs the builder's parts (each with ``kind``, ``bytes`` per event and the two totals
    per memory event, as ``add_part`` keeps them); gives the mask of events, over all parts in
    order, that are memory events with a number at or past :data:`MAX_MEMORY_BYTES` in
    magnitude (NaN, a value that was not a number, is not), or None when there is none. Reads
    the parts, changes nothing."""
    masks = []
    for p in parts:
        rows = np.flatnonzero(p["kind"] == MEMORY)  # only these are looked at
        mask = np.zeros(len(p["kind"]), dtype=bool)
        for f in _FIELDS:  # NaN compares false: kept
            mask[rows] |= np.abs(p[f][rows] if f == "bytes" else p[f]) >= MAX_MEMORY_BYTES
        masks.append(mask)
    if not any(m.any() for m in masks):
        return None
    return np.concatenate(masks)


def notice(n: int) -> str:
    """The one warning for ``n`` memory events dropped by the bound."""
    return (
        f"dropped {n:,} memory events whose Bytes or Total is 2^50 (1 PiB) or more: no device holds that much"
    )
