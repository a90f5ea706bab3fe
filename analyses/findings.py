"""Findings: the largest avoidable costs of a run, ranked, each with its evidence and usual fix.

Computed from other tables (never from a language model, and the same tables always give the
same list). Each category is one small function over those tables, with its thresholds in
``tracekit/data/findings.toml`` (a user file overrides them, :func:`rules`):

* ``straggler_wait``: time inside collectives waiting for the last rank (``collectives.wait_ms``),
  at most the rank's exposed communication (``phases.exposed_comm_ms``);
* ``exposed_transfer``: the rest of the exposed communication (moving bytes, nothing else running);
* ``host_bound_idle``: device idle (no stream busy) while the next launch had not begun: the
  host was late (``idle_host``, every family but ``launch_in_flight``);
* ``launch_overhead``: device time of kernels shorter than their launch call
  (``launches.host_bound_ms``);
* ``gemm_below_peak``: time GEMM shapes under the peak threshold take beyond their time at peak
  (``gemm_shapes.time_ms - ideal_ms``);
* ``memory_spike``: a phase whose allocation rises by a large part of the device's peak
  (``memory.peak_growth_mb``; its cost is memory: ``ms`` is 0).

Columns: ``rank``, ``step`` (per step only; the mean view is per complete step on average, as
every table), ``category``, ``ms`` (per step), ``share_pct`` (of the step's device window,
``idle.window_ms``), ``evidence`` (the table and rows behind it), ``explain`` (a ``tracekit
explain`` query that shows them, "" when none), ``fix``. Largest ``ms`` first; ties by category
order, then rank and step.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ._registry import MS, PCT, PER_STEP, TableSpec, declare

#: A table by name (its rows as the run reports them: mean or per step, ``rank`` on several
#: ranks), or None when the run has no such table.
Get = Callable[[str], "pd.DataFrame | None"]
CATEGORIES = (
    "straggler_wait",
    "exposed_transfer",
    "host_bound_idle",
    "launch_overhead",
    "gemm_below_peak",
    "memory_spike",
)
COLUMNS = ["rank", "step", "category", "ms", "share_pct", "evidence", "explain", "fix"]


def rules(path: str | None = None) -> dict[str, dict]:
    """The built-in thresholds, each category's keys replaced by those of ``path`` (a TOML file
    of the same tables); an unknown category or key is an error, not ignored."""
    out = tomllib.loads(resources.files("tracekit.data").joinpath("findings.toml").read_text())
    if path is None:
        return out
    user = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    for cat, keys in user.items():
        if cat not in out or not isinstance(keys, dict) or set(keys) - set(out[cat]):
            known = ", ".join(f"{c} ({', '.join(out[c])})" for c in out)
            raise ValueError(f"{path}: unknown finding rule [{cat}] {sorted(keys)}; known: {known}")
        out[cat] = {**out[cat], **keys}
    return out


def _keys(df: pd.DataFrame) -> list[str]:
    """The keys of a finding: ``rank``, and ``step`` when the run is per step (:func:`_per_step`)."""
    return ["rank", "step"] if "step" in df.columns and df.attrs.get("per_step", True) else ["rank"]


def _ranked(df: pd.DataFrame | None) -> pd.DataFrame | None:
    """``df`` with a ``rank`` column (0 on one rank); None when absent or empty."""
    if df is None or df.empty:
        return None
    per_step = df.attrs.get("per_step", True)
    df = df if "rank" in df.columns else df.assign(rank=0)
    df.attrs["per_step"] = per_step
    return df


def _sum(df: pd.DataFrame, value: str) -> pd.Series:
    """``value`` summed per rank (and step), NaN where every value is NaN. In the mean view a
    table that keeps its steps (the cross-rank ones) is summed per step, then averaged over
    the steps it holds."""
    if "step" in df.columns and not df.attrs.get("per_step", True):
        return df.groupby(["rank", "step"])[value].sum(min_count=1).groupby(level="rank").mean()
    return df.groupby(_keys(df))[value].sum(min_count=1)


def _top(df: pd.DataFrame, value: str) -> pd.DataFrame:
    """Per rank (and step), its row with the largest ``value`` (first in table order on ties)."""
    keys = _keys(df)
    return df.sort_values(value, ascending=False, kind="stable").drop_duplicates(keys).set_index(keys)


def _exposed(get: Get) -> pd.Series | None:
    ph = _ranked(get("phases"))
    if ph is None or "exposed_comm_ms" not in ph:
        return None
    return _sum(ph, "exposed_comm_ms")


def _wait(get: Get) -> tuple[pd.Series, pd.DataFrame] | None:
    """Per rank (and step) its straggler wait (capped by exposed comm), and the collective rows."""
    co = _ranked(get("collectives"))
    exposed = _exposed(get)
    if co is None or exposed is None or "wait_ms" not in co or co["wait_ms"].isna().all():
        return None
    wait = _sum(co, "wait_ms").dropna()
    return np.minimum(wait, exposed.reindex(wait.index).fillna(0.0)), co


def straggler_wait(get: Get) -> pd.DataFrame:
    got = _wait(get)
    if got is None:
        return _none()
    wait, co = got
    top = _top(co.dropna(subset=["wait_ms"]), "wait_ms")
    late = _ranked(get("stragglers"))
    who = ""
    if late is not None and "caused_wait_ms" in late and late["caused_wait_ms"].notna().any():
        worst = late.sort_values("caused_wait_ms", ascending=False, kind="stable").iloc[0]
        what = " / ".join(str(worst[c]) for c in ("phase", "module", "op") if c in late and str(worst[c]))
        after = f"late after {what}; " if what else ""  # no compute op before the arrival
        who = (
            f"; rank {int(worst['rank'])} kept the others waiting most, "
            f"{worst['caused_wait_ms']:.3f} ms ({after}stragglers table)"
        )
    ev = [
        f"collectives: {w:.3f} ms waiting, most in {top.loc[k, 'collective']} ({top.loc[k, 'phase']}){who}"
        for k, w in wait.items()
    ]
    return _rows(wait, ev, "")


def exposed_transfer(get: Get) -> pd.DataFrame:
    exposed = _exposed(get)
    if exposed is None:
        return _none()
    got = _wait(get)
    wait = got[0].reindex(exposed.index).fillna(0.0) if got is not None else 0.0
    rest = (exposed - wait).clip(lower=0.0)
    ev = [
        f"phases: {e:.3f} ms of exposed communication, {r:.3f} ms not waiting" for e, r in zip(exposed, rest)
    ]
    return _rows(rest, ev, "")


def host_bound_idle(get: Get) -> pd.DataFrame:
    """Device-level idle (no stream busy: ``idle_host``, which adds up to the ``idle`` table)
    whose next launch had not begun: the host was late. Not the per-stream ``idle_causes``,
    whose streams' gaps overlap in time and would be counted once per stream."""
    ih = _ranked(get("idle_host"))
    if ih is None:
        return _none()
    late = ih[ih["family"].astype(str) != "launch_in_flight"]
    if late.empty:
        return _none()
    return _summed(
        late,
        "idle_ms",
        lambda v, t: (
            f"idle_host: {v:.3f} ms with no stream busy and the next launch not begun; most in "
            f"{t['phase']}, the launching thread in {t['op']} ({t['family']})"
        ),
    )


def launch_overhead(get: Get) -> pd.DataFrame:
    la = _ranked(get("launches"))
    if la is None or "host_bound_ms" not in la:
        return _none()
    return _summed(
        la,
        "host_bound_ms",
        lambda v, t: (
            f"launches: {v:.3f} ms in kernels shorter than their launch, most in {t['phase']} / "
            f"{t['module']} ({t['host_bound']:.0f} kernels)"
        ),
    )


def gemm_below_peak(get: Get, rule: dict) -> pd.DataFrame:
    gs = _ranked(get("gemm_shapes"))
    if gs is None or "peak_pct" not in gs:
        return _none()
    low = gs[(gs["peak_pct"] < rule["peak_pct_below"]) & gs["ideal_ms"].notna()]
    if low.empty:
        return _none()
    low = low.assign(lost_ms=(low["time_ms"] - low["ideal_ms"]).clip(lower=0.0))
    ms, top = _sum(low, "lost_ms"), _top(low, "lost_ms")
    ev, ex = [], []
    for k, v in ms.items():
        t = top.loc[k]
        shape = f"{t['op']} {int(t['m'])}x{int(t['n'])}x{int(t['k'])} {t['dtype']}"
        ev.append(f"gemm_shapes: {v:.3f} ms beyond peak; largest {shape} at {t['peak_pct']:.1f}% of peak")
        ex.append(f"--op {t['op']}")
    return _rows(ms, ev, ex)


def memory_spike(get: Get, rule: dict) -> pd.DataFrame:
    mem = _ranked(get("memory"))
    if mem is None or "peak_growth_mb" not in mem:
        return _none()
    keys = _keys(mem)
    whole = mem[mem["phase"].astype(str) == "step"].set_index([*keys, "device"])["peak_allocated_mb"]
    parts = mem[mem["phase"].astype(str) != "step"]
    peak = whole.reindex(pd.MultiIndex.from_frame(parts[[*keys, "device"]])).to_numpy(np.float64)
    growth = parts["peak_growth_mb"].to_numpy(np.float64)
    hit = (growth >= rule["min_growth_mb"]) & (growth >= rule["min_growth_pct"] / 100 * peak)
    parts = parts.assign(_peak=peak)[hit]
    if parts.empty:
        return _none()
    top = _top(parts, "peak_growth_mb")
    ev = [
        f"memory: {t['device']} grows {t['peak_growth_mb']:.1f} MB in {t['phase']} (peak {t['_peak']:.1f} MB)"
        for _, t in top.iterrows()
    ]
    return _rows(pd.Series(0.0, index=top.index), ev, "", always=True)


def _summed(df: pd.DataFrame, value: str, say: Callable[[float, pd.Series], str]) -> pd.DataFrame:
    """A category whose cost is ``value`` summed per rank (and step), its evidence ``say(cost,
    the row with the largest value)``."""
    ms, top = _sum(df, value), _top(df, value)
    return _rows(ms, [say(v, top.loc[k]) for k, v in ms.items()], "")


def _rows(ms: pd.Series, evidence: list[str], explain, always: bool = False) -> pd.DataFrame:
    out = ms.rename("ms").reset_index()
    out["evidence"], out["explain"] = evidence, explain
    out.attrs["always"] = always
    return out


def _none() -> pd.DataFrame:
    return pd.DataFrame(columns=["rank", "ms", "evidence", "explain"])


def _window(df: pd.DataFrame, window: pd.Series | None) -> np.ndarray:
    """Each row's rank's (and step's) device window (ms); NaN where unknown."""
    if window is None:
        return np.full(len(df), np.nan)
    keys = _keys(df)
    w = window.reindex(pd.MultiIndex.from_frame(df[keys]) if len(keys) > 1 else df[keys[0]])
    return w.to_numpy(np.float64)


def findings(tables: Get, rule_set: dict[str, dict], per_step: bool = False) -> pd.DataFrame:
    """The findings of a run (see the module docstring), from the tables ``tables`` gives:
    their means over steps, or ``per_step``."""

    def get(name: str) -> pd.DataFrame | None:
        df = tables(name)
        if df is not None:
            df = df.copy(deep=False)
            df.attrs["per_step"] = per_step
        return df

    idle = _ranked(get("idle"))
    window = _sum(idle, "window_ms") if idle is not None else None
    found = {
        "straggler_wait": straggler_wait(get),
        "exposed_transfer": exposed_transfer(get),
        "host_bound_idle": host_bound_idle(get),
        "launch_overhead": launch_overhead(get),
        "gemm_below_peak": gemm_below_peak(get, rule_set["gemm_below_peak"]),
        "memory_spike": memory_spike(get, rule_set["memory_spike"]),
    }
    parts = []
    for cat, df in found.items():
        if df.empty:
            continue
        w = _window(df, window)
        # A cost summed over streams that ran at once (GEMMs on two streams) is at most the step.
        ms = np.fmin(df["ms"].to_numpy(np.float64), w)
        share = np.divide(100.0 * ms, w, out=np.full(len(ms), np.nan), where=w > 0)  # no window: unknown
        df = df.assign(ms=ms, category=cat, share_pct=share, fix=rule_set[cat]["fix"])
        if not df.attrs.get("always"):
            r = rule_set[cat]
            df = df[(df["ms"] >= r["min_ms"]) & (df["share_pct"].fillna(0.0) >= r["min_share_pct"])]
        parts.append(df)
    if not parts:
        return pd.DataFrame(columns=[c for c in COLUMNS if c != "step"])
    out = pd.concat(parts, ignore_index=True)
    out["_c"] = out["category"].map({c: i for i, c in enumerate(CATEGORIES)})
    by = ["ms", "_c", *_keys(out)]
    out = out.sort_values(by, ascending=[False, True, *[True] * (len(by) - 2)], kind="stable")
    return out[[c for c in COLUMNS if c in out.columns]].reset_index(drop=True)


def _combine(get: Get, per_step: bool, path: str | None) -> pd.DataFrame:
    return findings(get, rules(path), per_step)


declare(
    TableSpec(
        name="findings",
        title="Findings: the largest avoidable costs, largest first",
        func=None,
        combine=_combine,
        sources=(
            "idle",
            "phases",
            "collectives",
            "stragglers",
            "idle_host",
            "launches",
            "gemm_shapes",
            "memory",
        ),
        keys=("category", "evidence", "explain", "fix"),  # labels of the row
        values={"ms": MS, "share_pct": PCT},
        aggregate=PER_STEP,  # each number is per step already (the mean view: mean per step)
        chart="none",
    )
)
