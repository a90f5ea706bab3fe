"""``tracekit explain``: the chain of evidence behind the labels of matching activities.

For each device activity (CPU traces: CPU op piece) whose name matches a pattern, the chain is:
the activity (name, stream, start, duration) -> its launch (correlation id, runtime call, time,
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import TraceError
from .read import ANNOTATION, CPU_OP, RawTrace, trace_files

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
    """One rank's activities with every evidence column, and what is needed to show a chain."""

    path: str
    rank: int | None
    mode: str
    acts: pd.DataFrame
    events: pd.DataFrame
    modules: pd.DataFrame
    complete: set
    rank_files: int = 1


def compile_pattern(pattern: str) -> re.Pattern:
    """Case-insensitive regex of ``pattern``; a pattern that is not a valid regex is a literal."""
    try:
        return re.compile(pattern, re.IGNORECASE)
    except (re.error, RecursionError, OverflowError):
        return re.compile(re.escape(pattern), re.IGNORECASE)


def matching(names: pd.Series, rx: re.Pattern) -> np.ndarray:
    """Mask of rows whose name matches, testing each distinct name once."""
    cat = names.astype("category")
    hit = np.array([bool(rx.search(str(c))) for c in cat.cat.categories] + [False])
    return hit[cat.cat.codes.to_numpy()]


def rank_file(path: str | os.PathLike, rank: int | None, read) -> RawTrace:
    """The raw trace of ``rank`` (default: the lowest) of a file or a directory, ranks grouped as
    ``tracekit.load`` groups them (:mod:`tracekit.ranks`); of a rank with several files (windows
    of one process) the first. ``meta["rank_files"]`` says how many files the rank has."""
    from .ranks import FileIdentity, group_files, host_of, manifest_ranks, process_of

    p = Path(path)
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    files = trace_files(p) if p.is_dir() else [p]
    raws = [read(f) for f in files]
    from_manifest = manifest_ranks(p) if p.is_dir() else {}
    ids = [
        FileIdentity(
            rank=from_manifest.get(f.name) if r.meta.get("rank") is None else r.meta["rank"],
            pid=process_of(r.events),
            host=host_of(f, r.meta.get("host_name")),
        )
        for f, r in zip(files, raws)
    ]
    groups, _ = group_files(ids)
    if rank is None:
        rank = min(groups)
    if rank not in groups:
        raise TraceError(p, f"no rank {rank}; ranks here: {', '.join(map(str, sorted(groups)))}")
    raw = raws[groups[rank][0]]
    raw.meta.update({"rank": rank, "rank_files": len(groups[rank])})
    return raw


def run(
    path: str | os.PathLike,
    pattern: str,
    *,
    step: int | None = None,
    rank: int | None = None,
    limit: int = 10,
    options=None,
) -> dict:
    """Read the trace (one rank of a directory) and explain ``pattern`` (see :func:`explain`)."""
    from .analysis import Options, _read
    from .taxonomy import kernel_rules, module_taxonomy

    options = options or Options()
    raw = rank_file(path, rank, lambda f: _read(f, options))
    ev = collect(raw, module_taxonomy(options.taxonomy), kernel_rules(options.kernel_rules))
    return explain(ev, pattern, step=step, limit=limit)


def collect(raw: RawTrace, taxonomy, rules) -> Evidence:
    """Run the linking and labelling steps on ``raw`` and keep every activity's evidence."""
    acts, modules, steps, mode = _pipeline_evidence(raw, taxonomy, rules)
    complete = set(steps.loc[steps["complete"], "step"].tolist()) if len(steps) else set()
    return Evidence(
        path=raw.path,
        rank=raw.meta.get("rank"),
        mode=mode,
        acts=acts,
        events=raw.events,
        modules=modules,
        complete=complete,
        rank_files=int(raw.meta.get("rank_files", 1)),
    )


def explain(ev: Evidence, pattern: str, step: int | None = None, limit: int = 10) -> dict:
    """``{"meta": ..., "chains": [...]}``: the grouped chains of the activities matching
    ``pattern`` (in ``step`` when given), largest total time first, at most ``limit``."""
    a = ev.acts
    keep = matching(a["name"], compile_pattern(pattern))
    if step is not None:
        keep &= a["step"].to_numpy() == step
    sub = a[keep]
    origin = int(ev.events["ts"].min()) if len(ev.events) else 0
    chains = []
    if len(sub):
        key = sub[GROUP_KEY].astype(str)
        dur = (sub["end"] - sub["start"]).to_numpy()
        groups = pd.DataFrame(
            {"g": key.agg("\x1f".join, axis=1).to_numpy(), "dur": dur, "row": np.arange(len(sub))}
        )
        agg = groups.groupby("g", sort=False).agg(
            count=("dur", "size"), total=("dur", "sum"), first=("row", "min")
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
        "step": step,
        "matched": len(sub),
        "groups": int(sub[GROUP_KEY].drop_duplicates().shape[0]) if len(sub) else 0,
        "shown": len(chains),
        "time_origin_ns": origin,
        "complete_steps": sorted(int(s) for s in ev.complete),
        "rank_files": ev.rank_files,
    }
    return {"meta": meta, "chains": chains}


def _chain(ev: Evidence, row: pd.Series, members: pd.DataFrame, origin: int) -> dict:
    """One group: its labels, counts and the full chain of its first activity."""
    steps = sorted({int(s) for s in members["step"]})
    mod_paths = {_module_path(ev.modules, int(m))[0] for m in members["module_id"]}
    return {
        "name": str(row["name"]),
        "count": len(members),
        "total_ms": float((members["end"] - members["start"]).sum()) / 1e6,
        "steps": steps,
        "in_tables": [s for s in steps if s in ev.complete],
        "module_instances": len(mod_paths),
        "activity": {
            "kind": _kind(ev.mode, row),
            "stream": int(row["stream"]),
            "start_ns": int(row["start"]),
            "dur_ns": int(row["end"] - row["start"]),
            "start_ms": (int(row["start"]) - origin) / 1e6,
        },
        "launch": _launch(ev, row, origin),
        "op_stack": _op_stack(ev, row, origin),
        "module": _module(ev, row),
        "backward": _backward(ev, row, origin),
        "phase": {"phase": str(row["phase"]), "evidence": str(row["phase_evidence"])},
        "step": {
            "step": int(row["step"]),
            "by": str(row["step_by"]),
            "complete": int(row["step"]) in ev.complete,
        },
        "kernel_category": {
            "group": str(row["group"]),
            "category": str(row["kernel_category"]),
            "rule": str(row["rule"]),
        },
        "module_category": {"category": str(row["module"]) or None, "rule": str(row["module_rule"]) or None},
    }


def _kind(mode: str, row: pd.Series) -> str:
    from .read import KIND_NAMES

    k = int(row["kind"])
    return KIND_NAMES[k] if 0 <= k < len(KIND_NAMES) else str(k)


def _launch(ev: Evidence, row: pd.Series, origin: int) -> dict | None:
    if not bool(row["launched"]):
        return None
    le = int(row["launch_ev"])
    e = ev.events
    return {
        "correlation": int(row["corr"]) if int(row["corr"]) >= 0 else None,
        "runtime": str(row["runtime"]) or None,
        "ts_ms": (int(row["launch_ts"]) - origin) / 1e6,
        "dur_ms": float(e["dur"].iat[le]) / 1e6 if le >= 0 else None,
        "pid": int(row["launch_pid"]),
        "tid": int(row["launch_tid"]),
    }


def _op_stack(ev: Evidence, row: pd.Series, origin: int) -> list[dict]:
    """CPU ops and annotations around the launch on its thread, outermost first."""
    if not bool(row["launched"]):
        return []
    e = ev.events
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
    path, classes = _module_path(ev.modules, mid)
    return {"path": path, "classes": classes}


def _backward(ev: Evidence, row: pd.Series, origin: int) -> dict | None:
    """The backward node the activity ran in and the forward op that created it."""
    if not bool(row["backward_node"]):
        return None
    f = int(row["fwd_op_id"])
    e = ev.events
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


def _pipeline_evidence(raw: RawTrace, taxonomy, rules):
    """Every activity with the evidence columns the pipeline records (:mod:`tracekit.pipeline`)."""
    from .pipeline import analyse

    t = analyse(raw, taxonomy, rules)
    return t.acts, t.modules, t.steps, t.mode
