"""Step ``label_host_idle``: when no stream was busy, what the launching thread was doing.

A device-level gap is a time when no device activity of any stream runs: in start order over
all streams, from the end of the activity that ended last so far to the start of the next
activity B. The host side of the gap is B's launching thread at the gap's start: the CPU op
open there (innermost, and its top op), its module category and its op family
(:data:`FAMILIES`), labelled by the same functions that label a launch there (as the memory
events are, :mod:`tracekit.pipeline.memory`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from . import labels
from .points import launch_view
from .state import Trace, add_columns, take
from .taxonomy import ModuleTaxonomy

#: The op families, in the order they are tested (the first that holds names the gap).
FAMILIES = (
    "launch_in_flight",  # B's launch call began before the gap: the host was not late
    "sync",  # in a synchronising op (aten::item...): the host waited for the device
    "data_loader",  # in the data loader's next batch
    "collective_wait",  # inside a collective or waiting on one
    "optimizer",  # the optimizer's Python (under Optimizer.step / zero_grad, optimizer phase)
    "other_op",  # in any other op
    "no_op",  # in no CPU op: no launch in flight
)
#: Ops that wait for the device (their value is read on the host).
SYNC_OPS = (
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::is_nonzero",
    "aten::nonzero",
    "aten::equal",
    "aten::masked_select",
    "aten::tolist",
)
COLLECTIVE_PREFIXES = ("c10d::", "record_param_comms", "nccl:", "gloo:", "ProcessGroup")
COLUMNS = ("host_gap_lo", "host_family", "host_op", "host_module")


def device_gaps(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per activity (any order): the start of the device-level gap that ends at its start, and
    whether there is one (no activity of any stream ran in between; none before the first)."""
    order = np.lexsort((end, start))
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e) if len(e) else e
    prev = np.r_[np.int64(0), reach[:-1]] if len(e) else reach
    has = np.zeros(len(s), bool)
    has[1:] = s[1:] > prev[1:]
    lo, gap = np.full(len(s), -1, np.int64), np.zeros(len(s), bool)
    lo[order], gap[order] = np.where(has, prev, -1), has
    return lo, gap


def _on_rows(cat: pd.Categorical, test) -> np.ndarray:
    """Per row of ``cat``, ``test`` of its value, evaluated once per distinct value."""
    hit = np.append(np.asarray(test(pd.Series(np.asarray(cat.categories, dtype=object))), bool), False)
    return hit[np.asarray(cat.codes)]


def _family(view: Trace, top: pd.Categorical) -> np.ndarray:
    """Per gap whose host was late, its index in :data:`FAMILIES` (from ``sync`` on)."""
    a = view.acts
    op = pd.Categorical(a["op"])
    tests = {
        "sync": lambda s: s.isin(SYNC_OPS),
        "data_loader": lambda s: s.str.contains("DataLoader", regex=False),
        "collective_wait": lambda s: s.str.startswith(COLLECTIVE_PREFIXES),
    }
    hits = [_on_rows(op, f) | _on_rows(top, f) for f in tests.values()]
    hits[2] = hits[2] | (a["comm_r"].to_numpy() >= 0)
    optimizer = _on_rows(pd.Categorical(a["phase"]), lambda s: s == "optimizer")
    optimizer = optimizer | _on_rows(top, lambda s: s.str.startswith("Optimizer."))
    conds = [*hits, optimizer, a["top_r"].to_numpy() >= 0]
    return np.select(conds, np.arange(1, len(conds) + 1), default=len(conds) + 1)


def _full(values: pd.Categorical, rows: np.ndarray, n: int) -> pd.Categorical:
    """A categorical of ``n`` rows: ``values`` on ``rows``, "" elsewhere."""
    cats = pd.Index(np.asarray(values.categories, dtype=object)).append(pd.Index([""], dtype=object))
    cats = cats.unique()
    codes = np.full(n, cats.get_loc(""), np.int64)
    own = cats.get_indexer(np.asarray(values.categories, dtype=object))
    vcodes = np.asarray(values.codes)
    codes[rows] = np.where(vcodes >= 0, np.append(own, 0)[vcodes], cats.get_loc(""))
    return pd.Categorical.from_codes(codes, categories=cats)


def label_host_idle(t: Trace, taxonomy: ModuleTaxonomy) -> Trace:
    """Label every device-level gap with what B's launching thread was doing at its start.

    Needs: ``acts.start``, ``end``, ``launched``, ``launch_pid``, ``launch_tid``,
    ``launch_ts``; ``t.ranges`` with their context (:func:`~tracekit.pipeline.nest.nest_cpu_ops`);
    ``t.step_ranges``; ``t.modules`` with their categories.
    Adds on ``acts`` (:data:`COLUMNS`): ``host_gap_lo`` (the start of the device-level gap
    that ends at this activity's start, ns; -1 none), ``host_family`` (:data:`FAMILIES`),
    ``host_op`` (the innermost CPU op open on the launching thread at the gap's start),
    ``host_module`` (its module category); "" where there is no gap.
    Guarantees: a gap is only labelled when its activity has a launching call (no host side
    otherwise: never a guess); the op stack, module and phase of the point (launching thread,
    gap start) are those a launch there would get; CPU-only traces get no gaps.
    """
    a = t.acts
    n = len(a)
    lo, gap = device_gaps(a["start"].to_numpy(np.int64), a["end"].to_numpy(np.int64))
    gap &= a["launched"].to_numpy(bool) & (t.mode == "gpu")
    family = np.full(n, len(FAMILIES), np.int64)  # "": no gap
    family[gap] = 0  # launch_in_flight, unless the host was late (below)
    late = np.flatnonzero(gap & (a["launch_ts"].to_numpy() > lo))
    op = mod = pd.Categorical(np.zeros(0, object))
    if len(late):  # only a late host's op says why: label the points (thread, gap start)
        pts = pd.DataFrame(
            {"pid": a["launch_pid"].to_numpy()[late], "tid": a["launch_tid"].to_numpy()[late], "ts": lo[late]}
        )
        view = launch_view(t, pts)
        top = t.name_categorical(take(t.ranges["ev"].to_numpy(), view.acts["top_r"].to_numpy(), -1))
        family[late] = _family(view, top)
        op, mod = pd.Categorical(view.acts["op"]), labels.module_categories(view, taxonomy)[0].categorical()
    cols = {
        "host_gap_lo": np.where(gap, lo, -1),
        "host_family": pd.Categorical.from_codes(family, categories=[*FAMILIES, ""]),
        "host_op": _full(op, late, n),
        "host_module": _full(mod, late, n),
    }
    t.acts = add_columns(a, cols)
    return t
