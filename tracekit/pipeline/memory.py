"""Step ``label_memory``: the allocator's ``[memory]`` events, each labelled like the CPU work
around it.

``torch.profiler.profile(profile_memory=True)`` records an instant event for every allocation
(``Bytes`` > 0) and free (``Bytes`` < 0) of the profiled allocators, at the CPU time of the op
that asked for the memory. So a memory event is a point on the CPU timeline, like a launch:
its step, phase and module come from the same functions that label a launch, applied to the
event's process, thread and time (docs/metrics.md, "Memory").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import labels
from .categories import as_categories
from .checks import TraceWarning
from .points import launch_view
from .state import Trace, add_columns, categorical, distinct_rows
from .taxonomy import ModuleTaxonomy

#: The columns :func:`label_memory` adds to ``t.memory`` (read's columns of the events).
LABELS = ["step", "t_ns", "device", "phase", "recompute", "module", "held", "has_addr"]
#: The columns the tables read (:func:`memory_rows`), in time order.
ROW_COLUMNS = [
    "step",
    "t_ns",
    "device",
    "bytes",
    "total_allocated",
    "total_reserved",
    "phase",
    "recompute",
    "module",
    "held",
    "has_addr",
]
#: PyTorch's ``c10::DeviceType`` codes of the devices a memory event names; CUDA and HIP (ROCm)
#: are both ``gpu``. Any other code is ``device<code>``.
DEVICE_TYPES = {0: "cpu", 1: "gpu", 6: "gpu", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia", 20: "privateuse1"}
_DTYPES = {
    "step": np.int64,
    "ts": np.int64,
    "t_ns": np.int64,
    "bytes": np.float64,
    "total_allocated": np.float64,
    "total_reserved": np.float64,
    "recompute": bool,
    "held": bool,
    "has_addr": bool,
}


def label_memory(t: Trace, taxonomy: ModuleTaxonomy) -> Trace:
    """Label every memory event with its step, phase and module category, as a launch there.

    Needs: ``t.memory`` (the MEMORY events, read's columns: ``pid``, ``tid``, ``ts``,
    ``bytes``, ``device_type``, ``device_id``, ``total_allocated``, ``total_reserved``,
    ``addr``); ``t.step_ranges``; ``t.ranges`` with their context
    (:func:`~tracekit.pipeline.nest.nest_cpu_ops`); ``t.modules`` with their categories
    (:func:`~tracekit.pipeline.categories.assign_categories`).
    Adds on ``t.memory`` (:data:`LABELS`): ``step`` (-1 outside every step), ``t_ns`` (since
    its step's ProfilerStep began; no markers: since the first memory event), ``device``
    (``cpu``, ``gpu:N``...), ``phase``, ``recompute``, ``module`` (category), ``held`` (a
    forward allocation still allocated when its forward pass ended), ``has_addr``; meta
    ``memory_events``.
    Guarantees: the step is :func:`~tracekit.pipeline.steps.place_in_steps`' (the launch
    rule), the op stack the nesting sweep's, the backward link, module, phase and category
    those :func:`link_backward`, :func:`work_module`, :func:`assign_phases` and
    :func:`tracekit.labels.module_categories` give a launch at the event's place: one
    category per event, the innermost module's that has one. ``held`` follows the events in
    time order, equal times in file order (:func:`held_at_pass_end`).
    """
    mem = _top_devices(t, t.memory)
    t.meta["memory_events"] = len(mem)
    if not len(mem):
        t.memory = _empty(ROW_COLUMNS + ["ts"])
        return t
    view = launch_view(t, mem)
    a = view.acts
    module, _ = labels.module_categories(view, taxonomy)
    forward = (a["phase"] == "forward").to_numpy()
    step = a["step"].to_numpy()
    device = _devices(mem["device_type"].to_numpy(), mem["device_id"].to_numpy())
    addr = mem["addr"].to_numpy()
    order = time_order(mem)
    held = np.empty(len(mem), bool)
    held[order] = held_at_pass_end(
        step[order], forward[order], device[order], addr[order], mem["bytes"].to_numpy(np.float64)[order]
    )
    labelled = {
        "step": step,
        "t_ns": a["launch_ts"].to_numpy() - _step_start(t, a),
        "device": device,
        "phase": a["phase"].array,
        "recompute": a["recompute"].to_numpy(bool),
        "module": module.categorical(),
        "held": held,
        "has_addr": addr != -1,
    }
    t.memory = add_columns(mem, labelled)
    return t


#: Devices whose memory events are kept (tables, charts): the highest peaks (a node has a few
#: dozen devices at most; 50,000 devices made a 52 MB report with a chart of 100,004 traces).
MAX_DEVICES = 32


def _top_devices(t: Trace, mem: pd.DataFrame) -> pd.DataFrame:
    """``mem`` without the events of devices beyond the :data:`MAX_DEVICES` of the highest
    peak allocation (the highest ``Total Allocated`` or running sum of ``Bytes``), with a
    notice that says how many devices were left out and their highest peak."""
    if not len(mem):
        return mem
    key = distinct_rows(mem["device_type"].to_numpy(), mem["device_id"].to_numpy())[0]
    if key.max() < MAX_DEVICES:
        return mem
    order = time_order(mem)
    running = pd.Series(mem["bytes"].to_numpy(np.float64)[order]).groupby(key[order]).cumsum()
    level = np.fmax(mem["total_allocated"].to_numpy(np.float64)[order], running.to_numpy())
    peak = pd.Series(level).groupby(key[order]).max().sort_values(ascending=False, kind="stable")
    kept = peak.index.to_numpy()[:MAX_DEVICES]
    left = peak.iloc[MAX_DEVICES:]
    t.warnings.append(
        TraceWarning(
            "memory_devices",
            f"memory events name {len(peak)} devices: the {MAX_DEVICES} of the highest peaks are "
            f"shown, {len(left)} left out (their highest peak {_mb(left.max())} MB)",
        )
    )
    return mem[np.isin(key, kept)].reset_index(drop=True)


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.1f}" if np.isfinite(nbytes) else "unknown"


def time_order(mem: pd.DataFrame) -> np.ndarray:
    """The rows of ``mem`` by time, equal times in file order (its row order)."""
    return np.lexsort((np.arange(len(mem)), mem["ts"].to_numpy()))


def _empty(columns: list[str]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=_DTYPES.get(c, "category")) for c in columns})


def no_rows() -> pd.DataFrame:
    """The memory rows of a trace with no memory event (:func:`memory_rows`' columns)."""
    return _empty(ROW_COLUMNS)


def memory_rows(memory: pd.DataFrame, steps: pd.Series) -> pd.DataFrame:
    """The labelled memory events of ``steps`` (the complete ones) in time order, with the
    columns the tables read (:data:`ROW_COLUMNS`), label columns as categoricals of the values
    present."""
    order = time_order(memory)
    rows = order[memory["step"].isin(steps).to_numpy()[order]]
    out = memory[ROW_COLUMNS].iloc[rows].reset_index(drop=True)  # only those columns are copied
    return as_categories(out, ("device", "phase", "module"))


def _step_start(t: Trace, a: pd.DataFrame) -> np.ndarray:
    """Per event, the start of its step's ProfilerStep range (no markers: the first memory
    event; outside every step: its own time)."""
    ts = a["launch_ts"].to_numpy()
    rng = t.step_ranges
    if not len(rng):
        return np.full(len(ts), ts.min(), np.int64)
    first = rng.drop_duplicates("step").set_index("step")["cpu_start"]
    # integer ns throughout: epoch-scale times through float64 were off by up to 256 ns
    pos = first.index.get_indexer(a["step"].to_numpy())
    starts = first.to_numpy(np.int64)
    return np.where(pos >= 0, starts[np.maximum(pos, 0)] if len(starts) else ts, ts).astype(np.int64)


def _devices(kind: np.ndarray, index: np.ndarray) -> pd.Categorical:
    """``cpu``, ``gpu:N`` (CUDA, HIP), ``xpu:N``...: named once per distinct (type, id)."""
    key, first = distinct_rows(kind, index)
    names = []
    for k, i in zip(kind[first].tolist(), index[first].tolist()):
        base = DEVICE_TYPES.get(k, f"device{k}")
        names.append(base if base == "cpu" else f"{base}:{i}")
    # every distinct device is some event's: the categories of its few names are the events'
    few = categorical(np.asarray(names, dtype=object))
    return pd.Categorical.from_codes(np.asarray(few.codes)[key], dtype=few.dtype, validate=False)


def held_at_pass_end(
    step: np.ndarray, forward: np.ndarray, device: pd.Categorical, addr: np.ndarray, nbytes: np.ndarray
) -> np.ndarray:
    """Per event (in time order): a forward allocation whose block is still allocated when its
    forward pass ends. The pass ends at the step's first later event that is not forward (the
    backward of its micro-batch, the optimizer), else with the step; the block is freed at the
    next event of the same device and address (a free, or a new allocation there, which shows
    the free was missed). Events without an address (torch 1.9) are never held."""
    n = len(step)
    pos = np.arange(n, dtype=np.int64)
    order = np.lexsort((pos, step))  # by step, then time
    # In that order: the first non-forward event at or after each event (n: none), and the
    # last event of its step; the pass ends at the former if in the step, else after the latter.
    nxt = np.minimum.accumulate(np.where(forward[order], n, pos)[::-1])[::-1]
    last = _group_last(step[order])
    pass_end = np.empty(n, np.int64)
    pass_end[order] = np.where(nxt <= last, order[np.minimum(nxt, n - 1)], order[last] + 1)
    # The next event of the same device and address.
    known = addr != -1
    dev = np.asarray(device.codes, np.int64)
    by_block = np.lexsort((pos, addr, dev))
    k = by_block[known[by_block]]
    freed = np.full(n, np.iinfo(np.int64).max, np.int64)
    follows = (dev[k][1:] == dev[k][:-1]) & (addr[k][1:] == addr[k][:-1])
    freed[k[:-1][follows]] = k[1:][follows]
    return forward & known & (nbytes > 0) & (step >= 0) & (freed >= pass_end)


def _group_last(s: np.ndarray) -> np.ndarray:
    """Per element of a sorted key array, the index of the last element with its key."""
    n = len(s)
    ends = np.flatnonzero(np.r_[s[1:] != s[:-1], True])
    return ends[np.searchsorted(ends, np.arange(n))]
