"""Unit tests of the first pipeline steps: join_launches and find_steps."""

from __future__ import annotations

import numpy as np
from frames import ANNOTATION, CPU_OP, KERNEL, RUNTIME, ev, trace

from tracekit.pipeline.launches import join_launches
from tracekit.pipeline.steps import find_steps


def _gpu():
    return trace(
        ev(ANNOTATION, "ProfilerStep#4", 100, 100),
        ev(ANNOTATION, "ProfilerStep#5", 200, 100),
        ev(RUNTIME, "cudaLaunchKernel", 110, 5, corr=7),
        ev(RUNTIME, "cudaLaunchKernel", 210, 5, corr=8),
        ev(KERNEL, "gemm", 150, 20, pid=0, tid=7, corr=7, stream=7),
        ev(KERNEL, "mul", 260, 10, pid=0, tid=7, corr=8, stream=7),
        ev(KERNEL, "early", 20, 10, pid=0, tid=7, corr=3, stream=7),  # launched before the file
        ev(KERNEL, "orphan", 230, 5, pid=0, tid=7, corr=99, stream=7),
    )


def test_join_launches_joins_by_correlation_id_only():
    t = join_launches(_gpu())
    a = t.acts.set_index(t.acts["name"].astype(str))
    assert t.mode == "gpu"
    assert a.loc["gemm", "launch_ev"] == 2 and a.loc["gemm", "launch_ts"] == 110
    assert str(a.loc["gemm", "runtime"]) == "cudaLaunchKernel" and a.loc["gemm", "corr"] == 7
    assert not a.loc["orphan", "launched"] and a.loc["orphan", "launch_pid"] == -1
    assert a.loc["orphan", "launch_ts"] == 230  # no launch: its own start
    assert any(
        w.code == "no_launch"
        and w.message.startswith("2 of 4 device activities (33.3% of device time) have no")
        for w in t.warnings
    )


def test_join_launches_cpu_mode_splits_ops_into_self_time():
    """DESIGN.md: CPU-only traces are measured over op self time; aten::mm keeps its GEMM time
    when its only child is aten::resolve_conj (issue 12.4)."""
    t = join_launches(
        trace(
            ev(CPU_OP, "aten::linear", 0, 100),
            ev(CPU_OP, "aten::mm", 10, 50),
            ev(CPU_OP, "aten::resolve_conj", 20, 5),
            ev(CPU_OP, "aten::relu", 120, 10),
        )
    )
    assert t.mode == "cpu"
    a = t.acts
    pieces = {
        n: sorted(zip(g["start"].tolist(), g["end"].tolist()))
        for n, g in a.groupby(a["name"].astype(str), observed=True)
    }
    assert pieces == {
        "aten::linear": [(0, 10), (60, 100)],
        "aten::mm": [(10, 20), (25, 60)],
        "aten::resolve_conj": [(20, 25)],
        "aten::relu": [(120, 130)],
    }
    # every op counted once, whatever its number of pieces; each piece launched by its own op
    assert a.groupby(a["name"].astype(str), observed=True)["count"].sum().to_dict() == {
        "aten::linear": 1,
        "aten::mm": 1,
        "aten::relu": 1,
        "aten::resolve_conj": 1,
    }
    assert (a["launch_ev"] == a["ev"]).all()
    assert (a["launch_ts"].to_numpy() == t.events["ts"].to_numpy()[a["ev"].to_numpy()]).all()


def test_find_steps_numbers_activities_by_their_launch():
    t = find_steps(join_launches(_gpu()))
    a = t.acts.set_index(t.acts["name"].astype(str))
    assert a.loc["gemm", "step"] == 4 and str(a.loc["gemm", "step_by"]) == "launch"
    assert a.loc["mul", "step"] == 5
    assert a.loc["early", "step"] == -1 and str(a.loc["early", "step_by"]) == "none"
    # no launch in the file: no step, never placed by time (issue 12.1)
    assert a.loc["orphan", "step"] == -1 and str(a.loc["orphan", "step_by"]) == "none"
    assert t.meta["unlaunched_activities"] == 2 and t.meta["step_source"] == "ProfilerStep"
    assert t.step_ranges["step"].tolist() == [4, 5]
    assert t.meta["has_profiler_steps"]


def test_find_steps_without_markers_is_one_window():
    t = find_steps(
        join_launches(trace(ev(RUNTIME, "cudaLaunchKernel", 0, 5, corr=1), ev(KERNEL, "k", 10, 5, corr=1)))
    )
    assert t.acts["step"].tolist() == [0] and t.acts["step_by"].astype(str).tolist() == ["trace"]
    assert not t.meta["has_profiler_steps"]
    assert np.asarray(t.step_ranges["step"]).size == 0
