"""Clock offsets from sends and receives alone (issue 36): a pipeline with no collective of the
whole group. Planted truth: 4 stages, each step activations sent forward (r to r+1) and
gradients back (r+1 to r), every rank's clock off by a known amount; one send buffered (it ends
before its receive arrives: its ends are not close, a minority the median ignores). Rank r is
linked to rank 0 only through the chain 0-1, 1-2, 2-3, and its offset is recovered exactly.
Ranks linked to rank 0 by nothing get no offset and a notice. A real 4-rank gloo pipeline
(torch, CPU, one host): every rank gets an offset, small (one clock), and every pair its own
number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spawned_capture import run_capture

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.events import EPOCH_NS
from tracekit.testing.merged import merged_trace

WORLD, STEPS, T, WORK = 4, 3, 30.0, 100.0
OFFSETS = {0: 0, 1: 4_000_000, 2: -2_500_000, 3: 9_125_000}  # ns: each rank's clock minus true
EAGER = (1, 2)  # (step index, sender): rank 2's forward send of step 2 goes into a buffer
EAGER_US, LATE_US = 15.0, 40.0


def _plan(s: int) -> list[tuple[int, int, float, float, float, float]]:
    """The true pairs of step ``s`` (us), in time order: (src, dst, send arrival, send end,
    receive arrival, receive end)."""
    t = 1000.0 + 8000.0 * s
    free = {r: t + 10 * r for r in range(WORLD)}  # when each rank can post a receive
    pairs = []
    for src, dst in [(r, r + 1) for r in range(WORLD - 1)] + [(r, r - 1) for r in range(WORLD - 1, 0, -1)]:
        a = max(t, free[src]) + WORK
        if (s, src) == EAGER and dst > src:
            pairs.append((src, dst, a, a + EAGER_US, a + LATE_US, a + LATE_US + T))
        else:
            pairs.append((src, dst, a, a + T, free[dst], a + T))
        t = pairs[-1][5]
        free[src], free[dst] = pairs[-1][3] + 10, t + 10
    return pairs


def _builder(r: int, world: int = WORLD, plan=_plan, offsets=OFFSETS) -> TraceBuilder:
    b = TraceBuilder(rank=r, world_size=world, start_ns=EPOCH_NS + offsets[r])
    for s in range(STEPS):
        with b.step(), b.forward():
            for src, dst, sa, se, ra, re in plan(s):
                if src == r:
                    b.kernel("sm80_xmma_gemm_bf16", WORK, op="aten::mm", at_us=sa - WORK)
                    b.p2p("send", dst, se - sa, at_us=sa, nelems=256, dtype="Float")
                elif dst == r:
                    b.p2p("recv", src, re - ra, at_us=ra, nelems=256, dtype="Float")
    return b


def _split(plan=_plan) -> dict[tuple[int, int], tuple[float, float]]:
    """Per (rank, step): (wait, transfer) ms summed over its sends and receives."""
    out: dict = {}
    for s in range(STEPS):
        for src, dst, sa, se, ra, re in plan(s):
            last = max(sa, ra)
            eager = se < last
            for r, (w, x) in {
                src: (0.0, se - sa) if eager else (last - sa, se - last),
                dst: (last - ra, re - last),
            }.items():
                old = out.get((r, s + 1), (0.0, 0.0))
                out[(r, s + 1)] = (old[0] + w / 1e3, old[1] + x / 1e3)
    return out


def _load(tmp_path: Path, form: str, builders: list[TraceBuilder]):
    if form == "files":
        for r, b in enumerate(builders):
            b.write(tmp_path / f"rank{r}.json")
        return tracekit.load(tmp_path, cache=False, jobs=1)
    path = tmp_path / "merged.json"
    path.write_text(json.dumps(merged_trace(builders)))
    return tracekit.load(path, cache=False, jobs=1)


def _check_split(a, split: dict) -> None:
    c = a.table("collectives")
    assert set(c["collective"]) == {"SendRecv"} and len(c) == len(split)
    for row in c.itertuples():
        wait, transfer = split[(row.rank, row.step)]
        assert row.wait_ms == pytest.approx(wait, abs=1e-9), (row.rank, row.step)
        assert row.transfer_ms == pytest.approx(transfer, abs=1e-9), (row.rank, row.step)


@pytest.mark.parametrize("form", ["files", "merged"])
def test_pipeline_offsets_through_the_chain_of_pairs(tmp_path: Path, form: str) -> None:
    a = _load(tmp_path, form, [_builder(r) for r in range(WORLD)])
    offsets = a.meta["clock_offsets_ms"]
    assert set(offsets) == set(range(WORLD))
    for r, off in offsets.items():
        assert off == pytest.approx(OFFSETS[r] / 1e6, abs=1e-12), r
    _check_split(a, _split())
    notices = " ".join(a.meta["notices"])
    assert "left unmatched" not in notices and "clock offsets are unknown" not in notices


def _islands(s: int) -> list[tuple[int, int, float, float, float, float]]:
    """Rank 0 sends to 1, and 2 to 3: nothing links {0, 1} with {2, 3}."""
    b = 1000.0 + 8000.0 * s
    return [(0, 1, b + 100, b + 130, b + 10, b + 130), (2, 3, b + 200, b + 230, b + 20, b + 230)]


def test_ranks_linked_by_nothing_get_no_offset(tmp_path: Path) -> None:
    """Ranks 2 and 3 share nothing with 0 or 1: their offsets are unknown (left out, a notice),
    and their own pair is still split exactly, on rank 2's clock."""
    a = _load(tmp_path, "files", [_builder(r, plan=_islands) for r in range(WORLD)])
    offsets = a.meta["clock_offsets_ms"]
    assert offsets == pytest.approx({0: 0.0, 1: OFFSETS[1] / 1e6}, abs=1e-12)
    notices = " ".join(a.meta["notices"])
    assert (
        "no matched collective or send/receive links rank(s) 2, 3 (aligned on rank 2's clock) to "
        "rank 0, directly or through other ranks: their clock offsets are unknown" in notices
    )
    _check_split(a, _split(_islands))


def test_a_pair_row_shows_the_pair_own_number(tmp_path: Path) -> None:
    """``collective_matches``: a send and its receive are one row, numbered by the pair's own
    order between its two ranks (here one transfer each way a step: step - 1), not by the
    per-rank number of whichever rank arrived last (which counts all of that rank's sends and
    receives: rank 1 has four a step)."""
    a = _load(tmp_path, "files", [_builder(r) for r in range(WORLD)])
    m = a.table("collective_matches")
    assert len(m) == 2 * (WORLD - 1) * STEPS and (m["ranks"] == 2).all()
    assert m["instance"].tolist() == (m["step"] - 1).tolist()


GLOO_PIPELINE = """
import os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import profile, ProfilerActivity

def run(rank, store, out):
    dist.init_process_group("gloo", store=dist.FileStore(store, 4), rank=rank, world_size=4)
    x, w = torch.randn(256), torch.randn(256, 256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for step in range(3):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                if rank > 0:
                    dist.recv(x, rank - 1)
                for _ in range(20 if rank == 2 else 5):
                    x = torch.tanh(w @ x)
                if rank < 3:
                    dist.send(x, rank + 1)
                    dist.recv(x, rank + 1)
                if rank > 0:
                    dist.send(x, rank - 1)
    p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.barrier()  # neither rank tears gloo down while another still talks
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(os.path.join(tempfile.mkdtemp(), "store"), sys.argv[1]), nprocs=4)
"""


@pytest.mark.capture
def test_real_gloo_pipeline_of_sends_and_receives(tmp_path: Path) -> None:
    """Four gloo ranks, send and recv only: all four linked to rank 0 through the chain, with
    offsets of the ends' skew (one host, one clock: well under a millisecond here, 20 ms
    allowed for a busy machine); 6 pairs a step, each numbered by its step."""
    pytest.importorskip("torch")
    script = tmp_path / "pipeline.py"
    script.write_text(GLOO_PIPELINE)
    out = tmp_path / "traces"
    out.mkdir()
    run_capture(script, out, ranks=4)
    a = tracekit.load(out, cache=False, jobs=1)
    offsets = a.meta["clock_offsets_ms"]
    assert set(offsets) == {0, 1, 2, 3} and offsets[0] == 0.0
    assert all(abs(v) < 20.0 for v in offsets.values()), offsets
    assert not any("clock offsets are unknown" in n for n in a.meta["notices"])
    m = a.table("collective_matches")
    assert m.groupby("step").size().tolist() == [6, 6, 6]
    assert (m["instance"] == m["step"] - m["step"].min()).all()
    c = a.table("collectives").dropna(subset=["wait_ms"])
    assert (c["wait_ms"] >= 0).all() and (c["transfer_ms"] >= 0).all()
    split = (c["wait_ms"] + c["transfer_ms"]).tolist()
    assert split == pytest.approx(c["time_ms"].tolist(), abs=1e-6)
