"""Planted truth for ``idle_causes`` and ``launches`` (issue 35, HTA 0.5's rules).

Each step of the planted trace holds the four causes the issue names:

* an ``aten::item`` sync in forward: a DtoH copy, ``cudaStreamSynchronize``, and the next kernel
  launched only after the device drained (a host wait on the compute stream);
* a data-loader stall inside the step (``enumerate(DataLoader)#...__next__``: 500 us of CPU
  with nothing launched): the next kernel is a host wait;
* a kernel on a second stream waiting on an event: launched while its stream was still busy,
  it starts only when a compute kernel ends (``other``: the gap is over 30 us);
* a host-bound optimizer: 40 kernels of 1 us, each launch call 1.6 us, 5 us of Python between
  launches (host waits; every launch host-bound; every kernel small).

The expected rows come from the planted activities by the rules written out plainly here (a
loop per stream), never from tracekit's code, and must match to the nanosecond.
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses.idle_causes import CAUSES, causes, stream_gaps

import tracekit
from tracekit.ranks.meta import NO_LAUNCH_NOTICE
from tracekit.testing import COMPUTE_STREAM, SIDE_STREAM, TraceBuilder, write_trace

ABS = 1e-6  # ms: one nanosecond
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
ADAM = "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float>>"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
N_OPT = 40


def _step(b: TraceBuilder) -> None:
    with b.step():
        with b.forward():
            b.memcpy(20, "HtoD", op="aten::to")
            producer = b.kernel(GEMM, 150, op="aten::mm")
            b.kernel(GEMM, 30, op="aten::mm", stream=SIDE_STREAM)
            b.w.runtime_only(b.w.main, "cudaEventRecord", 1)
            b.w.runtime_only(b.w.main, "cudaStreamWaitEvent", 1)
            # launched while its stream is busy, it waits for the producer's event
            b.kernel(
                GEMM, 30, op="aten::mm", stream=SIDE_STREAM, not_before_us=(producer.end - b.origin) / 1000
            )
            with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
                b.memcpy(3, "DtoH", op=None, stream=COMPUTE_STREAM)
                b.synchronize()
            b.kernel(ELEMENTWISE, 12, op="aten::add")
            with b.op(LOADER):
                b.cpu(500)
            b.kernel(GEMM, 120, op="aten::mm")
            b.kernel(ELEMENTWISE, 8, op="aten::add", api="cuLaunchKernel")
            b.synchronize()  # the loss logged: the optimizer starts on an idle device
        with b.optimizer():
            for _ in range(N_OPT):
                b.kernel(ADAM, 1, op="aten::_fused_adam_")
                b.cpu(5)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    b = TraceBuilder(modules="none")
    for _ in range(3):
        _step(b)
    path = b.write(tmp_path_factory.mktemp("idle") / "planted.pt.trace.json")
    return b, tracekit.load(path, cache=False, jobs=1)


def _phase_windows(acts) -> list[tuple[int, str, int, int]]:
    """(step, phase, lo, hi) per step: forward from the first start to the first optimizer
    start, optimizer from there to the last end (no backward planted)."""
    out = []
    for s in sorted({a.step for a in acts}):
        mine = [a for a in acts if a.step == s]
        lo, hi = min(a.start for a in mine), max(a.end for a in mine)
        t_opt = min(a.start for a in mine if a.phase == "optimizer")
        out += [(s, "forward", lo, t_opt), (s, "optimizer", t_opt, hi)]
    return out


def _expected_causes(acts, kernel_wait_ns: int = 30_000) -> dict:
    gaps = []
    for stream in {a.stream for a in acts}:
        reach = None
        for a in sorted((a for a in acts if a.stream == stream), key=lambda a: a.start):
            if reach is not None and a.start > reach:
                if a.launch_ts > reach:
                    cause = "host_wait"
                elif a.start - reach < kernel_wait_ns:
                    cause = "kernel_wait"
                else:
                    cause = "other"
                gaps.append((stream, reach, a.start, cause))
            reach = a.end if reach is None else max(reach, a.end)
    out: dict = defaultdict(int)
    for step, phase, lo, hi in _phase_windows(acts):
        for stream, g0, g1, cause in gaps:
            cut = min(hi, g1) - max(lo, g0)
            if cut > 0:
                out[(step, phase, str(stream), cause)] += cut
    return {k: v / 1e6 for k, v in out.items()}


def _rows(df: pd.DataFrame, keys: list[str], value: str) -> dict:
    return {tuple(r[k] for k in keys): r[value] for _, r in df.iterrows()}


def test_idle_causes_recovered_exactly(planted):
    b, a = planted
    got = _rows(a.table("idle_causes", per_step=True), ["step", "phase", "stream", "cause"], "idle_ms")
    want = _expected_causes(b.activities)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], abs=ABS), k


def test_each_planted_cause(planted):
    b, a = planted
    df = a.table("idle_causes", per_step=True)
    mine = df[df["step"] == b.steps[-1]]  # the last step: no gap runs on into a next step
    opt = mine[mine["phase"] == "optimizer"]
    # host-bound optimizer: every gap between its kernels is a host wait (5 us of Python)
    assert set(opt["cause"]) == {"host_wait"}
    assert opt["idle_ms"].sum() > (N_OPT - 1) * 0.005
    fwd = mine[(mine["phase"] == "forward") & (mine["stream"] == str(COMPUTE_STREAM))]
    # the aten::item sync and the data-loader stall: host waits; the stall alone is 500 us
    assert fwd.set_index("cause")["idle_ms"]["host_wait"] > 0.5
    side = mine[mine["stream"] == str(SIDE_STREAM)]
    # the event wait on the second stream: launched before its gap began, over 30 us
    a_, b_ = (x for x in b.activities if x.step == b.steps[-1] and x.stream == SIDE_STREAM)
    assert b_.launch_ts < a_.end < b_.start
    other = side.set_index(["phase", "cause"])["idle_ms"]
    assert other[("forward", "other")] == pytest.approx((b_.start - a_.end) / 1e6, abs=ABS)
    assert set(side["cause"]) == {"other", "host_wait"}  # and the gap from the previous step
    # the gaps are what the idle table calls idle on the compute stream and more (per stream)
    assert df["idle_ms"].min() > 0


def test_threshold_is_settable(planted):
    b, a = planted
    att = a.ranks[0]
    from tracekit.pipeline.windows import frame_windows

    windows = frame_windows(att.windows)
    wide = causes(att.intervals, windows, kernel_wait_us=1e6)
    want = _expected_causes(b.activities, kernel_wait_ns=10**9)
    got = _rows(wide, ["step", "phase", "stream", "cause"], "idle_ms")
    assert "other" not in set(wide["cause"])
    assert got == pytest.approx(want, abs=ABS)


def _expected_launches(acts) -> dict:
    hta = {"cudaLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync", "cudaLaunchKernelExC"}
    rows: dict = {}
    for step, phase, _, _ in _phase_windows(acts):
        mine = [a for a in acts if a.step == step and a.phase == phase]
        counted = [a for a in mine if a.api in hta]
        delay = np.array([max(a.start - a.launch_end, 0) for a in counted], dtype=float)
        dur = np.array([a.end - a.start for a in counted], dtype=float)
        call = np.array([a.launch_end - a.launch_ts for a in counted], dtype=float)
        rows[(step, phase)] = {
            "launches": len(counted),
            "other_api_launches": len(mine) - len(counted),
            "delay_mean_us": delay.mean() / 1e3,
            "delay_p50_us": np.percentile(delay, 50) / 1e3,
            "delay_p95_us": np.percentile(delay, 95) / 1e3,
            "host_bound": int((dur < call).sum()),
            "host_bound_ms": dur[dur < call].sum() / 1e6,
            "device_ms": dur.sum() / 1e6,
            "small_kernel_pct": 100 * dur[dur < 10_000].sum() / dur.sum(),
        }
    return rows


def test_launches_recovered_exactly(planted):
    b, a = planted
    df = a.table("launches", per_step=True)
    assert set(df["module"]) == {"Other"}
    want = _expected_launches(b.activities)
    got = df.set_index(["step", "phase"])
    assert set(got.index) == set(want)
    for key, cols in want.items():
        for col, v in cols.items():
            assert got.loc[key, col] == pytest.approx(v, abs=1e-6), (key, col)
    opt = got.xs("optimizer", level="phase")
    assert (opt["launches"] == N_OPT).all() and (opt["host_bound"] == N_OPT).all()
    assert (opt["small_kernel_pct"] == 100).all()
    assert (got.xs("forward", level="phase")["other_api_launches"] == 1).all()


def test_no_runtime_calls_no_rows_one_notice(planted, tmp_path):
    b, _ = planted
    trace = b.trace()
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")
    ]
    path = write_trace(tmp_path / "no_launch.json", trace)
    a = tracekit.load(path, cache=False, jobs=1)
    assert a.table("idle_causes", per_step=True).empty
    assert a.table("launches", per_step=True).empty
    assert a.table("idle_host", per_step=True).empty
    assert a.meta["notices"].count(NO_LAUNCH_NOTICE) == 1


def test_cpu_only_no_rows_one_notice(tmp_path):
    src = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-train-1rank"
    a = tracekit.load(shutil.copytree(src, tmp_path / "run"), cache=False, jobs=1)
    assert a.table("idle_causes", per_step=True).empty
    assert a.table("launches", per_step=True).empty
    assert a.table("idle_host", per_step=True).empty
    assert a.meta["notices"].count(NO_LAUNCH_NOTICE) == 1


def _gap_before(iv, act) -> tuple[int, str]:
    """The gap (length in ns, cause) that ends at the planted activity ``act``'s start."""
    g = stream_gaps(iv)
    hit = g[(g["stream"] == act.stream).to_numpy() & (g["hi"] == act.start).to_numpy()]
    assert len(hit) == 1, act.name
    return int(hit["hi"].iloc[0] - hit["lo"].iloc[0]), str(CAUSES[hit["cause"].iloc[0]])


def test_each_gap_has_its_planted_cause(planted):
    """Gap by gap in the last step: the kernel after the aten::item sync and the one after the
    data-loader stall wait on the host; the event-waiting kernel waits on the other stream
    ('other'); every optimizer kernel after the first waits on the host."""
    b, a = planted
    iv = a.ranks[0].intervals
    last = [x for x in b.activities if x.step == b.steps[-1]]
    compute = [x for x in last if x.stream == COMPUTE_STREAM]
    names = [x.name for x in compute]
    after_sync = compute[names.index(ELEMENTWISE)]  # the first add: launched after the sync
    after_stall = compute[names.index(ELEMENTWISE) + 1]  # the gemm after the data loader
    for act, prev in ((after_sync, compute[names.index(ELEMENTWISE) - 1]), (after_stall, after_sync)):
        assert _gap_before(iv, act) == (act.start - prev.end, "host_wait")
    # the stall: 500 us of CPU with no launch, less the 12 us the add ran meanwhile
    assert after_stall.start - after_sync.end > 480_000
    side = [x for x in last if x.stream == SIDE_STREAM]
    assert _gap_before(iv, side[1]) == (side[1].start - side[0].end, "other")
    opt = [x for x in last if x.phase == "optimizer"]
    for prev, act in pairwise(opt):
        assert _gap_before(iv, act) == (act.start - prev.end, "host_wait")
        assert act.end - act.start < act.launch_end - act.launch_ts  # host-bound


def test_ranks_of_a_directory(tmp_path):
    for rank in (0, 1):
        b = TraceBuilder(rank=rank, world_size=2, modules="none")
        for _ in range(3):
            _step(b)
        b.write(tmp_path / f"rank{rank}.pt.trace.json")
    a = tracekit.load(tmp_path, cache=False, jobs=1)
    for name in ("idle_causes", "launches"):
        df = a.table(name, per_step=True)
        assert set(df["rank"]) == {0, 1}, name


@pytest.mark.parametrize(
    ("wlo", "whi", "want"),
    [
        ([0, 10], [10, 20], {(0, 0): 8, (0, 1): 2, (1, 1): 3}),  # windows that tile
        ([0, 5], [10, 15], {(0, 0): 8, (0, 1): 7, (1, 1): 2}),  # overlapping windows
    ],
)
def test_clip_to_windows(wlo, whi, want):
    from tracekit.analyses.idle_causes import clip_to_windows

    span, win, length = clip_to_windows(
        np.array([2, 13], np.int64), np.array([12, 16], np.int64), np.array(wlo), np.array(whi)
    )
    got: dict = defaultdict(int)
    for s, w, n in zip(span, win, length, strict=True):
        got[(int(s), int(w))] += int(n)
    assert dict(got) == want
