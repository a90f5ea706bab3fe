"""A rank of several window files computes its interval tables a file at a time
(:mod:`tracekit.ranks.window_tables`), with the tables of the rank's intervals read whole."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from tracekit.analyses import REGISTRY
from tracekit.analyses._registry import INTERVALS

import tracekit
from tracekit.ranks.grouping import MergedIntervals
from tracekit.testing import llama_training, write_trace

sys.path.insert(0, str(Path(__file__).parent))
from test_ranks import split

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-train-1rank"


def _copies(d: Path) -> Path:
    d.mkdir()
    for i in range(4):  # copies of one rank-0 file: successive windows of one rank
        shutil.copy(next(SAMPLE.glob("*.pt.trace.json.gz")), d / f"w{i}.pt.trace.json.gz")
    return d


def _windows(d: Path) -> Path:
    d.mkdir()
    t, _ = llama_training(n_layers=2, n_steps=6, seed=3)
    a, rest = split(t, 7)
    b, c = split(rest, 9)
    for name, x in (("a", a), ("b", b), ("c", c)):
        write_trace(d / f"{name}.pt.trace.json", x)
    return d


@pytest.mark.parametrize("make", [_copies, _windows], ids=["copies", "windows"])
def test_every_table_by_file_equals_the_table_of_the_whole_rank(tmp_path, monkeypatch, make) -> None:
    d = make(tmp_path / "rank")
    whole = tracekit.load(d, cache=False, jobs=2, keep_intervals=True)
    by_file = tracekit.load(d, cache=False, jobs=2, keep_intervals=False)
    assert isinstance(by_file.ranks[0].__dict__["_intervals"], MergedIntervals)

    def no_whole_read(self, columns=None):
        raise AssertionError("a rank's intervals were read whole")

    monkeypatch.setattr(MergedIntervals, "load", no_whole_read)
    names = [n for n in whole.names() if REGISTRY[n].reads == INTERVALS and REGISTRY[n].of_intervals]
    assert {"phases", "modules", "kernels", "idle", "top_kernels", "op_shapes"} <= set(names)
    for per_step in (True, False):
        for n in names:
            got, want = by_file.table(n, per_step=per_step), whole.table(n, per_step=per_step)
            pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True), obj=n)


def test_a_stream_gap_never_spans_two_window_files(tmp_path) -> None:
    """A stream's idle gaps are between its activities in one trace file (docs/metrics.md,
    idle_causes): from the last activity of one profiling window to the first of the next the
    profiler did not record, so no step gets that time. Each file's steps have the causes that
    file alone gives; the rank's intervals joined whole would give the steps beside each cut
    more (what a merged rank did before it was computed a file at a time)."""
    from tracekit.analyses import TABLES

    from tracekit.pipeline.windows import frame_windows

    d = _windows(tmp_path / "rank")
    an = tracekit.load(d, cache=False, jobs=2)
    keys = ["step", "phase", "stream", "cause"]
    got = an.table("idle_causes", per_step=True).set_index(keys)["idle_ms"]
    for name, steps in (("b", [7, 8]), ("c", [9, 10])):
        alone = tracekit.load(d / f"{name}.pt.trace.json", cache=False, jobs=1)
        want = alone.table("idle_causes", per_step=True).set_index(keys)["idle_ms"]
        assert sorted(set(want.index.get_level_values("step"))) == steps
        pd.testing.assert_series_equal(got.loc[list(want.index)], want)
    att = an.ranks[0]
    joined = TABLES["idle_causes"](att.__dict__["_intervals"].load(), frame_windows(att.windows))
    edge = joined[joined["step"].isin([6, 7, 8, 9])]["idle_ms"].sum()
    assert edge > got.loc[[k for k in got.index if k[0] in (6, 7, 8, 9)]].sum()


def test_a_file_with_no_rows_leaves_the_others_dtypes() -> None:
    """A file with no memcpy rows has an empty float ``bytes`` column; joined, the others'
    int64 stays int64 (as the rank's whole table has it)."""
    from tracekit.ranks.window_tables import _joined

    empty = pd.DataFrame({"step": pd.Series([], dtype="int64"), "bytes": pd.Series([], dtype="float64")})
    full = pd.DataFrame({"step": [3, 4], "bytes": [10, 20]})
    got = _joined([empty, full, empty])
    assert got["bytes"].dtype == "int64" and got["bytes"].tolist() == [10, 20]
    assert _joined([empty, empty]) is empty
