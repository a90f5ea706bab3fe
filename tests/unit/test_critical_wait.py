"""analyses/critical_wait.py on hand-made frames: a comm piece cut at each instance's last
arrival, overlapping instances counted once, the table's rows moved from comm to wait, and the
timeline's comm bars cut."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracekit.analyses import critical_wait as cw


def _waits(rows):
    return pd.DataFrame(rows, columns=["rank", "start", "end", "last", "waited_on_rank"]).astype(np.int64)


def _comm(rows):
    f = pd.DataFrame(rows, columns=["step", "start", "end"])
    return f.assign(phase="backward", module="Other", kind="comm")


def test_a_piece_over_two_instances_and_an_offset():
    # rank 1's clock is 1000 ns ahead: its piece 1100-1500 is 100-500 on the reference clock,
    # over instance A (100-300, last arrival 250: waited on rank 3) and B (300-500, last 320: rank 0)
    waits = _waits([(1, 100, 300, 250, 3), (1, 300, 500, 320, 0), (2, 100, 300, 250, 3)])
    got = cw.wait_segments(1, _comm([(1, 1100, 1500)]), waits, 1000)
    assert got[["start", "end", "waited_on_rank"]].values.tolist() == [[100, 250, 3], [300, 320, 0]]


def test_overlapping_instances_count_once():
    waits = _waits([(0, 0, 100, 80, 1), (0, 10, 60, 50, 2)])
    got = cw.wait_segments(0, _comm([(1, 0, 100)]), waits, 0)
    assert (got["end"] - got["start"]).sum() == 80
    assert got[["start", "end"]].values.tolist() == [[0, 80]]


def test_the_table_moves_time_from_comm_to_wait():
    table = pd.DataFrame(
        {"rank": [0, 0], "step": [1, 1], "kind": ["comm", "kernel"], "phase": ["backward"] * 2,
         "module": ["Other", "MLP"], "time_ms": [0.5, 1.0]}
    )  # fmt: skip
    segs = pd.DataFrame(
        {"rank": [0], "step": [1], "phase": ["backward"], "module": ["Other"], "start": [0], "end": [200_000],
         "waited_on_rank": [3]}
    )  # fmt: skip
    out = cw.split_table(table, cw.wait_rows(segs, None))
    assert out["time_ms"].sum() == 1.5
    wait = out[out["kind"] == "wait"]
    assert wait["time_ms"].tolist() == [0.2] and wait["waited_on_rank"].tolist() == [3]
    assert out.loc[out["kind"] == "comm", "time_ms"].round(12).tolist() == [0.3]


def test_the_timeline_cut():
    rows = pd.DataFrame(
        {"rank": [0, 0], "step": [1, 1], "kind": ["kernel", "comm"], "phase": ["backward"] * 2,
         "module": ["MLP", "Other"], "start_ms": [0.0, 0.1], "end_ms": [0.1, 0.4], "pieces": [1, 2]}
    )  # fmt: skip
    segs = pd.DataFrame({"rank": [0], "step": [1], "lo": [150_000], "hi": [250_000], "waited_on_rank": [2]})
    out = cw.split_timeline(rows, segs)
    got = list(zip(out["kind"], out["start_ms"], out["end_ms"], out["waited_on_rank"], out["pieces"]))
    assert got == [
        ("kernel", 0.0, 0.1, -1, 1),
        ("comm", 0.1, 0.15, -1, 2),
        ("wait", 0.15, 0.25, 2, 2),
        ("comm", 0.25, 0.4, -1, 2),
    ]
