"""The analysis pipeline of one trace file: named steps, each adding columns to one table.

``run(raw, taxonomy, rules)`` reads as the list of steps. Each step is a function
``step(t: Trace) -> Trace`` documented as "Needs / Adds / Guarantees" (see each module);
docs/architecture.md draws the whole. The result, :class:`Attributed`, holds the labelled
interval table that every table in ``tracekit.analyses`` is a group-by of, and the windows
table of the time engine that every table measures against.

Takes in: one file's :class:`~tracekit.read.reader.RawTrace` and the label rules
(:mod:`~tracekit.pipeline.taxonomy`). Gives out: :class:`Attributed` (intervals, steps,
windows, modules, meta with coverage, warnings).

Open first: this module's :func:`run` (the list of steps), then each step's module in that
order: launches, steps, nest (+ nesting and ``_nesting.c``, the enclosing-range sweep; and
self_time), backward, modules, phases (+ evidence, stages), categories (+ labels, taxonomy),
windows, shares (+ intervals, the one interval library). :mod:`~tracekit.pipeline.state` is the
``Trace`` passed from step to step; :mod:`~tracekit.pipeline.checks` and
:mod:`~tracekit.pipeline.coverage` are the self-checks and the coverage of the evidence chain.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ..perf.devices import Peaks
from ..read.reader import RawTrace
from . import coverage, labels
from .backward import link_backward
from .categories import as_categories, assign_categories
from .comm_args import COLUMNS as COMM_COLUMNS
from .comm_args import label_comm_args
from .comm_peers import COLUMNS as PEER_COLUMNS
from .comm_peers import label_comm_peers
from .critical_pieces import merged
from .critical_step import find_critical_path
from .flops import COLUMNS as PERF_COLUMNS
from .flops import assign_flops, mfu_meta
from .host_idle import COLUMNS as HOST_IDLE_COLUMNS
from .host_idle import label_host_idle
from .launches import join_launches
from .memory import label_memory, memory_rows, no_rows
from .modules import assign_modules
from .nest import nest_cpu_ops
from .phases import assign_phases, assign_stages
from .shares import add_shares
from .state import Trace
from .steps import find_steps
from .taxonomy import KernelRules, ModuleTaxonomy
from .windows import find_windows

__all__ = ["Attributed", "Trace", "analyse", "link", "run"]

#: The columns of the labelled interval table, in order: what tables group by, and the chain
#: of evidence behind each label (launch -> op stack -> module -> phase -> step).
INTERVAL_COLUMNS = [
    "step",
    "start",
    "end",
    "count",
    "comm_calls",
    "name",
    "kind",
    "stream",
    "bytes",
    "group",
    "kernel_category",
    "rule",
    "collective",
    "module",
    "module_rule",
    "block",
    "layer",
    "fwd_pass",
    "is_gemm",
    "phase",
    "stage",
    "window",
    "share_forward",
    "share_backward",
    "share_unattributed",
    "share_optimizer",
    "share_step",
    "corr",
    "runtime",
    "launched",
    "launch_ts",
    "launch_end",
    "step_by",
    "op",
    "op_id",
    "top_op",
    "top_op_id",
    "module_id",
    "module_instance",
    "comm_text",
    "phase_evidence",
    "recompute",
    "backward_node",
    "node",
    "node_seq",
    "bwd_link",
    "fwd_op",
    "fwd_op_id",
    *HOST_IDLE_COLUMNS,
    *COMM_COLUMNS,
    *PEER_COLUMNS,
    *PERF_COLUMNS,
]


@dataclass
class Attributed:
    """One rank, analysed: ``intervals`` (one labelled row per activity of a complete step),
    ``steps`` (per step its device window and phase boundaries), ``windows`` (one row per step
    and window), ``modules`` (module instances), ``memory`` (the memory events of complete
    steps, labelled: :func:`tracekit.pipeline.memory.memory_rows`)."""

    path: str
    mode: str
    intervals: pd.DataFrame
    steps: pd.DataFrame
    windows: pd.DataFrame
    modules: pd.DataFrame = field(default_factory=pd.DataFrame)
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    memory: pd.DataFrame = field(default_factory=no_rows)
    #: The pieces of each complete step's critical path (:mod:`tracekit.pipeline.critical`).
    critical: pd.DataFrame = field(default_factory=merged)

    @property
    def lazy(self) -> bool:
        """True when ``intervals`` are not held here but loaded from a store when read."""
        return not isinstance(self.__dict__["_intervals"], pd.DataFrame)

    def load_intervals(self, columns: list[str] | None = None) -> pd.DataFrame:
        """The intervals (only ``columns`` when given); a lazy rank loads them (each time: they
        are not kept here) from its store, an object with ``load(columns) -> DataFrame``."""
        held = self.__dict__["_intervals"]
        if isinstance(held, pd.DataFrame):
            return held if columns is None else held[columns]
        return held.load(columns)


def _get_intervals(self: Attributed) -> pd.DataFrame:
    return self.load_intervals()


def _set_intervals(self: Attributed, value) -> None:
    self.__dict__["_intervals"] = value


# ``intervals`` is a DataFrame, or a store of one (the result cache's handle, see
# tracekit.ranks.results) that is read on access: a parent process then holds no rank's intervals
# until something asks for them. The dataclass field is kept for the constructor and replace().
Attributed.intervals = property(_get_intervals, _set_intervals)


def _frame_field(name: str) -> property:
    """``steps`` / ``windows``: a DataFrame, or a holder of one (``load() -> DataFrame``, e.g.
    a gathering parent's compact copy, :mod:`tracekit.ranks.gathered`) read on access."""

    def get(self: Attributed) -> pd.DataFrame:
        held = self.__dict__["_" + name]
        return held if isinstance(held, pd.DataFrame) else held.load()

    def put(self: Attributed, value) -> None:
        self.__dict__["_" + name] = value

    return property(get, put)


Attributed.steps = _frame_field("steps")
Attributed.windows = _frame_field("windows")
Attributed.memory = _frame_field("memory")
Attributed.critical = _frame_field("critical")


#: The optional steps (docs/performance.md "Pay only for what you use"): the perf model
#: (:func:`assign_flops`) and the memory events (:func:`label_memory`); every run without
#: ``features`` runs both, a run that names its features skips the others.
PERF, MEMORY, CRITICAL = "perf", "memory", "critical_path"
ALL_FEATURES = frozenset({PERF, MEMORY, CRITICAL})


def link(raw: RawTrace, taxonomy: ModuleTaxonomy, memory_events: bool = True) -> Trace:
    """The linking steps: who launched each activity, in which op stack, module, step, phase.
    Without ``memory_events`` the memory events are dropped (no step reads them)."""
    events, memory = raw.split()
    if not memory_events:
        memory = memory.iloc[:0]
    t = Trace(path=raw.path, events=events, memory=memory)
    t = join_launches(t)
    t = find_steps(t)
    t = nest_cpu_ops(t)
    t = link_backward(t)
    t = assign_modules(t, taxonomy)
    t = assign_phases(t)
    t = assign_stages(t)
    t.meta["mode"] = t.mode
    return t


#: Activity columns of the linking steps that no step after :func:`add_shares` reads, nor
#: :func:`result`: the run drops them before the critical path (17 MB of the 130 MB activity
#: table of a 1 GB trace, held through that step's peak). ``explain`` keeps them.
SPENT_COLUMNS = ("ev", "top_r", "mod_r", "bwd_r", "comm_r", "ctx_bits", "fwd_op_r", "top_op_ts", "perf_unit")


def drop_spent(t: Trace) -> Trace:
    """Needs: the activity table after :func:`add_shares`. Drops: :data:`SPENT_COLUMNS`.
    Guarantees: every later step and the result read what they read before; the drop copies
    next to nothing (the table is built a column at a time, so most columns are blocks of their own)."""
    t.acts = t.acts.drop(columns=[c for c in SPENT_COLUMNS if c in t.acts])
    return t


def analyse(
    raw: RawTrace,
    taxonomy: ModuleTaxonomy,
    rules: KernelRules,
    peaks: Peaks | None = None,
    features: frozenset[str] = ALL_FEATURES,
    lean: bool = False,
) -> Trace:
    """Every step, in order, on one trace file; the whole state (``explain`` reads it).
    ``peaks``: the device peaks the FLOPs are measured against (:func:`tracekit.perf.devices.resolve`).
    ``features``: the optional steps to run (:data:`ALL_FEATURES`); without :data:`PERF` the
    intervals have no perf columns, without :data:`MEMORY` the run has no memory events, without
    :data:`CRITICAL` no critical path. ``lean`` (:func:`run`): :func:`drop_spent` runs too."""
    t = link(raw, taxonomy, memory_events=MEMORY in features)
    t = assign_categories(t, taxonomy, rules)
    t = label_host_idle(t, taxonomy)
    t = label_comm_args(t, raw.meta.get("group_sizes") or [])
    t = label_comm_peers(t, raw.meta.get("group_ranks") or {})
    if PERF in features:
        t = assign_flops(t, peaks)
    if MEMORY in features:
        t = label_memory(t, taxonomy)
    t = find_windows(t)
    t = add_shares(t)
    if lean:
        t = drop_spent(t)
    if CRITICAL in features:
        t = find_critical_path(t, taxonomy)
    return t


def run(
    raw: RawTrace,
    taxonomy: ModuleTaxonomy,
    rules: KernelRules,
    peaks: Peaks | None = None,
    features: frozenset[str] = ALL_FEATURES,
) -> Attributed:
    """Every step on one trace file, and the result the tables need. The state is let go as
    the result is built (:func:`result` with ``release``): the caller's ``raw`` is the only
    other holder of the events, so a caller that drops it keeps no frame twice."""
    t = analyse(raw, taxonomy, rules, peaks, features, lean=True)
    del raw
    return result(t, release=True)


def result(t: Trace, release: bool = False) -> Attributed:
    """The labelled rows of complete steps, and the tables the analyses need. ``release``:
    ``t`` is consumed: its events, ranges and activity table are let go as soon as nothing
    more is taken from them (the peak of a run was here, with all of them alive at once)."""
    done = t.steps.loc[t.steps["complete"], "step"]
    meta = dict(t.meta)
    meta["steps"] = t.steps["step"].tolist()
    meta["complete_steps"] = done.tolist()
    meta["kernel_other_share"] = None  # from the rows below; its place in meta kept
    meta["coverage"] = coverage.measure(t.acts)
    meta["step_ranges"] = coverage.step_ranges(t.acts, t.step_ranges)
    if "flops" in t.acts:
        meta["mfu"] = mfu_meta(t.acts, t.steps)
    if release:
        t.release("events", "ranges")
    columns = [c for c in INTERVAL_COLUMNS if c in t.acts]  # no perf columns without the perf step
    keep = t.acts["step"].isin(done).to_numpy()
    # Every row kept (the common case): the columns are taken, no row is copied.
    iv = (t.acts[columns] if keep.all() else t.acts.loc[keep, columns]).reset_index(drop=True)
    if release:
        t.release("acts")
    iv = as_categories(iv)
    meta["kernel_other_share"] = labels.other_share(iv)
    return Attributed(
        path=t.path,
        mode=t.mode,
        intervals=iv,
        steps=t.steps,
        windows=t.windows,
        modules=t.modules,
        meta=meta,
        warnings=t.warnings,
        memory=memory_rows(t.memory, done) if "step" in t.memory else no_rows(),
        critical=t.critical if len(t.critical.columns) else merged(),
    )
