"""``idle_causes`` and ``launches`` on every shared real trace: no error, and sane numbers.

Per rank, step and stream, the causes add up to the stream's gap time inside the step window
(gaps measured here plainly, a loop per stream), in every step whose phases do not overlap
(where they overlap, a phase wall is its own activity and walls share time). Nothing is
negative; launch counts add up to the launched activities of the complete steps.
"""

from __future__ import annotations

import shutil
from collections import defaultdict

import numpy as np
import pytest
from shared_traces import params
from tracekit.analyses.idle_causes import CAUSES, causes, has_launches

import tracekit
from tracekit.pipeline.windows import frame_windows
from tracekit.ranks.meta import NO_LAUNCH_NOTICE


def _gap_time(iv, windows) -> dict:
    """(step, stream) -> ns of the stream's gaps inside the step window."""
    out: dict = defaultdict(int)
    steps = list(zip(windows.steps["step"], windows.steps["start"], windows.steps["end"]))
    for stream, grp in iv.groupby("stream", observed=True):
        g = grp.sort_values("start", kind="stable")
        reach = None
        for s, e in zip(g["start"].to_numpy(), g["end"].to_numpy()):
            if reach is not None and s > reach:
                for step, lo, hi in steps:
                    cut = min(hi, s) - max(lo, reach)
                    if cut > 0:
                        out[(step, str(stream))] += int(cut)
            reach = e if reach is None else max(reach, e)
    return out


@pytest.mark.parametrize("trace", params())
def test_launch_tables_on_real_traces(trace, tmp_path):
    a = tracekit.load(shutil.copy(trace, tmp_path / trace.name), cache=False, jobs=1)
    tables = a.tables(per_step=True)
    launched_any = False
    for rank, att in a.ranks.items():
        iv = att.intervals
        windows = frame_windows(att.windows)
        got = causes(iv, windows)
        if not has_launches(iv):
            assert got.empty
            continue
        launched_any = True
        assert set(got["cause"]) <= set(CAUSES)
        assert (got["idle_ms"] > 0).all()
        flat = set(att.steps.loc[~att.steps.get("phases_overlap", False), "step"])
        sums = got.groupby(["step", "stream"])["idle_ms"].sum()
        want = _gap_time(iv, windows)
        for (step, stream), ns in want.items():
            if step in flat:
                assert sums.get((step, stream), 0.0) == pytest.approx(ns / 1e6, abs=1e-6), (
                    rank,
                    step,
                    stream,
                )
        for (step, stream), ms in sums.items():
            if step in flat:
                assert ms == pytest.approx(want.get((step, stream), 0) / 1e6, abs=1e-6)
    launches = tables["launches"]
    _check_idle_host(a, tables)
    if not launched_any:
        assert tables["idle_causes"].empty and launches.empty and tables["idle_host"].empty
        assert a.meta["notices"].count(NO_LAUNCH_NOTICE) == 1
        return
    assert NO_LAUNCH_NOTICE not in a.meta["notices"]
    num = launches.select_dtypes("number")
    assert (num.to_numpy() >= 0).all()
    assert (launches["delay_p50_us"] <= launches["delay_p95_us"] + 1e-9).all()
    assert (launches["host_bound"] <= launches["launches"]).all()
    assert (launches["small_kernel_pct"] <= 100 + 1e-9).all()
    counted = sum(
        int(
            (
                att.intervals["launched"]
                & att.intervals["step"].isin(frame_windows(att.windows).steps["step"])
            ).sum()
        )
        for att in a.ranks.values()
    )
    assert int(launches["launches"].sum() + launches["other_api_launches"].sum()) == counted
    assert np.isfinite(num.to_numpy(dtype=float)).all()


def _check_idle_host(a, tables) -> None:
    """idle_host: nothing negative, and per step at most the idle table's idle time (the
    device-level gaps are idle time; gaps whose activity has no launch are left out)."""
    host, idle = tables["idle_host"], tables["idle"]
    if host.empty:
        return
    assert (host["idle_ms"] > 0).all()
    by = [c for c in ("rank", "step") if c in host.columns]
    got = host.groupby(by)["idle_ms"].sum()
    limit = idle.set_index(by)["idle_ms"]
    for att_rank, att in a.ranks.items():
        flat = set(att.steps.loc[~att.steps["phases_overlap"], "step"])
        for key, ms in got.items():
            rank, step = key if isinstance(key, tuple) else (att_rank, key)
            if rank == att_rank and step in flat:
                assert ms <= limit[key] + 1e-6, (rank, step)
