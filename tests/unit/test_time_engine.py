"""Unit tests of the time engine: find_windows, add_shares and tracekit.pipeline.intervals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tracekit.pipeline.intervals import containing, measure_by, minus_measure_by
from tracekit.pipeline.shares import add_shares
from tracekit.pipeline.state import Trace
from tracekit.pipeline.windows import find_windows

EPOCH = 1_700_000_000_000_000_000  # epoch-scale nanoseconds: float64 would round them


def _acts(rows):
    df = pd.DataFrame(rows, columns=["step", "start", "end", "phase", "group"])
    df["start"] += EPOCH
    df["end"] += EPOCH
    df["phase"] = pd.Categorical(df["phase"], categories=["forward", "backward", "optimizer"])
    return Trace(path="unit.json", events=pd.DataFrame(), acts=df)


def test_find_windows_tiles_each_step_and_keeps_int64():
    t = _acts(
        [
            (1, 0, 10, "forward", "compute"),
            (1, 13, 20, "backward", "compute"),
            (1, 21, 30, "optimizer", "compute"),
            (2, 40, 50, "forward", "compute"),
            (2, 51, 61, "optimizer", "compute"),
        ]
    )
    t = find_windows(t)
    s = t.steps.set_index("step")
    assert s.loc[1, "t_backward"] == EPOCH + 13 and s.loc[1, "t_optimizer"] == EPOCH + 21
    assert s.loc[2, "t_backward"] == EPOCH + 51  # no backward: collapses onto the optimizer
    w = t.windows[t.windows["step"] == 2].set_index("window")
    assert w.loc["step", "start"] == EPOCH + 40 and w.loc["step", "end"] == EPOCH + 61
    assert w.loc["backward", "start"] == w.loc["backward", "end"] == EPOCH + 51
    assert t.windows["complete"].all()


def test_find_windows_marks_a_cut_first_step():
    rows = [(1, 0, 1, "forward", "compute")] + [
        (k, 100 * k, 100 * k + 90, "forward", "compute") for k in (2, 3, 4)
    ]
    t = find_windows(_acts(rows))
    assert t.steps["complete"].tolist() == [False, True, True, True]
    assert [(w.code, w.step) for w in t.warnings] == [("step_cut", 1)]


def test_add_shares_splits_instants_and_hides_comm_under_compute():
    # step 1: two compute kernels overlap on [5, 10); comm [8, 20) is exposed on [10, 20).
    # step 2 overlaps step 1 in time but is its own clock.
    t = _acts(
        [
            (1, 0, 10, "forward", "compute"),
            (1, 5, 15, "forward", "compute"),
            (1, 8, 20, "forward", "comm"),
            (2, 12, 14, "forward", "compute"),
        ]
    )
    t = add_shares(find_windows(t))
    share = t.acts["share_forward"].to_numpy()
    assert share == pytest.approx([7.5, 7.5, 5.0, 2.0])
    assert t.acts["window"].tolist() == ["forward"] * 4


def test_containing_picks_the_range_of_the_same_process():
    got = containing(
        np.array([1, 1, 2, 1]),
        np.array([5, 15, 5, 30]),
        np.array([1, 1, 2]),
        np.array([0, 10, 0]),
        np.array([10, 20, 3]),
    )
    assert got.tolist() == [0, 1, -1, -1]


def test_measure_by_and_minus_measure_by():
    a = pd.DataFrame({"step": [1, 1, 2], "k": ["x", "x", "x"], "start": [0, 5, 0], "end": [10, 20, 4]})
    b = pd.DataFrame({"step": [1, 2], "start": [15, 1], "end": [30, 2]})
    assert measure_by(a, ["step"]).tolist() == [20, 4]
    assert minus_measure_by(a, b, ["step", "k"], ["step"]).tolist() == [15, 3]
