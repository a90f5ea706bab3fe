"""``tracekit explain``: the chain of evidence behind the labels of matching activities.

For each device activity (CPU traces: CPU op piece) whose name matches a pattern, the chain is:
the activity (name, stream, start, duration, and the file it came from when the rank has
several) -> its launch (correlation id, runtime call, time,
thread) -> the CPU op stack around the launch on that thread (outermost first) -> the module
(instance path; in backward, the module of the forward op that created the node, and how the
node was linked) -> the phase and its evidence -> the step (and whether it was reached by launch
or by time) -> the kernel category and module category, each with the rule that gave it.

Identical chains (same name, same labels, same launching op) are grouped with a count. The
raw events are kept here only: ``tracekit analyze`` never pays for them. See docs/explain.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .perf import explain as perf_explain
from .perf.devices import Peaks
from .pipeline.evidence import EVIDENCE_TEXT
from .pipeline.heads import module_why
from .pipeline.overlap import wall_modes
from .pipeline.worker_comm import collective_evidence
from .read.reader import ANNOTATION, CPU_OP, RUNTIME, RawTrace

#: The labels that make two activities' chains the same (with the activity's name).
GROUP_KEY = [
    "name",
    "group",
    "kernel_category",
    "rule",
    "module",
    "module_rule",
    "phase",
    "phase_evidence",
    "step_by",
    "bwd_link",
    "runtime",
    "op",
    "top_op",
]


@dataclass
class Evidence:
    """One rank's activities with every evidence column, and what is needed to show a chain.
    A rank recorded as several files (successive profiler windows of one process) keeps each
    file's events and modules: ``acts["file"]`` is the position of an activity's file in
    ``files``, and step numbers are those ``tracekit analyze`` reports for the merged rank."""

    path: str
    rank: int | None
    mode: str
    acts: pd.DataFrame
    events: list[pd.DataFrame]
    modules: list[pd.DataFrame]
    complete: set
    files: list[str]
    units: list = field(default_factory=list)  # per file: what owns FLOPs, and the peaks
    peaks: list = field(default_factory=list)
    #: Every rank of the directory (one rank is searched: this one).
    ranks: list[int] = field(default_factory=list)
    taxonomy: object = None  # the module rules (their ``why``)
    #: Per step whose phase walls are not its tiling windows: how they are measured
    #: (:func:`tracekit.pipeline.overlap.wall_modes`).
    walls: dict = field(default_factory=dict)

    def of(self, row: pd.Series) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(events, modules) of the file ``row`` came from."""
        i = int(row["file"])
        return self.events[i], self.modules[i]


def compile_pattern(pattern: str) -> re.Pattern:
    """Case-insensitive regex of ``pattern``, run in linear time (RE2, as user rules are:
    ``(k+)+$x`` cannot backtrack); a pattern that is not a valid RE2 regex (or uses lookaround
    or backreferences) is a literal."""
    from .pipeline.taxonomy import linear

    try:
        return linear(pattern, re.IGNORECASE)
    except (re.error, RecursionError, OverflowError):
        return linear(re.escape(pattern), re.IGNORECASE)


def matching(names: pd.Series, rx: re.Pattern) -> np.ndarray:
    """Mask of rows whose name matches, testing each distinct name once."""
    cat = names.astype("category")
    hit = np.array([bool(rx.search(str(c))) for c in cat.cat.categories] + [False])
    return hit[cat.cat.codes.to_numpy()]


def run(
    path: str | os.PathLike,
    pattern: str,
    *,
    step: int | None = None,
    rank: int | None = None,
    limit: int = 10,
    options=None,
    by_op: bool = False,
) -> dict:
    """Read the trace (one rank of a directory) and explain ``pattern`` (see :func:`explain`)."""
    from .pipeline.taxonomy import kernel_rules, module_taxonomy
    from .ranks.analyse import Options, _read
    from .ranks.raw_rank import rank_traces

    options = options or Options()
    raws, ranks = rank_traces(path, rank, lambda f: _read(f, options), options.max_bytes)
    peaks = [options.peaks(r.meta.get("devices") or []) for r in raws]
    ev = collect(raws, module_taxonomy(options.taxonomy), kernel_rules(options.kernel_rules), peaks)
    ev.ranks = ranks
    doc = explain(ev, pattern, step=step, limit=limit, by_op=by_op)
    split = raws[0].meta.get("rank_split")
    if split:  # this rank is one process of a file that held several
        doc["meta"]["rank_split"] = f"{split}; this is rank {raws[0].meta.get('rank')}"
    return doc


def collect(raws: list[RawTrace], taxonomy, rules, peaks: list | None = None) -> Evidence:
    """Run the linking and labelling steps on each file of one rank and keep every activity's
    evidence; the files' activities are merged in time order, their steps numbered as
    :func:`tracekit.ranks.grouping.merge_windows` numbers them for ``tracekit analyze``."""
    from .pipeline import Attributed, analyse
    from .ranks.grouping import merge_windows

    parts, units, events = [], [], []
    peaks = peaks or [None] * len(raws)
    for i, raw in enumerate(raws):
        t = analyse(raw, taxonomy, rules, peaks[i])
        units.append(t.perf_units)
        acts = t.acts.assign(file=i, file_step=t.acts["step"])
        parts.append(Attributed(raw.path, t.mode, acts, t.steps, t.windows, t.modules, {}))
        events.append(t.events)  # what the activities' event positions point into
    merged = merge_windows(parts)
    steps = merged.steps
    complete = set(steps.loc[steps["complete"], "step"].tolist()) if len(steps) else set()
    return Evidence(
        path=raws[0].path if len(raws) == 1 else str(Path(raws[0].path).parent),
        rank=raws[0].meta.get("rank"),
        mode=merged.mode,
        acts=merged.intervals.reset_index(drop=True),
        events=events,
        modules=[p.modules for p in parts],
        complete=complete,
        files=[Path(r.path).name for r in raws],
        units=units,
        peaks=[p or Peaks() for p in peaks],
        taxonomy=taxonomy,
        walls=wall_modes(steps) if len(steps) else {},
    )


def explain(
    ev: Evidence, pattern: str, step: int | None = None, limit: int = 10, by_op: bool = False
) -> dict:
    """``{"meta": ..., "chains": [...]}``: the grouped chains of the activities matching
    ``pattern`` (in ``step`` when given), largest total time first, at most ``limit``.
    ``by_op``: match the op that owns their FLOPs (``perf_op``) instead of their own name."""
    a = ev.acts
    keep = matching(a["perf_op" if by_op else "name"], compile_pattern(pattern))
    if step is not None:
        keep &= a["step"].to_numpy() == step
    sub = a[keep]
    origin = min((int(e["ts"].min()) for e in ev.events if len(e)), default=0)
    chains = []
    if len(sub):
        key = sub[GROUP_KEY].astype(str)
        dur = (sub["end"] - sub["start"]).to_numpy()
        groups = pd.DataFrame(
            {
                "g": key.agg("\x1f".join, axis=1).to_numpy(),
                "dur": dur,
                "count": sub["count"].to_numpy(),
                "row": np.arange(len(sub)),
            }
        )
        agg = groups.groupby("g", sort=False).agg(
            count=("count", "sum"), total=("dur", "sum"), first=("row", "min")
        )
        agg = agg.sort_values(["total", "count"], ascending=False)
        rows = groups.groupby("g", sort=False)["row"].apply(list)
        for g, r in agg.head(max(limit, 0)).iterrows():
            members = sub.iloc[rows[g]]
            chains.append(_chain(ev, sub.iloc[int(r["first"])], members, origin))
    meta = {
        "path": ev.path,
        "rank": ev.rank,
        "mode": ev.mode,
        "pattern": pattern,
        "by_op": by_op,
        "step": step,
        "matched": int(sub["count"].sum()),
        "pieces": len(sub),
        "groups": int(sub[GROUP_KEY].drop_duplicates().shape[0]) if len(sub) else 0,
        "shown": len(chains),
        "time_origin_ns": origin,
        "complete_steps": sorted(int(s) for s in ev.complete),
        "rank_files": len(ev.files),
        "files": ev.files,
        "ranks": ev.ranks or ([ev.rank] if ev.rank is not None else []),
    }
    return {"meta": meta, "chains": chains}


def _pieces_of(members: pd.DataFrame, row: pd.Series) -> pd.DataFrame:
    """The rows of ``members`` that are pieces of ``row``'s activity: on CPU traces an op's
    self-time pieces (the op minus the ops nested in it: same file and event row), else the
    activity alone."""
    same = (members["file"].to_numpy() == row["file"]) & (members["ev"].to_numpy() == row["ev"])
    return members[same]


def _chain(ev: Evidence, first: pd.Series, members: pd.DataFrame, origin: int) -> dict:
    """One group: its labels, counts and the full chain of its first activity (on CPU traces,
    of its first op: its whole self time, summed over its pieces)."""
    pieces = _pieces_of(members, first)
    row = pieces.loc[pieces["start"].idxmin()]
    steps = sorted({int(s) for s in members["step"]})
    mod_paths = {
        _module_path(ev.modules[f], int(m))[0] for f, m in zip(members["file"], members["module_id"])
    }
    per_file = members["file"].value_counts(sort=False).sort_index()
    return {
        "name": str(row["name"]),
        "file": ev.files[int(row["file"])],
        "files": {ev.files[int(f)]: int(n) for f, n in per_file.items()},
        "count": int(members["count"].sum()),
        "pieces": len(members),
        "total_ms": float((members["end"] - members["start"]).sum()) / 1e6,
        "steps": steps,
        "in_tables": [s for s in steps if s in ev.complete],
        "module_instances": len(mod_paths),
        "activity": {
            "kind": _kind(ev.mode, row),
            "stream": int(row["stream"]),
            "start_ns": int(row["start"]),
            "dur_ns": int((pieces["end"] - pieces["start"]).sum()),
            "pieces": len(pieces),
            "start_ms": (int(row["start"]) - origin) / 1e6,
            "correlation": int(row["corr"]) if int(row["corr"]) >= 0 else None,
        },
        "launch": _launch(ev, row, origin),
        "launch_missing": None if bool(row["launched"]) else _missing_launch(ev, row),
        "op_stack": _op_stack(ev, row, origin),
        "module": _module(ev, row),
        "backward": _backward(ev, row, origin),
        "phase": {
            "phase": str(row["phase"]),
            "evidence": str(row["phase_evidence"]),
            "why": EVIDENCE_TEXT.get(str(row["phase_evidence"]), ""),
        },
        "step": {
            "step": int(row["step"]),
            "by": str(row["step_by"]),
            "complete": int(row["step"]) in ev.complete,
            "in_file": int(row["file_step"]),
            **({"walls": ev.walls[int(row["step"])]} if int(row["step"]) in ev.walls else {}),
        },
        "kernel_category": {
            "group": str(row["group"]),
            "category": str(row["kernel_category"]),
            "rule": str(row["rule"]),
        },
        "module_category": {
            "category": str(row["module"]) or None,
            "rule": str(row["module_rule"]) or None,
            "why": module_why(ev.taxonomy, str(row["module_rule"])),
        },
        "collective": collective_evidence(ev.mode, row),
        "perf": perf_explain.of_chain(ev, row, members),
    }


def _kind(mode: str, row: pd.Series) -> str:
    from .read.reader import KIND_NAMES

    k = int(row["kind"])
    return KIND_NAMES[k] if 0 <= k < len(KIND_NAMES) else str(k)


def _launch(ev: Evidence, row: pd.Series, origin: int) -> dict | None:
    if not bool(row["launched"]):
        return None
    le = int(row["launch_ev"])
    e = ev.of(row)[0]
    return {
        "correlation": int(row["corr"]) if int(row["corr"]) >= 0 else None,
        "runtime": str(row["runtime"]) or None,
        "ts_ms": (int(row["launch_ts"]) - origin) / 1e6,
        "dur_ms": float(e["dur"].iat[le]) / 1e6 if le >= 0 else None,
        "pid": int(row["launch_pid"]),
        "tid": int(row["launch_tid"]),
    }


#: Why a device activity's runtime call is not in its file, from where its correlation id lies
#: among the runtime calls' ids (they count up as the process launches).
MISSING = {
    "before": ("launched before the CPU window began", "below every recorded runtime call's"),
    "after": ("launched after the CPU window ended", "above every recorded runtime call's"),
    "dropped": ("the profiler dropped its runtime call", "among the recorded runtime calls'"),
    "no_id": ("it has no correlation id", ""),
}


def _missing_launch(ev: Evidence, row: pd.Series) -> str:
    """``before`` / ``after`` / ``dropped`` / ``no_id``: see :data:`MISSING`."""
    e = ev.of(row)[0]
    c = int(row["corr"])
    ids = e["corr"].to_numpy()[(e["kind"].to_numpy() == RUNTIME) & (e["corr"].to_numpy() >= 0)]
    if c < 0:
        return "no_id"
    if ids.size == 0 or c < ids.min():
        return "before"
    return "after" if c > ids.max() else "dropped"


def _op_stack(ev: Evidence, row: pd.Series, origin: int) -> list[dict]:
    """CPU ops and annotations around the launch on its thread, outermost first."""
    if not bool(row["launched"]):
        return []
    e = ev.of(row)[0]
    t = int(row["launch_ts"])
    m = (
        np.isin(e["kind"].to_numpy(), (CPU_OP, ANNOTATION))
        & (e["pid"].to_numpy() == row["launch_pid"])
        & (e["tid"].to_numpy() == row["launch_tid"])
    )
    ts, end = e["ts"].to_numpy(), e["ts"].to_numpy() + e["dur"].to_numpy()
    m &= (ts <= t) & (t < end) | ((ts <= t) & (t <= end) & (e["dur"].to_numpy() > 0))
    idx = np.flatnonzero(m)
    idx = idx[np.lexsort((-end[idx], ts[idx]))]
    kinds = e["kind"].to_numpy()
    seq = e["seq"].to_numpy()
    return [
        {
            "name": str(e["name"].iat[i]),
            "kind": "op" if kinds[i] == CPU_OP else "range",
            "ts_ms": (int(ts[i]) - origin) / 1e6,
            "dur_ms": float(e["dur"].iat[i]) / 1e6,
            "seq": int(seq[i]) if seq[i] >= 0 else None,
        }
        for i in idx
    ]


def _module_path(mods: pd.DataFrame, mid: int) -> tuple[str, list[str]]:
    """(dotted path or instance chain, class chain) of module row ``mid`` ('' when none)."""
    if mid < 0 or mods.empty:
        return "", []
    chain: list[int] = []
    i = mid
    parent = mods["parent"].to_numpy()
    while i >= 0 and len(chain) < 256:
        chain.append(i)
        i = int(parent[i])
    chain.reverse()
    classes = [str(mods["cls"].iat[i]) for i in chain]
    qual = str(mods["qualname"].iat[mid]) if "qualname" in mods else ""
    return (qual or " > ".join(str(mods["instance"].iat[i]) for i in chain)), classes


def _module(ev: Evidence, row: pd.Series) -> dict | None:
    mid = int(row["module_id"])
    if mid < 0:
        return None
    path, classes = _module_path(ev.of(row)[1], mid)
    return {"path": path, "classes": classes}


def _backward(ev: Evidence, row: pd.Series, origin: int) -> dict | None:
    """The backward node the activity ran in and the forward op that created it."""
    if not bool(row["backward_node"]):
        return None
    f = int(row["fwd_op_id"])
    e = ev.of(row)[0]
    fwd = (
        None
        if f < 0
        else {
            "name": str(e["name"].iat[f]),
            "tid": int(e["tid"].iat[f]),
            "ts_ms": (int(e["ts"].iat[f]) - origin) / 1e6,
            "seq": int(e["seq"].iat[f]) if e["seq"].iat[f] >= 0 else None,
        }
    )
    return {
        "node": str(row["node"]),
        "seq": int(row["node_seq"]) if row["node_seq"] >= 0 else None,
        "link": str(row["bwd_link"]),
        "forward_op": fwd,
    }
