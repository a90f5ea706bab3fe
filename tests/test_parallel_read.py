"""The parallel reader (byte ranges of one plain file decoded by forked processes) == the serial one.

Every shared trace is written out plain and read with ranges of a few hundred KiB decoded by two child
processes and the parent: the columns, metadata and warnings must be exactly the serial reader's,
and the parallel path must really have been taken. Cuts that fall inside strings, broken text in
a child's range, gzip and small files fall back to the serial reader, with its results and errors.
"""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
from events_equal import assert_events_equal
from shared_traces import params

import tracekit.forked as FK
import tracekit.read.parallel as P
import tracekit.read.reader as R
from tracekit.errors import TraceError


@pytest.fixture
def small_ranges(monkeypatch):
    """Parallel decoding for any size, slices of 256 KiB arriving 64 KiB at a time; and a record
    of what :func:`read_parallel` returned. (pytest-xdist's workers run a helper thread; the
    children here only decode, so the single-thread rule is lifted for these tests.)"""
    monkeypatch.setattr(P, "MIN_BYTES", 0)
    monkeypatch.setattr(P, "PIECE_BYTES", 1 << 16)
    monkeypatch.setattr(R, "CHUNK_BYTES", 1 << 18)
    monkeypatch.setattr(FK.threading, "active_count", lambda: 1)
    seen: list = []
    real = R.read_parallel

    def spy(path, jobs, chunk):
        got = real(path, jobs, chunk)
        seen.append(got)
        return got

    monkeypatch.setattr(R, "read_parallel", spy)
    return seen


def _serial(path) -> R.RawTrace:
    chunk, R.CHUNK_BYTES = R.CHUNK_BYTES, 1 << 40  # one whole decode: the plainest reading
    try:
        return R.read_trace(path, jobs=1)
    finally:
        R.CHUNK_BYTES = chunk


def _same(a: R.RawTrace, b: R.RawTrace) -> None:
    assert_events_equal(a.events, b.events)
    assert a.meta == b.meta
    assert a.warnings == b.warnings


@pytest.mark.shared
@pytest.mark.parametrize("path", params())
def test_parallel_decode_equals_serial(path, tmp_path, small_ranges):
    raw = open(path, "rb").read()
    text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    p = tmp_path / "t.json"
    p.write_bytes(text)
    serial = _serial(p)
    parallel = R.read_trace(p, jobs=3)
    _same(parallel, serial)
    if len(text) > 1 << 22:  # big enough for three ranges of several slices each
        assert small_ranges[-1] is not None, "fell back to the serial reader"


def _events(n: int, name: str = "aten::mm") -> list[dict]:
    return [
        {"ph": "X", "cat": "cpu_op", "name": f"{name}{i}", "pid": 1, "tid": 1, "ts": i * 2.5, "dur": 2}
        for i in range(n)
    ]


def _write(tmp_path, events: list[dict], **extra) -> str:
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events, **extra}, indent=1))
    return str(p)


def test_parallel_path_is_taken_and_keeps_the_tail(tmp_path, small_ranges):
    """Metadata after the array (rank, devices) comes from the parent's range; thread names from
    metadata events inside a child's range survive; event order is the file's."""
    evs = _events(60000)
    evs.insert(10, {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}})
    p = _write(tmp_path, evs, distributedInfo={"rank": 5, "world_size": 8}, deviceProperties=[{"name": "G"}])
    got = R.read_trace(p, jobs=3)
    assert small_ranges[-1] is not None
    _same(got, _serial(p))
    assert got.events["name"].astype(str).tolist() == [f"aten::mm{i}" for i in range(60000)]
    assert (got.meta["rank"], got.meta["devices"]) == (5, ["G"])
    assert got.meta["thread_names"] == {"1:1": "main"}
    assert got.meta["events_in_file"] == 60001


def test_cuts_inside_strings_give_the_serial_result(tmp_path, small_ranges):
    """Every name holds '}, {': a cut may land inside a string; the result is still exact."""
    p = _write(tmp_path, _events(60000, name="op}, {x]"))
    _same(R.read_trace(p, jobs=4), _serial(p))


def test_broken_text_in_a_childs_range_errors_like_serial(tmp_path, small_ranges):
    p = _write(tmp_path, _events(60000))
    text = open(p, "rb").read()
    cut = len(text) // 4
    open(p, "wb").write(text[:cut] + b"\x01" + text[cut + 1 :])
    with pytest.raises(TraceError) as serial:
        _serial(p)
    with pytest.raises(TraceError) as parallel:
        R.read_trace(p, jobs=3)
    assert str(parallel.value) == str(serial.value)
    assert small_ranges == [None]


def test_gzip_and_small_files_are_read_serially(tmp_path, monkeypatch):
    p = _write(tmp_path, _events(100))
    assert not P.usable(10 << 20, 2)  # below MIN_BYTES
    assert not P.usable(1 << 30, 1)  # one job
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(open(p, "rb").read()))
    assert P.plan(gz, 2) is None
    assert P.plan(p, 2) is not None


def test_read_jobs_from_the_environment(monkeypatch):
    monkeypatch.setenv("TRACEKIT_READ_JOBS", "1")
    assert P.read_jobs() == 1
    monkeypatch.setenv("TRACEKIT_READ_JOBS", "3")
    assert P.read_jobs() == 3
    monkeypatch.setenv("TRACEKIT_READ_JOBS", "many")
    assert P.read_jobs() >= 1


def _inflate_threads() -> int:
    import threading

    return sum(t.name == "tracekit-inflate" for t in threading.enumerate())


def test_gzip_is_inflated_one_piece_ahead_and_errors_arrive_in_order(tmp_path, monkeypatch):
    """The pieces arrive whole and in order, then the stream's error (a truncated gzip) after
    them; closing the reader early stops the inflating thread."""
    import tracekit.read.files as F

    monkeypatch.setattr(F, "PIECE_BYTES", 1 << 12)
    text = json.dumps({"traceEvents": _events(3000)}).encode()
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(text))
    assert b"".join(F.iter_text(gz)) == text
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gz.read_bytes()[:-20])
    got = []
    with pytest.raises(TraceError, match="truncated gzip"):
        for piece in F.iter_text(cut):
            got.append(piece)
    assert text.startswith(b"".join(got)) and len(got) > 3
    pieces = F.iter_text(gz)
    next(pieces)
    pieces.close()
    assert _inflate_threads() == 0


# The children: forked directly, columns sent through an in-memory file -------------------------


class _Hung(BaseException):
    pass


@pytest.fixture
def forks(monkeypatch):
    """The pids :func:`read_parallel` forks; at the end, each must have been reaped (no zombie,
    no child left running). A call that hangs fails after a minute instead of hanging the run."""
    import os
    import signal

    pids: list[int] = []
    real = P.os.fork

    def fork():
        pid = real()
        if pid:
            pids.append(pid)
        return pid

    def hung(signum, frame):
        raise _Hung  # not an Exception: read_parallel must not take it for a child's failure

    monkeypatch.setattr(P.os, "fork", fork)
    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    yield pids
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)
    for pid in pids:
        with pytest.raises(ChildProcessError):  # reaped already
            os.waitpid(pid, os.WNOHANG)


def _die_after_first_write(monkeypatch):
    """Children that write the start of their columns, then are killed."""
    import os
    import signal

    real = FK._write_all
    parent = os.getpid()

    def write_all(fd, data):
        real(fd, data)
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(FK, "_write_all", write_all)


def test_a_child_killed_mid_transfer_gives_the_serial_result(tmp_path, small_ranges, forks, monkeypatch):
    """Each child dies after writing part of its columns: the parent sees its pipe end without the
    'done' byte (it holds no writer of it, nor does the other child), gives up, reaps both."""
    p = _write(tmp_path, _events(60000))
    _die_after_first_write(monkeypatch)
    got = R.read_trace(p, jobs=3)
    assert small_ranges == [None] and len(forks) == 2
    _same(got, _serial(p))


def test_a_failing_child_gives_the_serial_result(tmp_path, small_ranges, forks, monkeypatch):
    def fail(*args):
        raise MemoryError

    monkeypatch.setattr(P, "_decode_range", fail)
    p = _write(tmp_path, _events(60000))
    got = R.read_trace(p, jobs=2)
    assert small_ranges == [None] and len(forks) == 1
    _same(got, _serial(p))


def test_ctrl_c_in_the_parent_kills_and_reaps_the_children(tmp_path, small_ranges, forks, monkeypatch):
    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(P, "stream_decode", interrupted)
    p = _write(tmp_path, _events(60000))
    with pytest.raises(KeyboardInterrupt):
        P.read_parallel(p, 3, 1 << 18)
    assert len(forks) == 2  # and both reaped (the fixture checks)


def test_columns_sent_whole_or_not_at_all(tmp_path):
    """What a child sends is read back exactly; a file cut short anywhere reads as None."""
    import os

    p = _write(tmp_path, _events(5000))
    text = open(p, "rb").read()
    first, last = text.index(b"{", 1), text.rindex(b"}", 0, text.rindex(b"]")) + 1
    builder = P._decode_range(p, first, last, 1 << 16)
    fd = P._anonymous_file()
    try:
        FK.send(fd, builder)
        size = os.fstat(fd).st_size
        back = P._receive(fd)
        assert back is not None and back.n_events == builder.n_events == 5000
        for mine, theirs in zip(builder.parts, back.parts, strict=True):
            assert mine.keys() == theirs.keys()
            for k in mine:
                pd.testing.assert_series_equal(pd.Series(mine[k]), pd.Series(theirs[k]))
        for cut in (size - 1, size // 2, 9, 3):
            os.ftruncate(fd, cut)
            assert P._receive(fd) is None
    finally:
        os.close(fd)
