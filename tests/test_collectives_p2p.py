"""Sends and receives matched across ranks (issue 36): a send pairs with its peer's receive, not
with the group. Planted truth: a 4-stage pipeline (rank r receives from r-1, computes, sends to
r+1) with known delays, clock offsets, torch-like p2p ``Seq`` that would mis-pair, and a send
that ends before its receiver arrives; gloo's ``c10d::send`` / ``gloo:send`` form; and a real
gloo capture of send, recv and batch_isend_irecv."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from spawned_capture import run_capture
from tracekit.analyses import cross_rank

import tracekit
from tracekit.ranks import collective_ranks
from tracekit.testing import TraceBuilder
from tracekit.testing.events import EPOCH_NS
from tracekit.testing.merged import merged_trace

WORLD, STEPS, T = 4, 2, 30.0
OFFSETS = {0: 0, 1: 4_000_000, 2: -2_500_000, 3: 9_125_000}  # ns: each rank's clock minus true
DELAY = {0: [0, 70], 1: [40, 0], 2: [0, 0], 3: [0, 0]}  # us of extra compute before the send
EAGER_US, LATE_US = 15.0, 40.0  # rank 2's send is buffered; rank 3 posts its receive after it


def _plan(s: int) -> dict:
    """True times (us) of step ``s``: per rank its (kind, peer, arrival, end) comm instances."""
    b = 1000.0 + 5000.0 * s
    a01 = b + 100 + DELAY[0][s]
    e01 = a01 + T  # rank 1 posted its receive at b + 10: the send arrives later
    a12 = e01 + 100 + DELAY[1][s]
    e12 = a12 + T
    a23 = e12 + 100 + DELAY[2][s]
    r3 = a23 + EAGER_US + LATE_US
    p = {
        0: [("send", 1, a01, e01)],
        1: [("recv", 0, b + 10, e01), ("send", 2, a12, e12)],
        2: [("recv", 1, b + 10, e12), ("send", 3, a23, a23 + EAGER_US)],
        3: [("recv", 2, r3, r3 + T)],
    }
    arrive = {r: p[r][-1][3] + 20 for r in p}
    done = max(arrive.values()) + 50
    for r, comms in p.items():
        comms.append(("all", -1, arrive[r], done))
    return p


def _builder(r: int) -> TraceBuilder:
    b = TraceBuilder(rank=r, world_size=WORLD, start_ns=EPOCH_NS + OFFSETS[r])
    seq = 0
    for s in range(STEPS):
        with b.step(), b.forward():
            for kind, peer, arrive, end in _plan(s)[r]:
                if kind == "send":  # the compute that made this send as late as it is
                    b.kernel(
                        "sm80_xmma_gemm_bf16",
                        100 + DELAY[r][s],
                        op="aten::mm",
                        at_us=arrive - 100 - DELAY[r][s],
                    )
                if kind == "all":
                    b.comm("AllReduce", end - arrive, at_us=arrive, nelems=64, dtype="Float")
                else:
                    seq += 1  # torch's p2p Seq: every send and receive of the group on this rank
                    b.p2p(kind, peer, end - arrive, at_us=arrive, nelems=256, dtype="Float", seq=seq)
    return b


def _truth() -> tuple[dict, dict]:
    """Per (rank, step, collective): (wait, transfer) ms summed; per step: {rank: caused ms}."""
    split: dict = {}
    caused: dict = {}
    for s in range(STEPS):
        p = _plan(s)
        pairs = {(r, peer) if k == "send" else (peer, r): [] for r in p for k, peer, *_ in p[r] if k != "all"}
        for r in p:
            for k, peer, a, e in p[r]:
                if k != "all":
                    pairs[(r, peer) if k == "send" else (peer, r)].append((r, k, a, e))
        groups = [*pairs.values(), [(r, "all", p[r][-1][2], p[r][-1][3]) for r in p]]
        for g in groups:
            last = max(a for _, _, a, _ in g)
            who = max(g, key=lambda x: (x[2], -x[0]))[0]
            for r, k, a, e in g:
                eager = k == "send" and e < last
                w, t = (0.0, e - a) if eager else (last - a, e - last)
                key = (r, s + 1, "AllReduce" if k == "all" else "SendRecv")
                old = split.get(key, (0.0, 0.0))
                split[key] = (old[0] + w / 1e3, old[1] + t / 1e3)
                caused.setdefault(s + 1, {}).setdefault(who, 0.0)
                caused[s + 1][who] += w / 1e3
    return split, caused


@pytest.mark.parametrize("form", ["files", "merged"])
def test_pipeline_sends_pair_with_their_receives(tmp_path: Path, form: str) -> None:
    """Per-rank files, or the ranks merged into one file (peers from ``Dst Rank`` / ``Src
    Rank``, which a merged file keeps)."""
    if form == "files":
        for r in range(WORLD):
            _builder(r).write(tmp_path / f"rank{r}.json")
        a = tracekit.load(tmp_path, cache=False, jobs=1)
    else:
        path = tmp_path / "merged.json"
        path.write_text(json.dumps(merged_trace([_builder(r) for r in range(WORLD)])))
        a = tracekit.load(path, cache=False, jobs=1)
    split, caused = _truth()
    c = a.table("collectives")
    assert len(c) == len(split)
    for row in c.itertuples():
        wait, transfer = split[(row.rank, row.step, row.collective)]
        assert row.wait_ms == pytest.approx(wait, abs=1e-9), (row.rank, row.step, row.collective)
        assert row.transfer_ms == pytest.approx(transfer, abs=1e-9), (row.rank, row.step, row.collective)
        assert row.busbw_gbps == pytest.approx(row.algbw_gbps) if row.collective == "SendRecv" else True
    for r, off in a.meta["clock_offsets_ms"].items():
        assert off == pytest.approx(OFFSETS[r] / 1e6, abs=1e-12)
    st = a.table("stragglers")
    for s, per_rank in caused.items():
        want = {r: v for r, v in per_rank.items() if v > 0}
        got = st[st["step"] == s].set_index("rank")["caused_wait_ms"].to_dict()
        assert got == pytest.approx(want, abs=1e-9)
    m = a.table("collective_matches")
    p2p = m[m["collective"] == "SendRecv"]
    assert len(p2p) == 3 * STEPS and (p2p["ranks"] == 2).all()  # three pairs a step, two ranks each
    notices = " ".join(a.meta["notices"])
    assert "left unmatched" not in notices and "missing on some ranks" not in notices
    assert "paired with nothing" not in notices


def test_a_receive_with_no_recorded_peer_is_not_paired(tmp_path: Path) -> None:
    """A receive whose source nothing records (recv from any source): no wait or transfer, and
    the send it would pair with stays alone too, never paired by guess."""
    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2, start_ns=EPOCH_NS)
        with b.step(), b.forward():
            if r == 0:
                b.p2p("send", 1, 40, at_us=100, nelems=8, dtype="Float")
            else:
                b.comm("SendRecv", 60, at_us=80, nelems=8, dtype="Float", name="recv")
        b.write(tmp_path / f"rank{r}.json")
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    c = a.table("collectives")
    assert c["calls"].tolist() == [1, 1]
    assert c["wait_ms"].isna().all() and c["transfer_ms"].isna().all()
    notices = " ".join(a.meta["notices"])
    assert "1 send(s) or receive(s) record no direction or peer" in notices
    assert "1 collective instance(s) are missing on some ranks" in notices


def test_nccl_without_peer_args_takes_the_c10d_op(tmp_path: Path) -> None:
    """An older torch's record_param_comms has no Dst Rank / Src Rank: the ``c10d::send`` /
    ``c10d::recv_`` op around the kernel's launch gives the peer (its third Concrete Input, a
    rank within the group, made global by pg_config). Rank 1 (ranks 2 and 3 of the job's
    second group, here its only one) receives from rank 0 (global 2), which sends 50 us later."""
    for r in (0, 1):
        b = TraceBuilder(rank=2 + r, world_size=4, start_ns=EPOCH_NS)
        with b.step(), b.forward():
            kind, op = ("send", "c10d::send") if r == 0 else ("recv", "c10d::recv_")
            at = 150.0 if r == 0 else 100.0
            with b.op(op, concrete_inputs=["", "", str(1 - r), "0"]):
                b.comm("SendRecv", 250 - at, at_us=at, nelems=8, dtype="Float", name=kind)
        doc = b.trace()
        doc["distributedInfo"]["pg_config"][0]["ranks"] = [2, 3]  # the group: global 2 and 3
        (tmp_path / f"rank{2 + r}.json").write_text(json.dumps(doc))
    c = tracekit.load(tmp_path, cache=False, jobs=1).table("collectives").set_index("rank")
    assert c.loc[2, "wait_ms"] == pytest.approx(0.0, abs=1e-9)
    assert c.loc[2, "transfer_ms"] == pytest.approx(0.100, abs=1e-9)
    assert c.loc[3, "wait_ms"] == pytest.approx(0.050, abs=1e-9)
    assert c.loc[3, "transfer_ms"] == pytest.approx(0.100, abs=1e-9)


def test_gloo_form_peer_from_the_c10d_op(tmp_path: Path) -> None:
    """gloo on torch 2.13: no record_param_comms; ``c10d::send`` / ``c10d::recv_`` carry the
    peer's group rank as their third Concrete Input, and the ``gloo:send`` / ``gloo:recv``
    range starting inside it is the arrival."""
    arrive = {0: (200.0, 230.0), 1: (100.0, 230.0)}  # rank 0 sends at 200, rank 1 waits from 100
    for r in (0, 1):
        b = TraceBuilder(rank=r, world_size=2, autograd_thread=False, start_ns=EPOCH_NS)
        with b.step():
            start, end = arrive[r]
            b.cpu(start - 1 - (b.w.t[b._s.tid] - b.origin) / 1e3)
            name, op = ("send", "c10d::send") if r == 0 else ("recv", "c10d::recv_")
            with b.op(op, concrete_inputs=["", "", str(1 - r), "0"], input_dims=[[[64]], [], [], []],
                      input_types=["TensorList", "", "Scalar", "Scalar"]):  # fmt: skip
                b.cpu(1)
                with b.op(f"gloo:{name}", input_dims=[[64]], input_types=["float"]):
                    b.cpu(end - start)
            b.cpu(10)
        b.write(tmp_path / f"rank{r}.json")
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    c = a.table("collectives").set_index("rank")
    assert c["collective"].tolist() == ["SendRecv", "SendRecv"]
    assert c["bytes"].tolist() == [256, 256]
    got = {r: (c.loc[r, "wait_ms"], c.loc[r, "transfer_ms"]) for r in (0, 1)}
    gloo = {r: a.table("collectives").set_index("rank").loc[r, "time_ms"] for r in (0, 1)}
    assert got[0] == pytest.approx((0.0, gloo[0]), abs=1e-9)  # rank 0 arrived last: no wait
    assert got[1] == pytest.approx((0.100, gloo[1] - 0.100), abs=1e-9)  # rank 1 waited 100 to 200 us


GLOO_P2P = """
import os, sys, tempfile
import torch, torch.distributed as dist, torch.multiprocessing as mp
from torch.profiler import profile, ProfilerActivity

def run(rank, store, out):
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    x = torch.randn(256)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as p:
        for step in range(2):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                if rank == 0:
                    dist.send(x, 1)
                    dist.recv(x, 1)
                else:
                    dist.recv(x, 0)
                    dist.send(x, 0)
                ops = [dist.P2POp(dist.isend, x, 1 - rank), dist.P2POp(dist.irecv, torch.empty(256), 1 - rank)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()
                dist.all_reduce(x)
    p.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    dist.barrier()  # neither rank tears gloo down while the other still talks (SIGABRT)
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(run, args=(os.path.join(tempfile.mkdtemp(), "store"), sys.argv[1]), nprocs=2)
"""


@pytest.mark.capture
def test_real_gloo_sends_and_receives_pair(tmp_path: Path) -> None:
    """Two gloo ranks on CPU (torch): send, recv and batch_isend_irecv each step; every send
    and receive is paired (4 a step), its wait and transfer add up to its time."""
    pytest.importorskip("torch")
    script = tmp_path / "p2p.py"
    script.write_text(GLOO_P2P)
    out = tmp_path / "traces"
    out.mkdir()
    run_capture(script, out, ranks=2)
    a = tracekit.load(out, cache=False, jobs=1)
    c = a.table("collectives")
    p2p = c[c["collective"] == "SendRecv"]
    assert sorted(p2p["calls"].tolist()) == [4] * 4 and (p2p["bytes"] == 4 * 256 * 4).all()
    # every send found its receive: a pair of two ranks, 4 pairs a step
    f, _ = cross_rank.match(collective_ranks.all_instances(a))
    sr = f[f["collective"] == "SendRecv"]
    assert (sr["peer"] == 1 - sr["rank"]).all() and set(sr["direction"]) == {1, 2}
    assert (sr.groupby("gid").size() == 2).all() and sr["gid"].nunique() == 8
    # matched pairs split their time exactly; a pair the clock offset (from the gloo all-reduce
    # ranges, which end apart on a busy host) cannot align is left unmatched with a notice
    ok = sr.dropna(subset=["wait_ns"])
    assert (ok["wait_ns"] >= 0).all() and (ok["transfer_ns"] >= 0).all()
    dur = (ok["end"] - ok["start"]).to_numpy()
    assert (ok["wait_ns"] + ok["transfer_ns"]).to_numpy() == pytest.approx(dur, abs=1e-3)
    if len(ok) < len(sr):
        assert any("left unmatched" in n for n in a.meta["notices"])
    assert set(a.meta["clock_offsets_ms"]) == {0, 1}
    # no compute op before the late arrival: a straggler finding (when the wait is over its
    # threshold, which depends on this machine's timing) says nothing of what made it late
    evidence = " ".join(a.table("findings")["evidence"].astype(str))
    assert "late after ;" not in evidence
