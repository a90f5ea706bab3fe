"""The expected tables of a planted trace: what every tracekit table must show, computed from
the planted device activities (:class:`~tracekit.testing.truth.Activity`, with the labels their
author meant: phase, module category, timeline block, collective) by plain interval arithmetic.
It never looks at the trace's events, so it is an independent route to the same numbers.

:func:`expected_tables` computes them for any planted activities; :class:`Truth` holds them with
the activities (what :func:`tracekit.testing.llama.llama_training` returns beside its trace).

Definitions implemented by the truth (tracekit must implement the same; see docs/metrics.md):

* device activity: kernel, memcpy, memset; comm kernel: nccl*/rccl* names; compute: other kernels.
* step GPU window: [first start, last end] of the activities launched inside ProfilerStep#N.
* phase wall: forward [window start, first backward activity), backward [.., first optimizer
  activity), optimizer [.., window end); missing phases collapse to 0.
* phases: compute_ms / comm_ms = union of the phase-*labelled* compute / comm kernels;
  exposed_comm_ms = |(all comm ∩ wall window) − all compute|; idle_ms = |wall window − all
  activities|.
* modules: per phase wall window, each compute kernel's 1/k share of every instant where k
  compute kernels run, summed by module category; Other adds memcpy/memset time under neither
  compute nor comm; Exposed communication and Idle rows close each column to 100 %.
* gemm: union of the phase-labelled GEMM kernels vs phases.compute_ms.
* comm: per (phase label, collective): count, sum of durations, |union − all compute|.
* idle: window, union of all activities, window − busy.
* timeline: forward wall window split at every activity start; each piece goes to the block of
  the activity starting it (the last piece runs to the window end).
* mean tables: the column-wise mean of the per-step rows; a mean table's percent is the ratio
  of its means, never the mean of the steps' percents.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from .truth import Activity, intersect_window, measure, shares, subtract

__all__ = ["BLOCKS", "MODULE_ROWS", "PHASES", "TABLE_KEYS", "Truth", "expected_tables"]

NS_PER_MS = 1_000_000

MODULE_ROWS = (
    "Embedding",
    "QKV",
    "RoPE",
    "Bmm0",
    "Softmax",
    "Bmm1",
    "Attention",
    "Attention other",
    "Output",
    "MLP",
    "RMSNorm",
    "Linear",
    "Other",
    "Exposed communication",
    "Idle",
)
#: The key columns of each table the truth computes (a row per step and key).
TABLE_KEYS = {
    "phases": ("phase",),
    "modules": ("phase", "module"),
    "gemm": ("phase",),
    "comm": ("phase", "collective"),
    "idle": (),
    "timeline": ("block",),
}
PHASES = ("forward", "backward", "optimizer")
BLOCKS = ("before", "attention", "ffn", "after")


@dataclass
class Truth:
    """Expected tables. ``per_step[name]`` / ``mean[name]``: lists of records (times in ms)."""

    steps: list[int]
    n_layers: int
    activities: list[Activity]
    per_step: dict[str, list[dict]] = field(default_factory=dict)
    mean: dict[str, list[dict]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def records(self, name: str, per_step: bool = False) -> list[dict]:
        return (self.per_step if per_step else self.mean)[name]

    def frame(self, name: str, per_step: bool = False):
        import pandas as pd

        return pd.DataFrame(self.records(name, per_step))


def _ms(ns) -> float:
    return float(Fraction(ns) / NS_PER_MS)


def expected_tables(acts: list[Activity], steps: list[int], n_layers: int) -> tuple[dict, dict]:
    """The expected tables of ``steps``: ``(per_step, mean)``, each ``{table: [record, ...]}``
    (times in ms; ``mean``: the column-wise mean of the per-step rows, a step without a row
    counting as 0). ``n_layers``: the timeline's attention and ffn block counts."""
    per: dict[str, list[dict]] = defaultdict(list)
    for step in steps:
        _Step(step, [a for a in acts if a.step == step], n_layers).rows(per)
    mean = _means(per, len(steps))
    _mean_percents(mean)
    return dict(per), mean


class _Step:
    """One step's planted activities, its GPU window and phase wall windows (ns)."""

    def __init__(self, step: int, A: list[Activity], n_layers: int) -> None:
        self.step, self.A, self.n_layers = step, A, n_layers
        self.ws, self.we = min(a.start for a in A), max(a.end for a in A)
        self.window = self.we - self.ws
        self.comp = [a.iv for a in A if a.compute]
        self.comm = [a.iv for a in A if a.comm]
        self.copies = [a.iv for a in A if a.kind in ("memcpy", "memset")]
        self.allv = [a.iv for a in A]
        self.bounds = self._phase_bounds()

    def _phase_bounds(self) -> dict[str, tuple[int, int]]:
        """Phase walls: forward [window start, first backward activity), backward [.., first
        optimizer activity), optimizer [.., window end); a missing phase collapses to 0."""
        first = {p: min((a.start for a in self.A if a.phase == p), default=None) for p in PHASES}
        b0, o0, we = first["backward"], first["optimizer"], self.we
        fwd_end = b0 if b0 is not None else (o0 if o0 is not None else we)
        return {
            "forward": (self.ws, fwd_end),
            "backward": (b0, o0 if o0 is not None else we) if b0 is not None else (fwd_end, fwd_end),
            "optimizer": (o0, we) if o0 is not None else (we, we),
        }

    def rows(self, per: dict[str, list[dict]]) -> None:
        """Appends this step's rows of every table to ``per``."""
        busy = measure(self.allv)
        per["idle"].append(
            dict(
                step=self.step,
                window_ms=_ms(self.window),
                busy_ms=_ms(busy),
                idle_ms=_ms(self.window - busy),
                percent=float(Fraction(self.window - busy) * 100 / self.window),
            )
        )
        for p in PHASES:
            self._phase_rows(p, per)
        self._timeline_rows(per)

    def _phase_rows(self, p: str, per: dict[str, list[dict]]) -> None:
        """Phase ``p``'s rows of phases, gemm, comm and modules."""
        A, step, (lo, hi) = self.A, self.step, self.bounds[p]
        wall = hi - lo
        pcomp = measure(a.iv for a in A if a.compute and a.phase == p)
        pcomm = measure(a.iv for a in A if a.comm and a.phase == p)
        exposed = measure(subtract(intersect_window(self.comm, lo, hi), self.comp))
        idle = wall - measure(intersect_window(self.allv, lo, hi))
        per["phases"].append(
            dict(
                step=step,
                phase=p,
                wall_ms=_ms(wall),
                percent=float(Fraction(wall) * 100 / self.window),
                compute_ms=_ms(pcomp),
                comm_ms=_ms(pcomm),
                exposed_comm_ms=_ms(exposed),
                idle_ms=_ms(idle),
            )
        )
        gemm = measure(a.iv for a in A if a.compute and a.gemm and a.phase == p)
        per["gemm"].append(
            dict(
                step=step,
                phase=p,
                gemm_ms=_ms(gemm),
                compute_ms=_ms(pcomp),
                percent=float(Fraction(gemm) * 100 / pcomp) if pcomp else 0.0,
            )
        )
        self._comm_rows(p, per)
        if wall > 0:
            self._module_rows(p, exposed, idle, per)

    def _comm_rows(self, p: str, per: dict[str, list[dict]]) -> None:
        """Comm table rows of phase ``p``: by the planted phase label, not by window."""
        groups: dict[str | None, list[Activity]] = defaultdict(list)
        for a in self.A:
            if a.comm and a.phase == p:
                groups[a.collective].append(a)
        for coll, g in sorted(groups.items(), key=lambda kv: str(kv[0])):
            per["comm"].append(
                dict(
                    step=self.step,
                    phase=p,
                    collective=coll,
                    count=len(g),
                    time_ms=_ms(sum(a.end - a.start for a in g)),
                    exposed_ms=_ms(measure(subtract([a.iv for a in g], self.comp))),
                )
            )

    def _module_rows(self, p: str, exposed: int, idle: int, per: dict[str, list[dict]]) -> None:
        """Modules rows of phase ``p`` (window based): compute shares by category, Other's
        copies under neither compute nor comm, exposed comm and idle close it to the wall."""
        lo, hi = self.bounds[p]
        wall = hi - lo
        ck = [a for a in self.A if a.compute]
        rows: dict[str, Fraction] = defaultdict(Fraction)
        for a, s in zip(ck, shares([a.iv for a in ck], lo, hi)):
            if s:
                rows[a.category or "Other"] += s
        rows["Other"] += measure(subtract(intersect_window(self.copies, lo, hi), self.comp + self.comm))
        rows["Exposed communication"] += exposed
        rows["Idle"] += idle
        total = sum(rows.values())
        assert total == wall, (self.step, p, total, wall)
        for m in MODULE_ROWS:
            if m in rows:
                per["modules"].append(
                    dict(
                        step=self.step,
                        phase=p,
                        module=m,
                        time_ms=_ms(rows[m]),
                        percent=float(rows[m] * 100 / wall),
                    )
                )

    def _timeline_rows(self, per: dict[str, list[dict]]) -> None:
        """Timeline rows: the forward wall window partitioned at activity starts, each piece to
        the block of the activity starting it."""
        lo, hi = self.bounds["forward"]
        fa = sorted((a for a in self.A if lo <= a.start < hi), key=lambda a: a.start)
        tl: dict[str | None, int] = defaultdict(int)
        for i, a in enumerate(fa):
            nxt = fa[i + 1].start if i + 1 < len(fa) else hi
            tl[a.block] += nxt - a.start
        for blk in BLOCKS:
            if blk in tl:
                per["timeline"].append(
                    dict(
                        step=self.step,
                        block=blk,
                        count=self.n_layers if blk in ("attention", "ffn") else 1,
                        time_ms=_ms(tl[blk]),
                        percent=float(Fraction(tl[blk]) * 100 / (hi - lo)),
                    )
                )


def _means(per: dict[str, list[dict]], n_steps: int) -> dict[str, list[dict]]:
    """The column-wise mean over ``n_steps`` of each table's per-step rows, by key; a step
    without a row for a key contributes 0."""
    mean: dict[str, list[dict]] = {}
    for name, recs in per.items():
        k = TABLE_KEYS[name]
        grouped: dict[tuple, list[dict]] = {}
        for r in recs:
            grouped.setdefault(tuple(r[c] for c in k), []).append(r)
        out = []
        for key, rs in grouped.items():
            row = dict(zip(k, key))
            for col in rs[0]:
                if col not in k and col != "step":
                    row[col] = sum(r[col] for r in rs) / n_steps
            out.append(row)
        mean[name] = out
    return mean


def _mean_percents(mean: dict[str, list[dict]]) -> None:
    """A mean table's percent is the ratio of its means (docs/metrics.md), never the mean of
    the steps' percents: of the mean step window (phases), the mean phase wall (modules), the
    mean compute time (gemm), the mean window (idle), the total of the rows (timeline)."""
    window = mean["idle"][0]["window_ms"] if mean.get("idle") else 0.0
    walls = {r["phase"]: r["wall_ms"] for r in mean.get("phases", [])}
    of = {
        "idle": lambda r: (r["idle_ms"], r["window_ms"]),
        "phases": lambda r: (r["wall_ms"], window),
        "gemm": lambda r: (r["gemm_ms"], r["compute_ms"]),
        "modules": lambda r: (r["time_ms"], walls.get(r["phase"], 0.0)),
        "timeline": lambda r: (r["time_ms"], sum(x["time_ms"] for x in mean["timeline"])),
    }
    for name, ratio in of.items():
        for r in mean.get(name, []):
            num, den = ratio(r)
            r["percent"] = num * 100 / den if den else 0.0
