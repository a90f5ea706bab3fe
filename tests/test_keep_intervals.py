"""A run without the result cache that says it reads no interval after the tables
(``keep_intervals=False``, what ``tracekit analyze`` says without --per-step or a filter):
its workers send back a handle instead of each rank's intervals (:mod:`tracekit.ranks.again`),
the report is the same, and intervals read after all are the same rows, or an error when the
file changed since."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.errors import TraceError
from tracekit.ranks.again import Again

SAMPLE = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-zero2-2ranks"


@pytest.fixture
def ranks(tmp_path) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    for f in SAMPLE.glob("rank*.json.gz"):
        shutil.copy(f, d / f.name)
    return d


def _load(path: Path, keep: bool):
    return tracekit.load(path, cache=False, jobs=2, keep_intervals=keep)


def test_the_report_is_the_same_and_no_interval_is_sent_back(ranks):
    kept, handed = _load(ranks, True), _load(ranks, False)
    assert not any(a.lazy for a in kept.ranks.values())
    assert all(isinstance(a.__dict__["_intervals"], Again) for a in handed.ranks.values())
    for name, df in kept.tables().items():
        pd.testing.assert_frame_equal(handed.table(name), df, obj=name)


def test_intervals_read_after_all_are_the_same_rows(ranks):
    kept, handed = _load(ranks, True), _load(ranks, False)
    pd.testing.assert_frame_equal(handed.intervals, kept.intervals)
    pd.testing.assert_frame_equal(handed.table("phases", per_step=True), kept.table("phases", per_step=True))


def test_a_file_changed_since_is_an_error_not_other_rows(ranks):
    handed = _load(ranks, False)
    att = next(iter(handed.ranks.values()))
    path = Path(att.__dict__["_intervals"].source)
    with gzip.open(path, "rb") as f:
        text = f.read()
    with gzip.open(path, "wb") as f:  # the same events, other bytes: another file now
        f.write(text + b"\n")
    os.utime(path, ns=(0, 0))
    with pytest.raises(TraceError, match="changed since it was analysed"):
        att.load_intervals()


def test_one_process_and_a_cached_run_keep_their_intervals(ranks, tmp_path, monkeypatch):
    """Without a pool, tables are computed from the intervals held here; with the result cache,
    the handle is the cache entry's (:class:`tracekit.ranks.results.Stored`)."""
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    alone = tracekit.load(ranks, cache=False, jobs=1, keep_intervals=False)
    assert not any(a.lazy for a in alone.ranks.values())
    cached = tracekit.load(ranks, cache=True, jobs=2, keep_intervals=False)
    assert not any(isinstance(a.__dict__["_intervals"], Again) for a in cached.ranks.values())
