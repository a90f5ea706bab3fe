"""Unit tests of the memory tables on hand-built labelled memory events (planted numbers)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracekit.analyses import memory, memory_modules, memory_timeline

from tracekit.aggregate import mean_over_present
from tracekit.pipeline.windows import frame_windows

MB = float(1 << 20)


def _windows(*steps: int):
    rows = [
        {"step": s, "window": w, "start": 0, "end": 10, "complete": True}
        for s in steps
        for w in ("step", "forward", "backward", "unattributed", "optimizer")
    ]
    return frame_windows(pd.DataFrame(rows))


def _events(rows: list[tuple]) -> pd.DataFrame:
    """(step, t_ns, device, MB, total MB or None, phase, module, held, addressed, recompute)."""
    cols = ["step", "t_ns", "device", "mb", "total", "phase", "module", "held", "has_addr", "recompute"]
    df = pd.DataFrame(rows, columns=cols)
    total = df["total"].astype(float) * MB
    return pd.DataFrame(
        {
            "step": df["step"].astype(np.int64),
            "t_ns": df["t_ns"].astype(np.int64),
            "device": df["device"].astype("category"),
            "bytes": df["mb"].astype(float) * MB,
            "total_allocated": total,
            "total_reserved": total + 100 * MB,
            "phase": df["phase"].astype("category"),
            "recompute": df["recompute"].astype(bool),
            "module": df["module"].astype("category"),
            "held": df["held"].astype(bool),
            "has_addr": df["has_addr"].astype(bool),
        }
    )


# One step on gpu:0 starting at 1000 MB: forward +300 (peak 1300), backward +50 then -250,
# optimizer +20 -10. And one CPU event with no totals.
STEP = [
    (1, 10, "gpu:0", 200, 1200, "forward", "MLP", True, True, False),
    (1, 20, "gpu:0", 100, 1300, "forward", "QKV", False, True, False),
    (1, 30, "gpu:0", -100, 1200, "forward", "QKV", False, True, False),
    (1, 40, "gpu:0", 100, 1300, "forward", "Other", True, True, False),
    (1, 50, "gpu:0", 50, 1350, "backward", "MLP", False, True, False),
    (1, 60, "gpu:0", -250, 1100, "backward", "MLP", False, True, False),
    (1, 70, "gpu:0", 20, 1120, "optimizer", "Other", False, True, False),
    (1, 80, "gpu:0", -10, 1110, "optimizer", "Other", False, True, False),
    (1, 15, "cpu", 4, None, "forward", "Other", False, False, False),
]


def _row(df: pd.DataFrame, **keys) -> pd.Series:
    sel = np.ones(len(df), bool)
    for k, v in keys.items():
        sel &= (df[k] == v).to_numpy()
    assert sel.sum() == 1, keys
    return df[sel].iloc[0]


def test_memory_table_recovers_planted_peaks_per_step_and_phase():
    ev = _events(sorted(STEP, key=lambda r: r[1]))
    out = memory.table(ev, _windows(1))
    step = _row(out, device="gpu:0", phase="step")
    assert step["events"] == 8
    assert step["peak_allocated_mb"] == 1350 and step["peak_reserved_mb"] == 1450
    assert step["peak_growth_mb"] == 350  # 1350 - 1000
    assert step["allocated_mb"] == 470 and step["freed_mb"] == 360 and step["net_mb"] == 110
    fwd = _row(out, device="gpu:0", phase="forward")
    assert fwd["peak_allocated_mb"] == 1300 and fwd["peak_growth_mb"] == 300
    bwd = _row(out, device="gpu:0", phase="backward")
    assert bwd["peak_growth_mb"] == 50  # above 1300, the level before its first event
    opt = _row(out, device="gpu:0", phase="optimizer")
    assert opt["peak_growth_mb"] == 20 and opt["peak_allocated_mb"] == 1120
    cpu = _row(out, device="cpu", phase="step")
    assert np.isnan(cpu["peak_allocated_mb"]) and cpu["peak_growth_mb"] == 4  # running sum
    assert list(out.loc[out["device"] == "gpu:0", "phase"]) == ["step", "forward", "backward", "optimizer"]


def test_growth_without_totals_is_the_running_sum_and_never_negative():
    rows = [
        (1, 1, "gpu:0", -50, None, "forward", "Other", False, False, False),
        (1, 2, "gpu:0", 30, None, "forward", "Other", False, False, False),
    ]
    out = memory.table(_events(rows), _windows(1))
    assert _row(out, phase="step")["peak_growth_mb"] == 0  # -50 then -20: never above the start
    rows[1] = (1, 2, "gpu:0", 80, None, "forward", "Other", False, False, False)
    assert _row(memory.table(_events(rows), _windows(1)), phase="step")["peak_growth_mb"] == 30


def test_incomplete_steps_are_left_out():
    rows = [(s, 1, "gpu:0", 8, 8, "forward", "Other", False, True, False) for s in (1, 2)]
    out = memory.table(_events(rows), _windows(2))
    assert out["step"].unique().tolist() == [2]


def test_mean_over_present_averages_a_row_over_the_steps_that_hold_it():
    per_step = pd.DataFrame(
        {
            "step": [1, 1, 2],
            "phase": ["step", "unattributed", "step"],
            "peak_mb": [10.0, 4.0, 20.0],
            "none_mb": [np.nan, np.nan, np.nan],
        }
    )
    out = mean_over_present(per_step, ["phase"]).set_index("phase")
    assert out.loc["step", "peak_mb"] == 15 and out.loc["unattributed", "peak_mb"] == 4
    assert out["none_mb"].isna().all()


def test_memory_modules_splits_forward_held_and_backward_freed_by_category():
    out = memory_modules.table(_events(sorted(STEP, key=lambda r: r[1])), _windows(1))
    gpu = out[out["device"] == "gpu:0"].set_index("module")
    assert list(gpu.index) == ["QKV", "MLP", "Other"]  # the paper's order, Other last
    assert gpu.loc["MLP", "forward_allocated_mb"] == 200 and gpu.loc["MLP", "held_mb"] == 200
    assert gpu.loc["QKV", "forward_allocated_mb"] == 100 and gpu.loc["QKV", "held_mb"] == 0
    assert gpu.loc["MLP", "backward_allocated_mb"] == 50 and gpu.loc["MLP", "backward_freed_mb"] == 250
    assert gpu.loc["Other", "held_mb"] == 100 and gpu.loc["Other", "backward_freed_mb"] == 0
    cpu = _row(out, device="cpu")
    assert cpu["forward_allocated_mb"] == 4 and np.isnan(cpu["held_mb"])  # no address: cannot tell


def test_recomputed_allocations_are_their_own_column():
    rows = [(1, 1, "gpu:0", 64, 64, "backward", "MLP", False, True, True)]
    row = _row(memory_modules.table(_events(rows), _windows(1)), module="MLP")
    assert row["recompute_allocated_mb"] == 64 and row["backward_allocated_mb"] == 0


def test_timeline_thins_long_curves_and_keeps_the_peak():
    n = 5 * memory_timeline.POINTS
    mb = np.ones(n)
    mb[n // 2 :] = -1
    mb[777] = 500  # a spike
    rows = [(1, i, "gpu:0", mb[i], None, "forward", "Other", False, False, False) for i in range(n)]
    out = memory_timeline.table(_events(rows), _windows(1))
    assert len(out) <= memory_timeline.POINTS
    assert out["growth_mb"].max() == np.cumsum(mb).max()
    assert out["t_ms"].is_monotonic_increasing
    short = memory_timeline.table(_events(rows[:10]), _windows(1))
    assert short["growth_mb"].tolist() == list(np.cumsum(mb[:10]))
    whole = memory_timeline.table(_events(rows), _windows(1), points=None)  # --full-series
    assert len(whole) == n and whole["growth_mb"].tolist() == list(np.cumsum(mb))


def test_timeline_budget_is_per_device_over_the_steps_and_keeps_every_steps_peak():
    steps, per = 50, 40  # 2,000 events per device: more than the budget
    rng = np.random.default_rng(3)
    rows, peaks = [], {}
    for dev in ("gpu:0", "gpu:1"):
        for s in range(1, steps + 1):
            mb = rng.integers(-5, 6, per).astype(float)
            rows += [(s, i, dev, mb[i], None, "forward", "Other", False, False, False) for i in range(per)]
            peaks[dev, s] = np.cumsum(mb).max()
    out = memory_timeline.table(_events(rows), _windows(*range(1, steps + 1)))
    for dev in ("gpu:0", "gpu:1"):
        mine = out[out["device"] == dev]
        assert len(mine) <= memory_timeline.POINTS  # 400 // (2 x 50) = 4 runs: 8 points a step
        got = mine.groupby("step")["growth_mb"].max()
        assert all(got[s] == peaks[dev, s] for s in range(1, steps + 1))  # exact, every step
    many = [(s, 0, "gpu:0", 1.0, None, "forward", "Other", False, False, False) for s in range(1, 1001)]
    many += [(s, 1, "gpu:0", -1.0, None, "forward", "Other", False, False, False) for s in range(1, 1001)]
    many += [(s, 2, "gpu:0", 3.0, None, "forward", "Other", False, False, False) for s in range(1, 1001)]
    out = memory_timeline.table(_events(sorted(many)), _windows(*range(1, 1001)))
    assert len(out) == 2 * 1000  # past the budget: a step keeps its lowest and highest point
