"""Planted truth for ``critical_path`` (issue 35.3): the whole path of every step, exactly.

Four planted traces, three steps each, one scenario each:

* a host-bound optimizer: a forward GEMM, a ``cudaStreamSynchronize`` that waits for it at the
  optimizer's start, then small optimizer kernels each launched after the last had ended;
* an ``aten::item`` sync in forward: GEMM, DtoH copy, the sync waiting for the copy, then a
  kernel launched after the device drained;
* a kernel on a second stream waiting on an event (``cudaEventRecord`` after the producer's
  launch, ``cudaStreamWaitEvent`` before the waiter's): the waiter starts at the producer's end;
* a data-loader stall: 500 us of ``enumerate(DataLoader)`` between two kernels.

The expected path is written out from the planted times: device activities by hand (which
activity gates which), CPU stretches by a plain scan of the trace's own events (the innermost
``cpu_op`` or runtime call at each instant: a sync call ``sync``, a launching call ``launch``,
any other ``cpu``, none ``idle``), never by tracekit's code; it must match to the nanosecond.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest

import tracekit
from tracekit.ranks.meta import LONG_TRACE_NOTICE, NO_LAUNCH_NOTICE
from tracekit.testing import COMPUTE_STREAM, SIDE_STREAM, TraceBuilder

GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
ADAM = "void at::native::multi_tensor_apply_kernel<at::native::FusedAdamMathFunctor<float>>"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
ABS = 1e-6  # ms: one nanosecond


def _sync(b: TraceBuilder) -> None:
    """``cudaStreamSynchronize`` as real traces record it: the call lasts until every planted
    activity has ended, and 1 us more."""
    tid = b._s.tid
    end = max(a.end for a in b.activities)
    b.w.runtime_only(tid, "cudaStreamSynchronize", (end - b.w.t[tid]) / 1000 + 0.6)


def _optimizer(b: TraceBuilder) -> dict:
    with b.forward():
        k0 = b.kernel(GEMM, 200, op="aten::mm")
    with b.optimizer():
        _sync(b)
        ks = []
        for _ in range(10):
            ks.append(b.kernel(ADAM, 1, op="aten::_fused_adam_"))
            b.cpu(5)
    return {"first": k0.activity, "last": ks[-1].activity}


def _item(b: TraceBuilder) -> dict:
    with b.forward():
        k1 = b.kernel(GEMM, 300, op="aten::mm")
        with b.op("aten::item"), b.op("aten::_local_scalar_dense"):
            cp = b.memcpy(3, "DtoH", op=None, stream=COMPUTE_STREAM)
            _sync(b)
        k2 = b.kernel(ELEMENTWISE, 12, op="aten::add")
    return {"first": k1.activity, "copy": cp.activity, "last": k2.activity}


def _record_and_wait(b: TraceBuilder) -> None:
    """``cudaEventRecord`` after the producer's launch, ``cudaStreamWaitEvent`` before the
    waiter's (no ``cuda_sync`` events: the wait is inferred)."""
    b.w.runtime_only(b.w.main, "cudaEventRecord", 1)
    b.w.runtime_only(b.w.main, "cudaStreamWaitEvent", 1)


def _event(b: TraceBuilder, wait: Callable[[TraceBuilder], None] = _record_and_wait) -> dict:
    """A producer on the compute stream, a kernel then a waiter on the side stream; ``wait``
    issues the event record and wait between them (test_critical_path_sync: with their
    ``cuda_sync`` events)."""
    with b.forward():
        producer = b.kernel(GEMM, 150, op="aten::mm")
        b.kernel(GEMM, 30, op="aten::mm", stream=SIDE_STREAM)
        wait(b)
        after = (producer.end - b.origin) / 1000
        waiter = b.kernel(GEMM, 30, op="aten::mm", stream=SIDE_STREAM, not_before_us=after)
    return {"first": producer.activity, "last": waiter.activity}


def _loader(b: TraceBuilder) -> dict:
    with b.forward():
        k1 = b.kernel(GEMM, 100, op="aten::mm")
        with b.op(LOADER):
            b.cpu(500)
        k2 = b.kernel(GEMM, 100, op="aten::mm")
    return {"first": k1.activity, "last": k2.activity}


SCENARIOS = {"optimizer": _optimizer, "item": _item, "event": _event, "loader": _loader}


def plant(
    tmp: Path, name: str, scenario: Callable[[TraceBuilder], dict]
) -> tuple[list, dict, Path, TraceBuilder]:
    """Three steps of ``scenario``, written as ``name``: (step, what it planted) per step, the
    trace, its path and the builder."""
    b = TraceBuilder(modules="none")
    planted = []
    for _ in range(3):
        with b.step() as n:
            planted.append((n, scenario(b)))
    trace = b.trace()
    return planted, trace, b.write(tmp / f"{name}.pt.trace.json"), b


def _build(tmp: Path, name: str) -> tuple[list, dict, tracekit.Analysis, int]:
    planted, trace, path, b = plant(tmp, name, SCENARIOS[name])
    return planted, trace, tracekit.load(path, cache=False, jobs=1), b.w.main


def _cpu_pieces(trace: dict, tid, lo: int, hi: int, launched: set) -> dict:
    """The thread's time in ``[lo, hi)`` (ns) by kind: the innermost cpu_op or runtime call
    open at each instant (plain scan of the trace's events)."""
    evs = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "X" and e.get("tid") == tid and e.get("cat") in ("cpu_op", "cuda_runtime"):
            s = round(float(e["ts"]) * 1000)
            evs.append((s, s + round(float(e["dur"]) * 1000), e))
    bounds = sorted({lo, hi, *(x for s, t, _ in evs for x in (s, t) if lo < x < hi)})
    out: dict = defaultdict(int)
    for a, z in pairwise(bounds):
        open_ = [(t - s, e) for s, t, e in evs if s <= a and t >= z]
        if not open_:
            out["idle"] += z - a
            continue
        e = min(open_, key=lambda x: x[0])[1]
        if e["cat"] == "cuda_runtime" and e["name"] in SYNCS:
            out["sync"] += z - a
        elif e["cat"] == "cuda_runtime" and e["args"].get("correlation") in launched:
            out["launch"] += z - a
        else:
            out["cpu"] += z - a
    return out


def _launching(trace: dict) -> set:
    """Every correlation id of a runtime call that launched device work."""
    return {
        e["args"]["correlation"] for e in trace["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy")
    }


def _sync_end(trace: dict, after: int) -> int:
    ends = [
        round((float(e["ts"]) + float(e["dur"])) * 1000)
        for e in trace["traceEvents"]
        if e.get("name") == "cudaStreamSynchronize"
        and round((float(e["ts"]) + float(e["dur"])) * 1000) > after
    ]
    return min(ends)


def _expected(name: str, trace: dict, tid, p: dict, phase_cpu: str) -> dict:
    """(kind, phase) -> ns of one step's path, written out per scenario."""
    first, last = p["first"], p["last"]
    want: dict = defaultdict(int)
    want[("kernel", last.phase)] += last.end - last.start
    if name == "event":  # the waiter, gated by the producer through the event (no gap)
        want[("kernel", first.phase)] += first.end - first.start
        want[("idle", last.phase)] += last.start - first.end
        return dict(want)
    l_start, device = last.launch_ts, _launching(trace)
    want[("launch", last.phase)] += last.start - l_start
    if name == "loader":  # the stretch back to the window's start
        lo = first.start
    else:
        s_end = _sync_end(trace, p.get("copy", first).end)
        waited = p.get("copy", first)
        want[("sync", phase_cpu)] += s_end - waited.end
        lo = s_end
        if name == "item":  # copy, the gap before it, the GEMM it followed on the stream
            want[("memcpy", waited.phase)] += waited.end - waited.start
            want[("idle", waited.phase)] += waited.start - first.end
        want[("kernel", first.phase)] += first.end - first.start
    for kind, ns in _cpu_pieces(trace, tid, lo, l_start, device).items():
        want[(kind, phase_cpu)] += ns
    return dict(want)


@pytest.mark.parametrize("name", SCENARIOS)
def test_whole_path_recovered_exactly(name, tmp_path):
    planted, trace, a, tid = _build(tmp_path, name)
    got = a.table("critical_path", per_step=True)
    idle = a.table("idle", per_step=True).set_index("step")["window_ms"]
    assert set(got["module"]) == {"Other"}
    phase_cpu = "optimizer" if name == "optimizer" else "forward"
    for n, p in planted:
        mine = got[got["step"] == n]
        have = {(r.kind, r.phase): r.time_ms for r in mine.itertuples()}
        want = {k: v / 1e6 for k, v in _expected(name, trace, tid, p, phase_cpu).items() if v}
        assert have == pytest.approx(want, abs=ABS), (name, n)
        assert mine["time_ms"].sum() == pytest.approx(idle[n], abs=ABS)


def test_no_runtime_calls_no_rows(tmp_path):
    _, trace, _, _ = _build(tmp_path, "loader")
    trace["traceEvents"] = [
        e for e in trace["traceEvents"] if e.get("cat") not in ("cuda_runtime", "cuda_driver")
    ]
    from tracekit.testing import write_trace

    a = tracekit.load(write_trace(tmp_path / "no_launch.json", trace), cache=False, jobs=1)
    assert a.table("critical_path", per_step=True).empty
    assert a.meta["notices"].count(NO_LAUNCH_NOTICE) == 1


def test_cpu_only_no_rows(tmp_path):
    src = Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-train-1rank"
    a = tracekit.load(shutil.copytree(src, tmp_path / "run"), cache=False, jobs=1)
    assert a.table("critical_path", per_step=True).empty
    assert a.meta["notices"].count(NO_LAUNCH_NOTICE) == 1


def test_not_computed_unless_asked(tmp_path):
    _build(tmp_path, "loader")
    a = tracekit.load(tmp_path / "loader.pt.trace.json", cache=False, jobs=1, tables=["idle"])
    att = next(iter(a.ranks.values()))
    assert att.critical.empty


def test_every_output_and_the_html_chart(tmp_path):
    """Terminal, JSON, CSV and Parquet come with the registered table; the HTML report draws
    it (the chart is its rows: tests/test_charts.py's check) and the page parses cleanly."""
    import json
    from html.parser import HTMLParser

    from click.testing import CliRunner
    from test_charts import check_charts, read_figures

    from tracekit.cli import main
    from tracekit.render.html import render_report

    _, _, a, _ = _build(tmp_path, "item")
    tables = a.tables()
    page = render_report(a.meta, tables)
    assert "critical_path" in {f["name"] for f in read_figures(page)}
    assert check_charts(tables, page) > 0

    class Strict(HTMLParser):
        def error(self, message):  # pragma: no cover - raised on malformed markup
            raise AssertionError(message)

    Strict().feed(page)
    trace = tmp_path / "item.pt.trace.json"
    run = CliRunner()
    out = run.invoke(
        main, ["analyze", str(trace), "--no-cache", "--format", "json", "--table", "critical_path"]
    )
    got = json.loads(out.output)["tables"]["critical_path"]
    assert {r["kind"] for r in got} >= {"kernel", "memcpy", "sync", "launch"}
    csv = run.invoke(
        main, ["analyze", str(trace), "--no-cache", "--format", "csv", "--table", "critical_path"]
    )
    assert "# critical_path" in csv.output
    term = run.invoke(main, ["analyze", str(trace), "--no-cache", "--table", "critical_path"])
    assert "Critical path per step" in term.output
    pq = run.invoke(
        main,
        [
            "analyze",
            str(trace),
            "--no-cache",
            "--format",
            "parquet",
            "--out",
            str(tmp_path / "pq"),
            "--table",
            "critical_path",
        ],
    )
    assert pq.exit_code == 0, pq.output
    assert list((tmp_path / "pq").glob("critical_path*.parquet"))


@pytest.mark.shared
def test_real_traces_tile_their_windows(tmp_path):
    """On every shared real trace: no error, and each step's rows sum to its window."""
    from shared_traces import shared_traces

    traces = shared_traces()
    if not traces:
        pytest.skip("../shared/traces absent")
    for p in traces:
        shutil.copy(p, tmp_path / p.name)
        a = tracekit.load(tmp_path / p.name, cache=False, jobs=1, tables=["critical_path", "idle"])
        got = a.table("critical_path", per_step=True)
        if a.mode != "gpu":
            assert got.empty, p.name
            continue
        window = a.table("idle", per_step=True).set_index("step")["window_ms"]
        sums = got.groupby("step")["time_ms"].sum()
        assert sums.to_numpy() == pytest.approx(window.reindex(sums.index).to_numpy(), abs=1e-9), p.name
        (tmp_path / p.name).unlink()


def test_a_trace_spanning_hours_has_no_path_and_one_notice(tmp_path):
    """One CPU op three hours after the rest (more than the path's keys hold): no rows, one
    notice in the run's meta, and no warning line (a zero or stray timestamp is not an error)."""
    b = TraceBuilder()
    for _ in range(2):
        with b.step(), b.forward():
            b.kernel("sm80_xmma_gemm_bf16", 100, op="aten::mm")
    doc = b.trace()
    ops = [e for e in doc["traceEvents"] if e.get("cat") == "cpu_op"]
    far = {**ops[0], "name": "aten::far_away", "ts": ops[0]["ts"] + 3 * 3600e6, "dur": 1}
    doc["traceEvents"].append(far)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = tracekit.load(path, cache=False, jobs=1)
    assert a.table("critical_path").empty
    assert LONG_TRACE_NOTICE in a.meta["notices"]
    assert not any("critical" in str(w) for w in a.meta.get("warnings", []))


def test_ops_and_calls_of_no_duration_leave_gaps_not_an_error(tmp_path):
    """Every CPU op and runtime call of zero duration (no top-level range on any thread): the
    path's CPU stretches are gaps, and a step's rows still tile its window (it raised
    IndexError: tests/test_hostile.py's compare of such a trace)."""
    b = TraceBuilder()
    for _ in range(2):
        with b.step(), b.forward():
            b.kernel("sm80_xmma_gemm_bf16", 100, op="aten::mm")
            b.cpu(50)
            b.kernel("sm80_xmma_gemm_bf16", 100, op="aten::mm")
    doc = b.trace()
    for e in doc["traceEvents"]:
        if e.get("cat") in ("cpu_op", "cuda_runtime"):
            e["dur"] = 0
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    a = tracekit.load(path, cache=False, jobs=1)
    cp, idle = a.table("critical_path", per_step=True), a.table("idle", per_step=True)
    assert not cp.empty
    got = cp.groupby("step")["time_ms"].sum()
    want = idle.groupby("step")["window_ms"].sum()
    assert got.to_dict() == pytest.approx(want.to_dict(), abs=1e-9)
