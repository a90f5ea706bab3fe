"""The ``meta`` of an analysis (what ``--json`` writes beside the tables): kept apart from
:class:`tracekit.analysis.Analysis`, which only computes. What it reads of the analysis is
:class:`Run` (the facade uses this module, never the other way round)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from tracekit.analyses import REGISTRY

from ..read.schema import device_kind
from . import batches, collective_ranks

if TYPE_CHECKING:
    from ..filters import Filters
    from ..pipeline import Attributed
    from ..pipeline.checks import TraceWarning


#: The notice of a run with no runtime call that launched device work (CPU-only traces, or
#: device activity none of which has its launch in the file): the launch tables give no rows.
NO_LAUNCH_NOTICE = (
    "no runtime call launches device work here (a CPU-only trace, or no launch in the file): "
    "idle_causes, idle_host, launches and critical_path have no rows "
    "(without the host side, a host wait cannot be told from the others)"
)
#: The notice of a rank whose events span more than the critical path's keys hold.
LONG_TRACE_NOTICE = (
    "critical_path: no rows for a rank whose CPU and device events span more than 2.4 h "
    "(an event far from the others, such as a zero timestamp)"
)
#: The notice of a run whose traces recorded no input shapes (so no FLOPs are known).
SHAPES_NOTICE = (
    "no input shapes: record the profile with torch.profiler.profile(record_shapes=True) "
    "for FLOPs; the MFU and % of peak columns are empty"
)
#: The notice of a run whose traces record no memory events.
MEMORY_NOTICE = (
    "no memory events: record the profile with torch.profiler.profile(profile_memory=True) "
    "for the memory tables"
)


class Run(Protocol):
    """What :func:`meta_of` reads of an analysis (:class:`tracekit.analysis.Analysis`)."""

    path: str
    ranks: dict[int, Attributed]
    warnings: list[TraceWarning]
    grouping: str
    filters: Filters
    skipped: list[dict]
    wanted: tuple[str, ...] | None

    @property
    def mode(self) -> str: ...

    @property
    def multi_rank(self) -> bool: ...

    @property
    def has_memory(self) -> bool: ...

    def names(self) -> list[str]: ...

    def applies(self, name: str) -> bool: ...


def meta_of(run: Run) -> dict:
    """What JSON ``meta`` says about the run: its ranks, files, steps, devices, notices for a
    reader (CPU-only, inferred steps, partial), coverage, filters and every warning."""
    first = next(iter(run.ranks.values()))
    notices = []
    devices = sorted({d for a in run.ranks.values() for d in a.meta.get("devices", [])})
    if run.mode == "cpu":
        notices.append(
            "CPU-only trace: no device activity, so every table is over CPU op "
            "self time (each op minus the ops inside it) and 'idle' means step "
            "time outside every CPU op"
        )
    if run.mode == "cpu" and devices:
        notices.append(device_not_read(devices))
    if first.meta.get("step_source") == "Optimizer.step":
        notices.append(
            "no ProfilerStep ranges: steps are inferred from the Optimizer.step "
            "ranges (each step ends where one ends)"
        )
    elif not first.meta.get("has_profiler_steps", True):
        notices.append("no ProfilerStep ranges: the whole trace is treated as one step")
    if run.mode == "cpu" or not any(
        a.meta.get("coverage", {}).get("launch", 1.0) > 0 for a in run.ranks.values()
    ):
        notices.append(NO_LAUNCH_NOTICE)
    if any(a.meta.get("critical_path_skipped") for a in run.ranks.values()):
        notices.append(LONG_TRACE_NOTICE)
    unlaunched = sum(a.meta.get("unlaunched_activities", 0) for a in run.ranks.values())
    if unlaunched:
        notices.append(
            f"{unlaunched} device activities with no launching runtime call in the file "
            "belong to no step and are left out (see the no_launch warning)"
        )
    split = sorted({a.meta["rank_split"] for a in run.ranks.values() if a.meta.get("rank_split")})
    notices += split  # a file that held several ranks: how they were found
    overlap = _phase_overlap(run)
    if overlap:
        notices.append(overlap)
    if any(a.meta.get("shapes_recorded") is False for a in run.ranks.values()):
        notices.append(SHAPES_NOTICE)
    notices += _peak_notices(run)
    notices += _modelled_notice(run)
    notices += _above_peak_notices(run)
    if not run.has_memory and _memory_wanted(run):
        notices.append(MEMORY_NOTICE)
    collective_meta, collective_notices = collective_ranks.meta(run)
    notices += collective_notices
    if run.skipped:
        notices.append(
            f"partial result: {len(run.skipped)} file(s) of the directory skipped (listed in the warnings)"
        )
    return {
        "path": run.path,
        "mode": run.mode,
        "device_kind": _device_kind(run),
        "time_unit": "ms",
        "aggregation": "mean per complete step",
        "ranks": sorted(run.ranks),
        "files": {r: a.path for r, a in run.ranks.items()},
        "window_files": {r: a.meta["window_files"] for r, a in run.ranks.items() if "window_files" in a.meta},
        "rank_grouping": run.grouping,
        "steps": {r: a.meta.get("steps", []) for r, a in run.ranks.items()},
        "complete_steps": {r: a.meta.get("complete_steps", []) for r, a in run.ranks.items()},
        "devices": devices,
        "module_source": first.meta.get("module_source"),
        "kernel_other_share": {r: a.meta.get("kernel_other_share") for r, a in run.ranks.items()},
        "notices": notices,
        "coverage": {r: a.meta["coverage"] for r, a in run.ranks.items() if a.meta.get("coverage")},
        "device": {r: a.meta["device"] for r, a in run.ranks.items() if "device" in a.meta},
        "mfu": {r: a.meta["mfu"] for r, a in run.ranks.items() if "mfu" in a.meta},
        **collective_meta,
        **({"filters": _filter_meta(run)} if run.filters.active else {}),
        "warnings": [w.as_dict() for w in run.warnings],
        "partial": bool(run.skipped),
        "skipped": list(run.skipped),
    }


def _memory_wanted(run: Run) -> bool:
    """Whether the run was asked for a memory table: a run that was not reads no ``[memory]``
    event, so it cannot tell that the trace has none."""
    return run.wanted is None or any(n in REGISTRY and REGISTRY[n].reads == "memory" for n in run.wanted)


def _device_kind(run: Run) -> str:
    """What the device is (docs/metrics.md, "device kind"): ``cpu`` in CPU mode, else by the
    categories of the device events read (``mtia`` for MTIA's, else ``gpu``)."""
    if run.mode == "cpu":
        return "cpu"
    cats = {c for a in run.ranks.values() for c in a.meta.get("device_categories", [])}
    return device_kind(sorted(cats)) if cats else "gpu"


def device_not_read(devices: list[str]) -> str:
    """The notice of a trace that names a device but holds none of the device events tracekit
    reads (a GPU trace recorded without its kernels; an MTIA trace's ``mtia_ccp_events`` are
    read, issue 38.14, docs/metrics.md "MTIA device events")."""
    return (
        f"device events not read: the trace names {', '.join(devices)} but holds no kernel, memcpy "
        "or memset that tracekit reads (CUDA, ROCm and MTIA device activity), so it is analysed "
        "as a CPU-only trace"
    )


def _phase_overlap(run: Run) -> str:
    """The notice for steps whose phases ran at the same time (:mod:`tracekit.pipeline.overlap`),
    "" when none did: how many steps, and by how much per such step."""
    n, total = 0, 0
    for _, st in batches.stacked(run, "steps", list(run.ranks)):
        if "phases_overlap" not in st:
            continue
        # eq(True): a rank without the column (NaN once concatenated) has no overlap
        hit = st["phases_overlap"].eq(True).to_numpy(bool) & st["complete"].eq(True).to_numpy(bool)
        n += int(hit.sum())
        total += int(st["overlap_ns"].to_numpy()[hit].sum())  # int64 ns: exact in any order
    if not n:
        return ""
    return (
        f"phases overlapped in time in {n} step(s), by {total / n / 1e6:.3f} ms per such step on "
        "average (forward and backward running at once, as DualPipe schedules them): there each "
        "phase's wall is the union of its own activity, so the walls add up to more than the step"
    )


#: Below this share of compute-kernel time with a FLOP model, MFU gets a caveat (issue 38.4).
MODELLED_CAVEAT_PCT = 90.0


def _modelled_notice(run: Run) -> list[str]:
    """The caveat for an MFU that counts the FLOPs of part of the compute only: where the ranks'
    MFU is known and less than :data:`MODELLED_CAVEAT_PCT` % of their compute-kernel time has a
    FLOP model (``meta.mfu.modelled_pct``), the lowest share, once."""
    shares = [
        m["modelled_pct"]
        for a in run.ranks.values()
        if (m := a.meta.get("mfu", {})).get("mean_pct") is not None and m.get("modelled_pct") is not None
    ]
    if not shares or min(shares) >= MODELLED_CAVEAT_PCT:
        return []
    return [
        f"MFU counts the FLOPs of modelled ops only: {min(shares):.1f}% of compute-kernel time has a "
        "FLOP model (efficiency.modelled_pct by phase and module), the rest adds time and no FLOPs, "
        "so MFU is a lower bound"
    ]


def _peak_notices(run: Run) -> list[str]:
    """One notice per distinct reason a rank with modelled FLOPs has no peak to measure them
    against (its % of peak and MFU columns are then empty)."""
    seen: list[str] = []
    for a in run.ranks.values():
        why = a.meta.get("device", {}).get("notice")
        if why and run.mode == "cpu":
            why = "CPU-only trace: tflops is the CPU's achieved rate, with no peak (--peak-tflops gives one)"
        if why and (a.meta.get("mfu", {}).get("gflop_per_step") or 0) > 0 and why not in seen:
            seen.append(why)
    return [
        why if why.startswith("CPU") else f"{why}: the % of peak and MFU columns are empty" for why in seen
    ]


def _pct(got: dict) -> float:
    """An above-peak record's largest % (None: a 0 ns activity, an infinite rate)."""
    return float("inf") if got.get("max_pct") is None else got["max_pct"]


def _shown(got: dict) -> str:
    return "an infinite rate (0 ns)" if got.get("max_pct") is None else f"{got['max_pct']:.0f}%"


def _above_peak_notices(run: Run) -> list[str]:
    """A % of peak over 100 is never shown silently: one notice per kind (FLOP/s, bandwidth)
    when some rank's compute kernels ran above the peak they are measured against (the largest,
    over the ranks), and one per dtype that holds FLOPs with no peak on a device that has a row."""
    out = []
    worst: dict[str, dict] = {}
    for a in run.ranks.values():
        for kind, got in a.meta.get("mfu", {}).get("above_peak", {}).items():
            if _pct(got) > _pct(worst.get(kind, {"max_pct": 0})):
                worst[kind] = {**got, "device": a.meta.get("device", {})}
    if "flops" in worst:
        w = worst["flops"]
        peak = (w["device"].get("measured") or {}).get(w["dtype"])
        out.append(
            f"{w['kernels']} kernel(s) ran above the peak FLOP/s they are measured against, "
            f"up to {_shown(w)} ({w['op'] or w['kernel'][:60]}, {w['dtype']}"
            + (f" at {peak:g} TFLOP/s" if peak else "")
            + "): that peak is wrong for them (see --peak-tflops, --devices) or the FLOPs they "
            "carry are not all theirs (docs/metrics.md); they are kept out of MFU and % of peak"
        )
    if "bytes" in worst:
        w = worst["bytes"]
        out.append(
            f"{w['kernels']} kernel(s) moved their modelled bytes faster than the peak bandwidth, "
            f"up to {_shown(w)} ({w['op'] or w['kernel'][:60]}): caches served part of "
            "the traffic, so a memory-bound % of peak over 100 there is not utilisation"
        )
    missing = sorted(
        {
            d
            for a in run.ranks.values()
            if a.meta.get("device", {}).get("matched") or a.meta.get("device", {}).get("peak_tflops")
            for d, p in (a.meta.get("device", {}).get("measured") or {}).items()
            if p is None
        }
    )
    if missing and run.mode != "cpu":
        out.append(
            f"no peak for {', '.join(missing)} (give --peak-tflops {missing[0]}=N): "
            "the % of peak and MFU of those FLOPs are empty"
        )
    return out


def _filter_meta(run: Run) -> dict:
    """The filters in force, the tables they leave out (of those asked for) and the complete
    steps they keep."""
    asked = REGISTRY if run.wanted is None else run.wanted
    left_out = [n for n in REGISTRY if n in asked and run.applies(n) and n not in run.names()]
    out = {**run.filters.describe(), "tables_left_out": left_out}
    if run.filters.steps is not None:
        out["complete_steps_kept"] = {
            r: [s for s in a.meta.get("complete_steps", []) if s in run.filters.steps]
            for r, a in run.ranks.items()
        }
    return out
