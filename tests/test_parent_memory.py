"""The memory of the process that gathers many ranks stays flat with the rank count: what it
keeps per rank is a few KB (meta, a cache handle, its tables' rows), and its transient peak
(what it holds beyond that and the output tables) does not grow with the ranks. Measured with
tracemalloc and a counting pyarrow pool, deterministically: no timing, no RSS."""

from __future__ import annotations

import gc
import os
import tracemalloc

import numpy as np
import pyarrow as pa

import tracekit
from tracekit.ranks import pool
from tracekit.testing import llama_training, write_trace


def _ranks(d, n: int) -> None:
    trace, _ = llama_training(n_steps=2, seed=3)
    for i in range(n):
        trace["distributedInfo"] = {"rank": i, "world_size": n}
        write_trace(d / f"rank{i}.pt.trace.json.gz", trace)


#: The counting pools of the measurements: arrow buffers allocated through one (kept by the
#: analysis, by pandas) point to it, so it must outlive them: it is never freed.
_POOLS: list = []


def _measured(d) -> dict:
    """A cached re-analysis of ``d`` in this process (one rank after another: deterministic),
    every table and the meta computed: bytes kept at the end, and beyond what is kept with the
    output tables held, the peak excess of Python/numpy memory and of arrow's (str columns)."""
    arrow, before = pa.proxy_memory_pool(pa.default_memory_pool()), pa.default_memory_pool()
    _POOLS.append(arrow)
    pa.set_memory_pool(arrow)
    gc.collect()
    tracemalloc.start()
    try:
        a = tracekit.load(d, jobs=1)
        out = (a.tables(), a.meta)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
        arrow_held, arrow_peak = arrow.bytes_allocated(), arrow.max_memory()
        del out
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
        assert len(a.ranks) == len(list(d.iterdir()))
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(before)
    return {"kept": kept, "excess": peak - held, "arrow": arrow_held, "arrow_excess": arrow_peak - arrow_held}


def test_the_parent_keeps_little_per_rank_and_its_peak_does_not_grow(tmp_path, monkeypatch):
    """16 vs 64 small ranks, each analysed once into the cache by a pool, then re-analysed
    from it (the tables and a handle per rank, as pool workers send them). Before: a str
    column over all ranks decoded through an object array of every row, whose arrow builder
    doubled its buffer (the arrow excess grew by 118 KB from 16 to 64 ranks, 45 KB now;
    ~7 MB at 512 ranks of the hta file); a pool's batches are the test below."""
    got = {}
    for n in (4, 16, 64):
        d = tmp_path / f"r{n}"
        d.mkdir()
        _ranks(d, n)
        monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / f"cache{n}"))
        tracekit.load(d, jobs=2).tables()  # fill the cache
        got[n] = _measured(d)  # n == 4: warm (imports, rule tables, first uses)
    per_rank = (got[64]["kept"] - got[16]["kept"]) / 48
    # a few KB: meta (since issue 29 with the device's peaks and per-step MFU), a handle, rows;
    # since issue 35.3 also the rank's critical-path pieces (kept as rows, like its memory
    # events: what --per-step recomputes from) and the path timeline's rows: 35.6 KB measured
    assert per_rank < 40 * 1024, got
    assert got[64]["excess"] - got[16]["excess"] < 128 * 1024, got
    # The str columns' temporaries beyond the output (the codes given to pyarrow's take):
    # a few bytes a row, against the hundreds of a row's text the output holds. With
    # tracekit's Python string storage (tracekit/strings.py) nothing goes through pyarrow's
    # pool at all: then its excess must not grow either.
    grown = got[64]["arrow"] - got[16]["arrow"]
    assert got[64]["arrow_excess"] - got[16]["arrow_excess"] <= grown / 10, got


class _Result:
    """A rank's result in the test below: counts its unpickled copies alive in this process."""

    alive = 0

    def __init__(self, payload: np.ndarray, opened: bool = False):
        self.payload, self.opened = payload, opened
        if opened:
            _Result.alive += 1

    def __reduce__(self):
        return _Result, (self.payload, True)

    def __del__(self):
        if self.opened:
            _Result.alive -= 1


def _work(path) -> _Result:
    return _Result(np.full(20_000, os.path.getsize(path), np.float64))


def test_the_pool_opens_one_result_at_a_time(tmp_path):
    """Small files go to pool workers in batches of up to 64, one message each; the parent
    unpickles a rank's result only when it gathers it, so however big the batches (they grow
    with the rank count) it never holds more than one rank's result open. Before, the pool's
    result thread unpickled whole batches on arrival (64 small ranks, ~16 MB)."""
    files = []
    for i in range(64):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_bytes(b"{}" * (i + 1))
    assert pool.batch_size(files, 2) == 8
    open_at_gather = []

    def gather(i: int, result: _Result) -> float:
        open_at_gather.append(_Result.alive)
        return float(result.payload[0])

    got = pool.map_ranks(_work, files, jobs=2, gather=gather)
    assert got == [2.0 * (i + 1) for i in range(64)]
    assert max(open_at_gather) == 1, open_at_gather
