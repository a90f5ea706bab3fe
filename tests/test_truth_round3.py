"""Planted truth for the trace shapes of issue 28 ("Truth, round 3").

Each test plants one shape of trace with ``tracekit.testing`` and checks the numbers tracekit
gives against the planted times (exact to the nanosecond where the rule is exact).
"""

from __future__ import annotations

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL, MATMUL_CUSTOM

NS = 1e-6  # one nanosecond, in ms


def _ms(us: float) -> float:
    return us / 1000


def test_hand_written_gemm_kernel_counts_as_gemm(tmp_path):
    """Issue 28.6: a custom extension's ``matmul_k`` (no library name) is GEMM time."""
    b = TraceBuilder()
    with b.step():
        with b.op("my_ext::forward"):
            b.kernel(MATMUL_CUSTOM, 30, at_us=10)
        b.kernel(K_MUL, 5, op="aten::mul")
        b.kernel("void my_tile_kernel<float>(float const*, float*, int)", 7, op="aten::mm")
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False)
    gemm = a.table("gemm").set_index("phase")
    assert gemm.loc["forward", "gemm_ms"] == pytest.approx(_ms(30 + 7), abs=NS)
    assert gemm.loc["forward", "compute_ms"] == pytest.approx(_ms(30 + 5 + 7), abs=NS)
    kernels = a.table("kernels").set_index("category")
    assert kernels.loc["GEMM", "kernel_ms"] == pytest.approx(_ms(37), abs=NS)


@pytest.mark.parametrize("autograd_thread", [True, False])
def test_legacy_backward_is_backward_by_its_node_names(tmp_path, autograd_thread):
    """Issue 28.2: before torch 1.9, backward nodes are ``AddmmBackward`` ops with no sequence
    number, no forward-thread id and no evaluate_function: their work is backward, and the
    evidence says it was the node's name."""
    b = TraceBuilder(legacy=True, autograd_thread=autograd_thread, old_categories=True, ts_format="int")
    with b.step():
        mm = b.kernel(GEMM_A, 40, op="aten::addmm", at_us=10)
        b.kernel(K_MUL, 10, op="aten::mul", at_us=60)
        with b.backward():
            b.kernel(GEMM_NN, 30, op="aten::mm", creator=mm, at_us=100)
            with b.gradient_hook():
                b.kernel(K_MUL, 5, op="aten::add_", at_us=140)
        with b.optimizer("Optimizer.step#SGD.step"):
            b.kernel(K_ADAM, 20, op="aten::add_", at_us=160)
    path = b.write(tmp_path / "legacy.json")
    a = tracekit.load(path, cache=False)
    ph = a.table("phases").set_index("phase")
    assert ph.loc["forward", "wall_ms"] == pytest.approx(_ms(90), abs=NS)  # 10 -> 100
    assert ph.loc["backward", "wall_ms"] == pytest.approx(_ms(60), abs=NS)  # 100 -> 160
    assert ph.loc["backward", "compute_ms"] == pytest.approx(_ms(35), abs=NS)
    assert ph.loc["optimizer", "wall_ms"] == pytest.approx(_ms(20), abs=NS)
    # On an engine thread the thread decides (it is known by the nodes it runs); on the main
    # thread, the node's name.
    evidence = "autograd_thread" if autograd_thread else "backward_name"
    iv = a.intervals
    assert set(iv.loc[iv["phase"] == "backward", "phase_evidence"].astype(str)) == {evidence}
    from tracekit import explain

    chain = explain.run(path, "ampere_bf16_s16816gemm_bf16_128x64")["chains"][0]
    assert chain["phase"]["evidence"] == evidence
    assert ("name alone" if evidence == "backward_name" else "thread") in chain["phase"]["why"]


def test_cpu_step_edges_are_the_profiler_step_range(tmp_path):
    """Issue 28.9: on a CPU-only trace the step window is its ProfilerStep range, so forward
    starts at the step's start (Python before the first op included) and the optimizer ends at
    the step's end (zero_grad's Python after the last op included); the walls add up to it."""
    import json

    b = TraceBuilder()
    with b.step():
        b.cpu(40)  # Python before the first op
        with b.op("aten::mm"):
            b.cpu(100)
        with b.backward():
            with b.op("MmBackward0"):
                b.cpu(80)
        with b.optimizer("Optimizer.step#AdamW.step"):
            with b.op("aten::_foreach_addcdiv_"):
                b.cpu(30)
        b.cpu(25)  # zero_grad(set_to_none): Python only
    path = b.write(tmp_path / "cpu.json")
    events = json.loads(path.read_text())["traceEvents"]
    (ps,) = [e for e in events if e["name"] == "ProfilerStep#1"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    a = tracekit.load(path, cache=False)
    idle = a.table("idle").iloc[0]
    assert idle["window_ms"] == pytest.approx(ps["dur"] / 1000, abs=NS)
    ph = a.table("phases").set_index("phase")
    assert ph["wall_ms"].sum() == pytest.approx(ps["dur"] / 1000, abs=NS)
    # forward starts at the ProfilerStep's start, 40 us (and the range's own lead) before aten::mm
    assert ph.loc["forward", "wall_ms"] > (ops[0]["ts"] - ps["ts"] + ops[0]["dur"]) / 1000 - NS
    assert ph["percent"].sum() == pytest.approx(100.0)


def test_overlapping_phases_walls_are_their_own_activity(tmp_path):
    """Issue 28.7: forward and backward chunks at the same time on two streams (DualPipe).
    Each phase's wall is the union of its own activity; compute <= wall; every phase column of
    the modules table adds up to its wall, the kernel rows to the step; a notice says by how
    much the phases overlapped."""
    from tracekit.testing import COMPUTE_STREAM, SIDE_STREAM

    b = TraceBuilder()
    with b.step():
        k1 = b.kernel(GEMM_A, 100, op="aten::mm", at_us=10, stream=COMPUTE_STREAM)  # 10-110
        k2 = b.kernel(GEMM_A, 60, op="aten::mm", at_us=120, stream=COMPUTE_STREAM)  # 120-180
        with b.backward():
            b.kernel(GEMM_NN, 80, op="aten::mm", creator=k1, at_us=50, stream=SIDE_STREAM)  # 50-130
            b.kernel(GEMM_NN, 30, op="aten::mm", creator=k2, at_us=140, stream=SIDE_STREAM)  # 140-170
        with b.optimizer():
            b.kernel(K_ADAM, 20, op="aten::_fused_adam_", at_us=200)  # 200-220
    a = tracekit.load(b.write(tmp_path / "dualpipe.json"), cache=False)
    ph = a.table("phases").set_index("phase")
    walls = {"forward": 160, "backward": 110, "optimizer": 20}
    for p, us in walls.items():
        assert ph.loc[p, "wall_ms"] == pytest.approx(_ms(us), abs=NS), p
        assert ph.loc[p, "compute_ms"] <= ph.loc[p, "wall_ms"] + NS
        assert ph.loc[p, "idle_ms"] == pytest.approx(0.0, abs=NS)
    mods = a.table("modules")
    for p, us in walls.items():
        assert mods.loc[mods["phase"] == p, "time_ms"].sum() == pytest.approx(_ms(us), abs=NS), p
    kern = a.table("kernels")
    assert kern["time_ms"].sum() == pytest.approx(_ms(210), abs=NS)  # the step window 10-220
    idle = a.table("idle").iloc[0]
    assert idle["busy_ms"] == pytest.approx(_ms(190), abs=NS)
    (notice,) = [n for n in a.meta["notices"] if "overlapped" in n]
    assert "by 0.100 ms" in notice  # 160 + 110 + 20 - 190 us counted in two walls
    assert not [w for w in a.warnings if w.code in ("compute_exceeds_wall", "modules_do_not_sum")]


def _rank_builder(rank: int, fwd_us: float, bwd_us: float, idle_us: float) -> TraceBuilder:
    """One rank of a job: its own process id and device (as each rank's own file has them)."""
    from tracekit.testing import COMM_STREAM

    b = TraceBuilder(rank=rank, world_size=4, pid=48213 + 7 * rank, device=rank % 8)
    with b.step():
        mm = b.kernel(GEMM_A, fwd_us, op="aten::mm", at_us=10)
        b.idle(idle_us)
        b.kernel(K_MUL, 5, op="aten::mul")
        with b.backward():
            b.kernel(GEMM_NN, bwd_us, op="aten::mm", creator=mm)
            with b.gradient_hook():
                b.comm("AllReduce", 12, stream=COMM_STREAM)
        with b.optimizer():
            b.kernel(K_ADAM, 6, op="aten::_fused_adam_")
    return b


@pytest.mark.parametrize("with_rank_arg", [True, False])
def test_merged_file_is_split_into_its_ranks(tmp_path, with_rank_arg):
    """Issue 28.1: four ranks merged into one file (TraceFusion: pids offset per rank, no
    distributedInfo) are four ranks, each with its own idle, GEMM and kernel counts; the
    output says how the ranks were found."""
    from tracekit.testing import measure, union, write_trace
    from tracekit.testing.merged import merged_trace

    builders = [_rank_builder(r, 40 + 10 * r, 60 + 5 * r, 3 + 4 * r) for r in range(4)]
    path = write_trace(tmp_path / "merged.json", merged_trace(builders, with_rank_arg=with_rank_arg))
    a = tracekit.load(path, cache=False, jobs=1)
    assert sorted(a.ranks) == [0, 1, 2, 3]
    assert "split into 4 ranks by process" in a.meta["rank_grouping"]
    assert any("split into 4 ranks" in n for n in a.meta["notices"])  # shown in every output
    idle = a.table("idle").set_index("rank")
    gemm = a.table("gemm")
    for r, b in enumerate(builders):
        acts = b.activities
        lo, hi = min(x.start for x in acts), max(x.end for x in acts)
        busy = measure(union([x.iv for x in acts]))
        assert idle.loc[r, "busy_ms"] == pytest.approx(busy / 1e6, abs=NS)
        assert idle.loc[r, "idle_ms"] == pytest.approx((hi - lo - busy) / 1e6, abs=NS)
        mine = gemm[gemm["rank"] == r].set_index("phase")["gemm_ms"]
        assert mine["forward"] == pytest.approx(_ms(40 + 10 * r), abs=NS)
        assert mine["backward"] == pytest.approx(_ms(60 + 5 * r), abs=NS)
    kernels = a.table("kernels")
    assert kernels.groupby("rank")["count"].sum().tolist() == [len(b.activities) for b in builders]
    from tracekit import explain

    doc = explain.run(path, "xmma_gemm", rank=2)
    assert "split into 4 ranks" in doc["meta"]["rank_split"] and doc["meta"]["matched"] == 1


def test_helper_processes_do_not_split_a_file(tmp_path):
    """A DataLoader worker has CPU ops but launches nothing: the file stays one rank."""
    b = _rank_builder(0, 40, 60, 3)
    doc = b.trace(distributed=False)
    worker = 51234
    doc["traceEvents"] += [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::to",
            "pid": worker,
            "tid": worker,
            "ts": e["ts"],
            "dur": 1.0,
        }
        for e in doc["traceEvents"]
        if e.get("cat") == "kernel"
    ]
    from tracekit.testing import write_trace

    a = tracekit.load(write_trace(tmp_path / "one.json", doc), cache=False, jobs=1)
    assert list(a.ranks) == [0] and "split" not in a.meta["rank_grouping"]


@pytest.mark.parametrize("core", ["bmm", "sdpa"])
def test_native_multi_head_attention_is_split_by_its_child_ops(tmp_path, core):
    """Issue 28.4: nn.MultiheadAttention's fast path is one op holding the whole block; its
    work goes to QKV, Bmm0, Softmax, Bmm1 (or Attention, fused), Output by its child ops."""
    from tracekit.testing.kernels import BMM, K_ADD, K_COPY, K_FLASH_FWD, K_SOFTMAX

    b = TraceBuilder()
    want: dict[str, float] = {}
    with b.step():
        with b.module("TransformerEncoderLayer", "layers.0"):
            with b.module("MultiheadAttention", "layers.0.self_attn"):
                with b.op("aten::_native_multi_head_attention"):
                    b.kernel(GEMM_A, 10, op="aten::mm")
                    b.kernel(K_ADD, 3, op="aten::_transform_bias_rescale_qkv")
                    want["QKV"] = 13
                    if core == "bmm":
                        b.kernel(BMM, 4, op="aten::bmm")
                        b.kernel(K_SOFTMAX, 5, op="aten::_masked_softmax")
                        b.kernel(BMM, 6, op="aten::bmm")
                        want.update(Bmm0=4, Softmax=5, Bmm1=6)
                    else:
                        b.kernel(K_FLASH_FWD, 8, op="aten::_scaled_dot_product_efficient_attention")
                        want["Attention"] = 8
                    b.kernel(K_COPY, 2, op="aten::copy_")
                    want["Attention other"] = 2
                    b.kernel(GEMM_A, 7, op="aten::addmm")
                    want["Output"] = 7
    a = tracekit.load(b.write(tmp_path / "mha.json"), cache=False)
    m = a.table("modules")
    got = {
        r.module: r.time_ms
        for r in m.itertuples()
        if r.phase == "forward" and r.time_ms > 0 and r.module != "Idle"
    }
    assert got == pytest.approx({k: _ms(v) for k, v in want.items()}, abs=NS)
