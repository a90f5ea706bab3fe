"""Issue 37.3 and 37.4: a gloo collective is one call, counted once and named by the call.

As gloo's work appears in a CPU trace (torch 2.13; tracekit/pipeline/worker_comm.py): the call
is a ``c10d::*`` op on the calling thread (holding ops of its own: FSDP2's
``c10d::_allgather_base_`` runs ``aten::chunk`` / ``aten::empty``); the work is a ``gloo:*``
range on a worker thread, outside every op there, holding the ops gloo runs; and gloo runs a
reduce-scatter as ``gloo:all_reduce``. Planted here: per step, an FSDP2-style all-gather in
forward, a reduce-scatter and two DDP-style all-reduces in backward; the comm table must count
each call once, name the reduce-scatter's range ReduceScatter, and put the ops inside the
worker's ranges in the phase of their call, with the planted times exact.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.testing import TraceBuilder

NS = 1e-6  # one nanosecond, in ms
STEPS = 2
# Each op lasts its body + 1 us (the builder's 0.6 us before and 0.4 us after its children).
AG_CALL = 1 + (2 + 1) + (1 + 1) + 45  # c10d::_allgather_base_: chunk, empty, then waits
AG_RANGE = 40  # gloo:all_gather, holding aten::view (2) and aten::copy_ (5)
RS_CALL = 1 + (3 + 1) + 35  # c10d::_reduce_scatter_base_: clone, then waits
RS_RANGE = 30  # gloo:all_reduce, holding aten::div_ (4)
AR_CALL = 1 + 5  # c10d::allreduce_ (DDP's bucket), then the main thread waits outside ops
AR_RANGE = 20


def _fsdp_ddp_step(b: TraceBuilder) -> None:
    with b.module("Linear", "layers.0"):
        with b.op("c10d::_allgather_base_"):
            with b.op("aten::chunk"):
                b.cpu(2)
            with b.op("aten::empty"):
                b.cpu(1)
            b.worker_collective(
                "gloo:all_gather", AG_RANGE, delay=2, inner=[("aten::view", 1, 2), ("aten::copy_", 30, 5)]
            )
            b.cpu(45)
        with b.op("aten::mm") as mm:
            b.cpu(50)
    with b.backward():
        with b.backward_node(mm):
            with b.op("aten::mm"):
                b.cpu(60)
        with b.gradient_hook():
            with b.op("c10d::_reduce_scatter_base_"):
                with b.op("aten::clone"):
                    b.cpu(3)
                b.worker_collective("gloo:all_reduce", RS_RANGE, delay=1, inner=[("aten::div_", 20, 4)])
                b.cpu(35)
            for _ in range(2):
                with b.op("c10d::allreduce_"):
                    b.cpu(5)
                b.worker_collective("gloo:all_reduce", AR_RANGE, delay=3)
                b.cpu(AR_RANGE + 5)


@pytest.fixture
def trace(tmp_path):
    b = TraceBuilder(autograd_thread=False)
    for _ in range(STEPS):
        with b.step():
            _fsdp_ddp_step(b)
    return b.write(tmp_path / "gloo.json")


def test_one_collective_counts_once_with_its_call_and_worker_time(trace):
    """37.3: the call counts the collective; the worker's range, the ops in it and the ops in
    the call count 0. Time is the call's and the worker's: both are communication."""
    comm = tracekit.load(trace, cache=False).table("comm").set_index(["phase", "collective"])
    assert sorted(comm.index) == [
        ("backward", "AllReduce"),
        ("backward", "ReduceScatter"),
        ("forward", "AllGather"),
    ]
    assert comm["count"].to_dict() == {
        ("forward", "AllGather"): 1,
        ("backward", "ReduceScatter"): 1,
        ("backward", "AllReduce"): 2,
    }
    want = {
        ("forward", "AllGather"): AG_CALL + AG_RANGE,
        ("backward", "ReduceScatter"): RS_CALL + RS_RANGE,
        ("backward", "AllReduce"): 2 * (AR_CALL + AR_RANGE),
    }
    for k, us in want.items():
        assert comm.at[k, "time_ms"] == pytest.approx(us / 1000, abs=NS), k
    # the worker runs while its call waits: busy is the call (the ranges end inside it)
    assert comm.at[("forward", "AllGather"), "busy_ms"] == pytest.approx(AG_CALL / 1000, abs=NS)


def test_worker_range_is_named_by_its_call_and_its_ops_take_the_call_phase(trace):
    """37.4: ``gloo:all_reduce`` queued by ``c10d::_reduce_scatter_base_`` is ReduceScatter; the
    ops inside the worker's ranges are the collective's, in the phase and step of the call."""
    a = tracekit.load(trace, cache=False)
    iv = a.intervals
    names = iv["name"].astype(str)
    inner = iv[names.isin(["aten::view", "aten::copy_", "aten::div_"])]
    assert len(inner) == 3 * STEPS
    got = {
        (n, str(p), str(g), str(c))
        for n, p, g, c in zip(inner["name"], inner["phase"], inner["group"], inner["collective"])
    }
    assert got == {
        ("aten::view", "forward", "comm", "AllGather"),
        ("aten::copy_", "forward", "comm", "AllGather"),
        ("aten::div_", "backward", "comm", "ReduceScatter"),
    }
    rs = iv[(names == "gloo:all_reduce") & (iv["runtime"].astype(str) == "c10d::_reduce_scatter_base_")]
    assert set(rs["collective"].astype(str)) == {"ReduceScatter"}
    coll = a.table("collectives")
    calls = coll.groupby(["phase", "collective"])["calls"].sum().to_dict()
    assert calls == {
        ("forward", "AllGather"): STEPS,
        ("backward", "ReduceScatter"): STEPS,
        ("backward", "AllReduce"): 2 * STEPS,
    }
    rs_ms = coll[coll["collective"] == "ReduceScatter"]["time_ms"].sum()
    assert rs_ms == pytest.approx(STEPS * RS_RANGE / 1000, abs=NS)


def test_explain_says_who_named_and_who_counts_the_collective(trace):
    out = (
        CliRunner()
        .invoke(main, ["explain", str(trace), "gloo:all_reduce", "--no-cache", "--limit", "5"])
        .output
    )
    assert "collective  ReduceScatter, named by the call c10d::_reduce_scatter_base_; counted once" in out
    assert "collective  AllReduce, named by the call c10d::allreduce_; counted once" in out
    assert "6 matches" in out  # 2 + 4 ranges: activities, though none of them counts
