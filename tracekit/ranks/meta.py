"""The ``meta`` of an analysis (what ``--json`` writes beside the tables): kept apart from
:class:`tracekit.analysis.Analysis`, which only computes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.analyses import REGISTRY

if TYPE_CHECKING:
    from ..analysis import Analysis


#: The notice of a run whose traces record no memory events.
MEMORY_NOTICE = (
    "no memory events: record the profile with torch.profiler.profile(profile_memory=True) "
    "for the memory tables"
)


def meta_of(run: Analysis) -> dict:
    """What JSON ``meta`` says about the run: its ranks, files, steps, devices, notices for a
    reader (CPU-only, inferred steps, partial), coverage, filters and every warning."""
    first = next(iter(run.ranks.values()))
    notices = []
    if run.mode == "cpu":
        notices.append(
            "CPU-only trace: no device activity, so every table is over CPU op "
            "self time (each op minus the ops inside it) and 'idle' means step "
            "time outside every CPU op"
        )
    if first.meta.get("step_source") == "Optimizer.step":
        notices.append(
            "no ProfilerStep ranges: steps are inferred from the Optimizer.step "
            "ranges (each step ends where one ends)"
        )
    elif not first.meta.get("has_profiler_steps", True):
        notices.append("no ProfilerStep ranges: the whole trace is treated as one step")
    unlaunched = sum(a.meta.get("unlaunched_activities", 0) for a in run.ranks.values())
    if unlaunched:
        notices.append(
            f"{unlaunched} device activities with no launching runtime call in the file "
            "belong to no step and are left out (see the no_launch warning)"
        )
    if not run.has_memory:
        notices.append(MEMORY_NOTICE)
    if run.skipped:
        notices.append(
            f"partial result: {len(run.skipped)} file(s) of the directory skipped (listed in the warnings)"
        )
    return {
        "path": run.path,
        "mode": run.mode,
        "time_unit": "ms",
        "aggregation": "mean per complete step",
        "ranks": sorted(run.ranks),
        "files": {r: a.path for r, a in run.ranks.items()},
        "window_files": {r: a.meta["window_files"] for r, a in run.ranks.items() if "window_files" in a.meta},
        "rank_grouping": run.grouping,
        "steps": {r: a.meta.get("steps", []) for r, a in run.ranks.items()},
        "complete_steps": {r: a.meta.get("complete_steps", []) for r, a in run.ranks.items()},
        "devices": sorted({d for a in run.ranks.values() for d in a.meta.get("devices", [])}),
        "module_source": first.meta.get("module_source"),
        "kernel_other_share": {r: a.meta.get("kernel_other_share") for r, a in run.ranks.items()},
        "notices": notices,
        "coverage": {r: a.meta["coverage"] for r, a in run.ranks.items() if a.meta.get("coverage")},
        **({"filters": _filter_meta(run)} if run.filters.active else {}),
        "warnings": [w.as_dict() for w in run.warnings],
        "partial": bool(run.skipped),
        "skipped": list(run.skipped),
    }


def _filter_meta(run: Analysis) -> dict:
    """The filters in force, the tables they leave out and the complete steps they keep."""
    left_out = [n for n in REGISTRY if run.applies(n) and n not in run.names()]
    out = {**run.filters.describe(), "tables_left_out": left_out}
    if run.filters.steps is not None:
        out["complete_steps_kept"] = {
            r: [s for s in a.meta.get("complete_steps", []) if s in run.filters.steps]
            for r, a in run.ranks.items()
        }
    return out
