"""Jobs shared with a forked child (:mod:`tracekit.forked`), and the tables computed that way.

The results must be those of running the jobs here, in order, whatever the child does: take some
jobs, fail, die in the middle, or never get the chance. pytest-xdist's workers run a helper
thread, which makes :func:`~tracekit.forked.usable` say no: the tests that need the fork lift
that rule.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
import tracekit.analysis as A
import tracekit.forked as F
import tracekit.ranks.tables

SAMPLE = Path(__file__).resolve().parent.parent / "sample_traces" / "tiny-train-1rank"


@pytest.fixture
def forks(monkeypatch):
    """Forking allowed in this (xdist) worker; the pids of the children forked."""
    monkeypatch.setattr(F.threading, "active_count", lambda: 1)
    monkeypatch.setattr(F.mp, "current_process", lambda: type("P", (), {"daemon": False})())
    pids: list[int] = []
    real = os.fork

    def fork():
        pid = real()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(F.os, "fork", fork)
    return pids


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_both_processes_take_jobs_and_results_come_in_order(forks):
    parent = os.getpid()

    def run(job):
        time.sleep(0.05)  # long enough for the child to take some
        return job * 10, os.getpid(), np.arange(job)

    got = F.share(list(range(6)), run)
    assert [g[0] for g in got] == [j * 10 for j in range(6)]
    assert all(np.array_equal(g[2], np.arange(j)) for j, g in enumerate(got))
    assert len(forks) == 1
    assert {g[1] for g in got} == {parent, forks[0]}
    assert _reaped(forks[0])


def _raise() -> None:
    raise RuntimeError("only in the child")


def _crash() -> None:
    os._exit(3)  # no exception, no result written


@pytest.mark.parametrize("fail", [_raise, _crash], ids=["raises", "dies midway"])
def test_a_child_that_fails_loses_nothing(forks, fail):
    parent = os.getpid()

    def run(job):
        if os.getpid() != parent and job >= 2:
            fail()
        time.sleep(0.02)
        return job

    assert F.share(list(range(5)), run) == list(range(5))
    assert len(forks) == 1 and _reaped(forks[0])


def test_an_error_here_is_raised_and_the_child_is_reaped(forks):
    parent = os.getpid()

    def run(job):
        if os.getpid() == parent:
            raise ValueError("here")
        time.sleep(5)  # the child would take long: it is killed, not waited for
        return job

    t = time.perf_counter()
    with pytest.raises(ValueError, match="here"):
        F.share([1, 2, 3], run)
    assert time.perf_counter() - t < 4
    assert len(forks) == 1 and _reaped(forks[0])


def test_no_fork_with_another_thread_or_one_job(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(F.os, "fork", lambda: calls.append(1) or 0)
    monkeypatch.setattr(F.threading, "active_count", lambda: 2)
    assert F.share([1, 2, 3], lambda j: j + 1) == [2, 3, 4]
    monkeypatch.setattr(F.threading, "active_count", lambda: 1)
    assert F.share([7], lambda j: j) == [7]
    assert F.share([], lambda j: j) == []
    assert calls == []


def test_tables_shared_by_two_processes_are_the_same(forks, monkeypatch):
    """A whole analysis with its tables split between two processes (the threshold lowered to
    this small trace) equals the one computed here alone: values, dtypes and warnings."""
    trace = next(p for p in SAMPLE.iterdir() if p.name.endswith(".json.gz"))
    ranks = tracekit.load(trace, cache=False, jobs=1).ranks
    monkeypatch.setattr(tracekit.ranks.tables, "SHARED_ROWS", 0)
    alone = A.Analysis(path=str(trace), ranks=ranks, jobs=1)
    assert not forks
    shared = A.Analysis(path=str(trace), ranks=ranks, jobs=2)
    assert len(forks) == 1  # every table at once, for the self-checks and the rest
    assert [w.as_dict() for w in shared.warnings] == [w.as_dict() for w in alone.warnings]
    mine, theirs = alone.tables(), shared.tables()
    assert len(forks) == 1
    assert list(mine) == list(theirs)
    for name in mine:
        pd.testing.assert_frame_equal(mine[name], theirs[name], check_exact=True)
    for name in ("phases", "kernels"):
        pd.testing.assert_frame_equal(alone.table(name, per_step=True), shared.table(name, per_step=True))
