"""Coverage: how much of a rank's device time each link of the evidence chain reached.

Measured over every activity of the rank's file (GPU traces: kernels, memcpys and memsets; CPU
traces: the CPU op pieces the tables use), as shares of their summed durations:

* ``launch``: its launching runtime call is in the file (CPU traces: always);
* ``module``: it was launched inside a module's forward range, or in backward by a node whose
  forward op was inside one;
* ``phase_evidence``: its phase rests on evidence (autograd thread or engine, a backward node,
  an ``Optimizer.step#`` range, tracekit's phase annotation) rather than the forward default;
* ``phase_default``: it is forward by default (no evidence; forward is the phase of work that
  nothing marks as backward or optimizer): with ``phase_evidence`` and ``unattributed`` it makes
  the whole;
* ``training_phases``: its phase is backward or optimizer. 0 means a forward-only trace
  (inference, or a window holding no backward): there, forward by default is the expected
  answer, not a gap in the evidence, and the line says so;
* ``unattributed``: its phase is ``unattributed`` (no evidence for any phase);
* ``by_time``: it was placed into a step by time alone (no launch of its own inside a step);
* ``outside``: it lies outside every step and is left out of every table.

Shares are of ``device_ms`` (CPU traces: of CPU op time) and lie in [0, 1]; ``None`` means the
pipeline does not record that link.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .state import str_in

#: phase_evidence values that are not evidence.
NO_EVIDENCE = ("default", "", "none")


def measure(acts: pd.DataFrame) -> dict:
    """The coverage shares of one rank's activity table (``start``, ``end``, ``step``,
    ``launched``, ``module_id``, ``phase``; ``step_by`` and ``phase_evidence`` when present)."""
    dur = (acts["end"].to_numpy(np.int64) - acts["start"].to_numpy(np.int64)).astype(float)
    total = float(dur.sum())

    def share(mask) -> float:
        return round(float(dur[np.asarray(mask, bool)].sum()) / total, 6) if total > 0 else 0.0

    step = acts["step"].to_numpy()
    if "step_by" in acts:
        by_time = str_in(acts["step_by"], ("time",))
        outside = str_in(acts["step_by"], ("none",))
    else:
        by_time, outside = (step >= 0) & ~acts["launched"].to_numpy(bool), step < 0
    out = {
        "device_ms": round(total / 1e6, 6),
        "launch": share(acts["launched"].to_numpy(bool)),
        "module": share(acts["module_id"].to_numpy() >= 0),
        "phase_evidence": None,
        "phase_default": None,
        "training_phases": None,
        "unattributed": None,
        "by_time": share(by_time),
        "outside": share(outside),
    }
    unattributed = str_in(acts["phase"], ("unattributed",))
    out["unattributed"] = share(unattributed)
    out["training_phases"] = share(str_in(acts["phase"], ("backward", "optimizer")))
    if "phase_evidence" in acts:
        none = str_in(acts["phase_evidence"], NO_EVIDENCE)
        out["phase_evidence"] = share(~none & ~unattributed)
        out["phase_default"] = share(none & str_in(acts["phase"], ("forward",)))
    return out


def step_ranges(acts: pd.DataFrame, ranges: pd.DataFrame) -> dict:
    """Facts about the ProfilerStep ranges (``step``, ``cpu_start``, ``cpu_end``, ``pid``) that
    the self-checks need: ``empty`` (steps with no activity, except the first and the last
    range: the profiler opens and closes its window with a step that may hold nothing) and
    ``cpu_overlaps`` (pairs of steps whose ranges overlap in one process)."""
    if ranges.empty:
        return {"empty": [], "cpu_overlaps": []}
    used = set(acts["step"].to_numpy().tolist())
    # By start (sort_values' sort: quicksort), then per process in order of appearance.
    order = np.argsort(ranges["cpu_start"].to_numpy(), kind="quicksort")
    start, end, step, pid = (ranges[c].to_numpy()[order] for c in ("cpu_start", "cpu_end", "step", "pid"))
    empty = sorted({int(s) for s in step[1:-1] if int(s) not in used and s >= 0})
    overlaps = []
    for p in pd.unique(pid):
        of = pid == p
        s, e, n = start[of], end[of], step[of]
        reach = np.maximum.accumulate(e)
        for i in np.flatnonzero(s[1:] < reach[:-1]) + 1:
            overlaps.append([int(n[int(np.argmax(e[:i]))]), int(n[i])])
    return {"empty": empty, "cpu_overlaps": overlaps}


def line(coverage: dict) -> str:
    """One compact line: ``launch 99.8% · module 87.1% · phase evidence 61.7% + forward by
    default 38.3% · ...`` (absent links left out; a forward-only trace's phase part reads
    ``phase forward by default 100.0% (forward only: no backward or optimizer)``)."""
    parts = [
        ("launch", "launch"),
        ("module", "module"),
        ("phase_evidence", "phase"),
        ("unattributed", "unattributed"),
        ("by_time", "placed by time"),
        ("outside", "outside steps"),
    ]
    shown = []
    for k, label in parts:
        v = coverage.get(k)
        if v is None or (k == "unattributed" and not v):
            continue
        shown.append(_phase_text(coverage) if k == "phase_evidence" else f"{label} {v:.1%}")
    return " · ".join(shown)


def _phase_text(c: dict) -> str:
    """How the phases were decided: ``phase evidence 61.7% + forward by default 38.3%``; a
    forward-only trace says so, since forward by default is then the expected answer."""
    ev, default = c["phase_evidence"], c.get("phase_default")
    if default is None:  # coverage recorded before the default share was
        return f"phase evidence {ev:.1%}"
    parts = [f"evidence {ev:.1%}"] if ev or not default else []
    parts += [f"forward by default {default:.1%}"] if default else []
    only = " (forward only: no backward or optimizer)" if c.get("training_phases") == 0 else ""
    return "phase " + " + ".join(parts) + only


def lines(meta: dict, most: int = 4) -> list[str]:
    """The coverage line(s) of an analysis' meta: one per rank for up to ``most`` ranks, else
    the lowest share of each link across ranks."""
    cov = meta.get("coverage") or {}
    if not cov:
        return []
    unit = "CPU op time" if meta.get("mode") == "cpu" else "device time"
    if len(cov) <= most:
        return [
            f"coverage{f' rank {r}' if len(cov) > 1 else ''} (share of {unit}): {line(c)}"
            for r, c in cov.items()
        ]
    keys = ["launch", "module", "phase_evidence"]
    worst = {
        k: min(c[k] for c in cov.values() if c.get(k) is not None)
        for k in keys
        if any(c.get(k) is not None for c in cov.values())
    }
    highest = ("by_time", "outside", "phase_default", "training_phases")
    worst.update({k: max(c.get(k) or 0 for c in cov.values()) for k in highest})
    return [f"coverage, worst of {len(cov)} ranks (share of {unit}): {line(worst)}"]
