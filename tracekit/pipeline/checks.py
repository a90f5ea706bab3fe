"""Self-checks that run on every analysis, and the one warning record every warning uses.

A :class:`TraceWarning` says what is wrong (``code``), where (``rank``, ``step``; ``None`` when
it concerns the whole rank or the whole run) and in words (``message``). ``Analysis.warnings``
holds them; JSON ``meta.warnings`` is ``[w.as_dict() for w in Analysis.warnings]``; the
terminal and the HTML report print :func:`text` of each.

The checks (docs/metrics.md, "Self-checks"), per rank and complete step:

* ``compute_exceeds_wall``: a phase's compute-kernel time is more than its wall time
  (beyond ``COMPUTE_TOLERANCE``): kernels were given to a phase they do not belong to.
* ``modules_do_not_sum``: a phase's module rows do not add up to the phase's wall time.
* ``kernels_do_not_sum``: the kernel-category rows (Idle included) do not add up to the step's
  window.
* ``placed_by_time`` / ``outside_steps`` / ``unattributed``: more than ``SHARE_LIMIT`` of the
  rank's device time was placed into a step by time alone, lies outside every step, or has no
  phase evidence.
* ``steps_overlap``: two steps' ProfilerStep ranges of one process overlap, or two steps'
  device windows overlap by more than ``OVERLAP_TOLERANCE`` of the shorter one.
* ``empty_step``: a ProfilerStep range launched no device activity (CPU traces: no CPU op).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

#: Sums that should match match within this (ms) plus ``SUM_TOLERANCE`` of the whole.
SUM_SLACK_MS = 0.001
SUM_TOLERANCE = 0.001
#: A phase's compute time may exceed its wall by this fraction (plus ``SUM_SLACK_MS``).
COMPUTE_TOLERANCE = 0.01
#: "More than a few percent": the share of a rank's device time above which a warning says so.
SHARE_LIMIT = 0.05
#: Device windows of two steps may overlap by this fraction of the shorter one.
OVERLAP_TOLERANCE = 0.01


@dataclass(frozen=True)
class TraceWarning:
    """One warning: ``code`` (stable, for machines), ``message`` (for people), and where."""

    code: str
    message: str
    rank: int | None = None
    step: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return text(self)


def text(w: TraceWarning | dict | str) -> str:
    """A warning as one line: ``rank 0, step 3: message`` (plain strings pass through)."""
    if isinstance(w, str):
        return w
    d = w if isinstance(w, dict) else w.as_dict()
    where = ", ".join(f"{k} {d[k]}" for k in ("rank", "step") if d.get(k) is not None)
    line = f"{where}: {d.get('message', '')}" if where else str(d.get("message", ""))
    return f"{d['run']}: {line}" if d.get("run") else line


#: Warnings of one kind, one rank and one run shown one by one for people; the rest are one line.
SHOWN = 3


def warning_lines(warnings: list) -> list[str]:
    """The warnings as the lines a person reads (stderr, Markdown, HTML): each as :func:`text`,
    except that past :data:`SHOWN` warnings of one code, rank and run that name a step (600
    files of one rank warn once per step), the rest become one line that counts them and
    names their steps' range. JSON keeps every warning as it is."""
    groups: dict[tuple, list[dict]] = {}
    order: list[tuple | int] = []
    for i, w in enumerate(warnings):
        d = w if isinstance(w, dict) else (w.as_dict() if isinstance(w, TraceWarning) else None)
        if d is None or d.get("step") is None:
            order.append(i)
            continue
        key = (d.get("run"), d.get("code"), d.get("rank"))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(d)
    lines = []
    for item in order:
        if isinstance(item, int):
            lines.append(text(warnings[item]))
            continue
        ws = groups[item]
        lines += [text(d) for d in ws[:SHOWN]]
        if len(ws) > SHOWN:
            lines.append(_more(item, ws[SHOWN:]))
    return lines


def listed(items: list[str], noun: str) -> str:
    """The first :data:`SHOWN` items, then how many more ``noun`` (one line for 600 as for 3)."""
    more = f"; and {len(items) - SHOWN} more {noun}" if len(items) > SHOWN else ""
    return "; ".join(items[:SHOWN]) + more


def _more(key: tuple, rest: list[dict]) -> str:
    run, code, rank = key
    steps = [int(d["step"]) for d in rest]
    where = f"rank {rank}: " if rank is not None else ""
    line = (
        f"{where}{len(rest)} more warnings like these ({code}, steps {min(steps)}-{max(steps)}); "
        "the JSON output's meta.warnings lists each"
    )
    return f"{run}: {line}" if run else line


def as_warning(w: TraceWarning | dict | str, rank: int | None = None) -> TraceWarning:
    """A :class:`TraceWarning` from what a step reported; ``rank`` fills in a missing rank."""
    if isinstance(w, dict):
        w = TraceWarning(str(w.get("code", "trace")), str(w.get("message", "")), w.get("rank"), w.get("step"))
    elif not isinstance(w, TraceWarning):
        w = TraceWarning("trace", str(w))
    return replace(w, rank=rank) if w.rank is None and rank is not None else w


def check_rank(
    rank: int | None, tables: dict[str, pd.DataFrame], steps: pd.DataFrame, meta: dict
) -> list[TraceWarning]:
    """Every self-check of one rank.

    ``tables``: the rank's per-step ``phases``, ``modules`` and ``kernels`` tables;
    ``steps``: its step windows (``step``, ``start``, ``end``, ``complete``; ns);
    ``meta``: its meta, with ``coverage`` and ``step_ranges`` (:mod:`tracekit.pipeline.coverage`).
    """
    out: list[TraceWarning] = []
    phases = tables.get("phases", pd.DataFrame())
    out += _compute_vs_wall(rank, phases)
    out += _modules_sum(rank, tables.get("modules", pd.DataFrame()), phases)
    out += _kernels_sum(rank, tables.get("kernels", pd.DataFrame()), steps)
    out += _shares(rank, meta.get("coverage") or {})
    ranges = meta.get("step_ranges") or {}
    out += _overlaps(rank, steps, ranges)
    out += _empty_steps(rank, ranges)
    return out


def _ms(x: float) -> str:
    return f"{x:,.3f} ms"


def _compute_vs_wall(rank, phases: pd.DataFrame) -> list[TraceWarning]:
    if phases.empty or "compute_ms" not in phases:
        return []
    over = (phases["compute_ms"] > phases["wall_ms"] * (1 + COMPUTE_TOLERANCE) + SUM_SLACK_MS).to_numpy()
    if not over.any():
        return []
    bad = phases[over]
    return [
        TraceWarning(
            "compute_exceeds_wall",
            f"{r.phase} compute {_ms(r.compute_ms)} exceeds "
            f"its wall time {_ms(r.wall_ms)}: kernels are in the wrong phase",
            rank,
            int(r.step),
        )
        for r in bad.itertuples(index=False)
    ]


def _off(total: np.ndarray, whole: np.ndarray) -> np.ndarray:
    return np.abs(total - whole) > SUM_SLACK_MS + SUM_TOLERANCE * np.abs(whole)


def _modules_sum(rank, modules: pd.DataFrame, phases: pd.DataFrame) -> list[TraceWarning]:
    if modules.empty or phases.empty:
        return []
    total = modules.groupby(["step", "phase"], observed=True)["time_ms"].sum()
    # The phase rows' wall times at the module rows' keys, in the module rows' order (the
    # inner join of the two, read through one dict).
    wall_of = dict(zip(zip(phases["step"].tolist(), phases["phase"].tolist()), phases["wall_ms"].tolist()))
    keys = [k for k in total.index if k in wall_of]
    sums = total.to_numpy()[[k in wall_of for k in total.index]]
    wall = np.array([wall_of[k] for k in keys], dtype=float)
    bad = _off(sums, wall)
    return [
        TraceWarning(
            "modules_do_not_sum",
            f"{phase} module rows add up to {_ms(t)}, not its wall time {_ms(w)}",
            rank,
            int(step),
        )
        for (step, phase), t, w in zip([k for k, b in zip(keys, bad) if b], sums[bad], wall[bad])
    ]


def _kernels_sum(rank, kernels: pd.DataFrame, steps: pd.DataFrame) -> list[TraceWarning]:
    if kernels.empty or steps.empty or "stage" in kernels:  # staged: per stage span, not step
        return []
    total = kernels.groupby("step")["time_ms"].sum()
    st = steps[steps["complete"]].set_index("step")
    window = ((st["end"] - st["start"]) / 1e6).reindex(total.index)
    ok = window.notna().to_numpy()
    bad = _off(total.to_numpy(), window.fillna(0).to_numpy()) & ok
    return [
        TraceWarning(
            "kernels_do_not_sum",
            f"kernel rows add up to {_ms(t)}, not the step window {_ms(w)}",
            rank,
            int(s),
        )
        for s, t, w in zip(total.index[bad], total.to_numpy()[bad], window.to_numpy()[bad])
    ]


_SHARE_CHECKS = [
    (
        "by_time",
        "placed_by_time",
        "of device time was placed into a step by time alone (launched from a process with no steps)",
    ),
    ("outside", "outside_steps", "of device time lies outside every step and is left out"),
    ("unattributed", "unattributed", "of device time has no phase evidence"),
]


def _shares(rank, cov: dict) -> list[TraceWarning]:
    out = []
    for key, code, what in _SHARE_CHECKS:
        share = cov.get(key)
        if share is not None and share > SHARE_LIMIT:
            out.append(TraceWarning(code, f"{share:.1%} {what} (limit {SHARE_LIMIT:.0%})", rank))
    return out


def _overlaps(rank, steps: pd.DataFrame, ranges: dict) -> list[TraceWarning]:
    out = [
        TraceWarning(
            "steps_overlap", f"ProfilerStep ranges of steps {a} and {b} overlap on the CPU", rank, int(b)
        )
        for a, b in ranges.get("cpu_overlaps", [])
    ]
    if steps.empty:
        return out
    st = steps.sort_values("start")
    s, e = st["start"].to_numpy(np.int64), st["end"].to_numpy(np.int64)
    n = st["step"].to_numpy()
    for i in range(1, len(st)):
        over = int(e[:i].max()) - int(s[i])
        shorter = min(e[i] - s[i], e[i - 1] - s[i - 1])
        if over > OVERLAP_TOLERANCE * max(shorter, 0) and over > 0:
            j = int(np.argmax(e[:i]))
            out.append(
                TraceWarning(
                    "steps_overlap",
                    f"the device windows of steps {n[j]} and {n[i]} overlap by {_ms(over / 1e6)}",
                    rank,
                    int(n[i]),
                )
            )
    return out


def _empty_steps(rank, ranges: dict) -> list[TraceWarning]:
    return [
        TraceWarning("empty_step", "the ProfilerStep range launched no activity", rank, int(s))
        for s in ranges.get("empty", [])
    ]
