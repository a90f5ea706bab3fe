"""Windows computed once: :func:`frame_windows` derives a rank's step and phase windows, and
every table reads them from that one :class:`Windows` (no table derives windows itself)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses import TABLES

import tracekit
from tracekit.filters import Filters
from tracekit.pipeline.state import Trace
from tracekit.pipeline.windows import Windows, find_windows, frame_windows
from tracekit.ranks import tables as rank_tables

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tracekit.testing import llama_training, write_trace

EPOCH = 1_700_000_000_000_000_000


def _windows() -> pd.DataFrame:
    rows = [(1, 0, 1, "forward")]  # cut: under 10% of the median step
    for k in (2, 3, 4):
        rows += [(k, 100 * k, 100 * k + 30, "forward"), (k, 100 * k + 40, 100 * k + 70, "backward")]
        rows += [(k, 100 * k + 75, 100 * k + 90, "optimizer")]
    acts = pd.DataFrame(rows, columns=["step", "start", "end", "phase"])
    acts[["start", "end"]] += EPOCH
    acts["phase"] = pd.Categorical(acts["phase"], categories=["forward", "backward", "optimizer"])
    return find_windows(Trace(path="unit.json", events=pd.DataFrame(), acts=acts)).windows


def test_frame_windows_gives_the_complete_steps_and_their_phases():
    w = frame_windows(_windows())
    assert w.steps["step"].tolist() == [2, 3, 4]  # the cut step 1 is left out
    assert w.steps["start"].tolist() == [EPOCH + 200, EPOCH + 300, EPOCH + 400]
    assert w.steps["start"].dtype == np.int64 and w.steps["window_ms"].tolist() == [90 / 1e6] * 3
    p = w.phases[w.phases["step"] == 3].set_index("phase")
    assert p.index.tolist() == ["forward", "backward", "unattributed", "optimizer"]
    assert p.loc["backward", "lo"] == EPOCH + 340 and p.loc["backward", "hi"] == EPOCH + 375
    assert p["lo"].dtype == np.int64 and (p["window_ms"] == 90 / 1e6).all()
    assert p["wall_ms"].sum() == pytest.approx(90 / 1e6)  # the phase windows tile the step
    assert not w.has_unattributed()


def test_every_table_reads_one_windows_framed_once_per_rank(tmp_path, monkeypatch):
    trace, _ = llama_training(n_steps=4, n_layers=2, seed=7)
    path = write_trace(tmp_path / "t.json", trace)
    framed: list[Windows] = []
    seen: dict[str, list[int]] = {}

    def counting(windows: pd.DataFrame) -> Windows:
        framed.append(frame_windows(windows))
        return framed[-1]

    def spy(name, func):
        def table(intervals, windows):
            assert isinstance(windows, Windows)
            seen.setdefault(name, []).append(id(windows))
            return func(intervals, windows)

        return table

    monkeypatch.setattr(rank_tables, "frame_windows", counting)
    for name, func in list(TABLES.items()):
        monkeypatch.setitem(TABLES, name, spy(name, func))
    a = tracekit.load(path, cache=False, jobs=1)
    a.tables()
    a.tables(per_step=True)
    assert len(framed) == 1
    # every table the run has (a trace without memory events has no memory table)
    assert set(seen) == set(TABLES) & set(a.names()) and {i for ids in seen.values() for i in ids} == {
        id(framed[0])
    }

    done = a.ranks[0].meta["complete_steps"]
    b = a.filtered(Filters(steps=tuple(done[:2])))
    b.tables()
    assert len(framed) == 2 and framed[1].steps["step"].tolist() == done[:2]
