"""MTIA device events (issue 38.14): an MTIA trace's ``mtia_ccp_events`` are read as device
activity, executions as kernels and DMA requests as copies, each joined to its ``mtia_runtime``
call by ``correlation``; event records and waits are synchronisation and not read
(docs/metrics.md, "MTIA device events"). Planted truth in MTIA's layout, and the shared MTIA
trace (copied into tmp_path) with sane numbers."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest

import tracekit
from tracekit.read.schema import KERNEL, MEMCPY, SKIP, event_class
from tracekit.render.formats import markdown_report
from tracekit.render.terminal import head_lines
from tracekit.testing import TraceBuilder

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import shared_trace

MTIA_TRACE = "hta/mtia_inference_trace__mtia_inference_rank_0.json.gz"
DEVICE_PID = 17
RUN = "runFunction - job_prep_and_submit_for_execution"


def test_mtia_device_events_are_classed_by_name():
    cat = "mtia_ccp_events"
    assert event_class("X", cat, "merge") == KERNEL  # an executable a runFunction named
    assert event_class("X", cat, "pe_exe") == KERNEL
    assert event_class("X", cat, "dma_request") == MEMCPY
    assert event_class("X", cat, "event_wait") == SKIP  # a stream waiting: no work
    assert event_class("X", cat, "event_record") == SKIP
    assert event_class("i", cat, "merge") == SKIP


def _device(e: dict, n: int) -> dict:
    """A CUDA kernel or memcpy of the builder as MTIA writes its device events."""
    a, stream = e["args"], e["args"]["stream"]
    out = {**e, "cat": "mtia_ccp_events", "pid": DEVICE_PID}
    if e["cat"] == "kernel":
        out["args"] = {
            "correlation": a["correlation"],
            "stream": stream,
            "column": "0",
            "row": "0",
            "packet_ptr": n,
        }
    else:
        direction = "HOST_TO_DEVICE" if "HtoD" in e["name"] else "DEVICE_TO_HOST"
        out["name"] = "dma_request"
        out["args"] = {
            "correlation": a["correlation"],
            "stream": stream,
            "direction": direction,
            "size": 1024,
        }
    return out


def _runtime(e: dict, executable: dict[int, str]) -> dict:
    corr = e["args"]["correlation"]
    name = f"enqueueCommand {e['name'].replace('cuda', '').replace('Memcpy', 'memcpyHtoD')}"
    args = {"correlation": corr, "device": DEVICE_PID, "stream_id": "101"}
    if corr in executable:
        name, args["executable_name"] = RUN, executable[corr]
    return {**e, "cat": "mtia_runtime", "name": name, "args": args}


def mtia_layout(trace: dict) -> dict:
    """The builder's CUDA trace in MTIA's layout (as the shared MTIA trace has it): device events
    in ``mtia_ccp_events`` on the device's pid, named by what ran; host calls in
    ``mtia_runtime`` (``runFunction`` for an execution, ``enqueueCommand memcpy*`` for a copy);
    no GPU annotations; plus what must not be read or joined: an ``event_wait`` spanning a gap,
    an ``event_record``, an executor range with no correlation and a synchronize pair sharing
    one id that no activity has."""
    events, out = trace["traceEvents"], []
    executable = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "kernel"}
    for n, e in enumerate(events):
        cat = e.get("cat")
        if cat in ("kernel", "gpu_memcpy"):
            out.append(_device(e, n))
        elif cat == "cuda_runtime":
            out.append(_runtime(e, executable))
        elif cat == "gpu_user_annotation" or (e.get("ph") in ("s", "f") and cat == "ac2g"):
            continue
        elif e.get("ph") == "M" and e.get("pid") == 0:
            out.append({**e, "pid": DEVICE_PID})
        else:
            out.append(e)
    device = {"id": DEVICE_PID, "name": "ARTEMIS", "runtimeMajorVersion": 1, "runtimeMinorVersion": 30}
    return {**trace, "traceEvents": out, "deviceProperties": [device]}


def _extras(b: TraceBuilder, base_us: float) -> list[dict]:
    """Events the reading must leave alone (their times: ``base_us`` on the builder's clock)."""
    ts = (b.origin + b.ns(base_us)) / 1000

    def dev(name: str, at: float, dur: float, **args) -> dict:
        a = {"stream": 7, "seq_num": 1, "sqid": 8, "host_ctx": 1, **args}
        head = {"ph": "X", "cat": "mtia_ccp_events", "name": name, "pid": DEVICE_PID, "tid": 7}
        return head | {"ts": ts + at, "dur": dur, "args": a}

    def host(name: str, at: float, **args) -> dict:
        head = {"ph": "X", "cat": "mtia_runtime", "name": name, "pid": b.w.pid, "tid": b.w.main}
        return head | {"ts": ts + at, "dur": 1.0, "args": {"device": DEVICE_PID, "stream_id": 7, **args}}

    return [
        dev("event_wait", 1000, 1000, wait_on_stream=13, correlation=555),  # the 1 ms gap: idle
        dev("event_record", 4000, 0.2, correlation=556),
        dev("pe_exe", -600, 100, column="0", row="0"),  # no correlation: launched by nothing
        host("predictor_executor::run gif_thread_id:1", -700),  # no correlation: launches nothing
        host("synchronizeStream", 4100, correlation=557),
        host("synchronize", 4100.5, correlation=557),  # a duplicate id no activity has
        host("enqueueCommand waitOnEvent", 999, correlation=555),
        host("recordEvent", 3999, correlation=556),
    ]


def _planted(tmp_path: Path) -> Path:
    """Two 5 ms steps: merge 1 ms at 0, remote 2 ms at 2 ms, a 0.5 ms DMA request at 4.5 ms on
    the copy stream; compute 3 ms, copy 0.5 ms, idle 1.5 ms (the 1 ms gap an event_wait spans
    stays idle)."""
    b, extra = TraceBuilder(), []
    for s in range(2):
        base = 1000.0 + 10_000.0 * s
        with b.step():
            with b.forward():
                b.kernel("merge", 1000, op="aten::mm", at_us=base)
                b.kernel("remote", 2000, op="aten::mm", at_us=base + 2000)
                b.memcpy(500, "HtoD", at_us=base + 4500)
        extra += _extras(b, base)
    doc = mtia_layout(b.trace())
    doc["traceEvents"] += extra
    path = tmp_path / "mtia.json"
    path.write_text(json.dumps(doc))
    return path


def test_planted_mtia_trace_recovers_its_numbers(tmp_path):
    path = _planted(tmp_path)
    a = tracekit.load(path, cache=False, jobs=1)
    assert a.meta["mode"] == "gpu" and not any("device events not read" in n for n in a.meta["notices"])
    assert a.meta["device_kind"] == "mtia"  # the header says what the device is, not "gpu"
    assert "mode: mtia" in head_lines(a.meta)[0] and "- **mode**: mtia" in markdown_report(a.meta, {})
    assert not any("duplicate correlation" in w["message"] for w in a.meta["warnings"])
    assert [w["message"].split(" (")[0] for w in a.meta["warnings"] if "no launching" in w["message"]] == [
        "2 of 8 device activities"  # the pe_exe ranges, in no step (ProfilerStep: by launch)
    ]
    idle = a.table("idle")
    assert idle["window_ms"].tolist() == pytest.approx([5.0]) and idle["idle_ms"].tolist() == pytest.approx(
        [1.5]
    )
    ph = a.table("phases")
    assert ph["compute_ms"].sum() == pytest.approx(3.0) and ph["idle_ms"].sum() == pytest.approx(1.5)
    top = a.table("top_kernels").set_index("name")
    assert top.loc["merge", "total_ms"] == pytest.approx(1.0) and top.loc[
        "remote", "total_ms"
    ] == pytest.approx(2.0)
    assert top.loc["merge", "count"] == 1 and not {"event_wait", "event_record", "pe_exe"} & set(top.index)
    mem = a.table("memcpy")  # the direction: its launching call's name
    assert mem[["kind", "count"]].values.tolist() == [["HtoD", 1]] and mem["time_ms"].sum() == pytest.approx(
        0.5
    )
    assert mem["bytes"].tolist() == [1024.0]  # the request's args.size
    iv = a.intervals
    runtime = dict(zip(iv["name"].astype(str), iv["runtime"].astype(str)))
    assert runtime["merge"] == RUN and runtime["remote"] == RUN
    assert runtime["dma_request"] == "enqueueCommand memcpyHtoDAsync"
    assert iv["launched"].all()
    launches = a.table("launches")  # runFunction and enqueueCommand memcpy*Async: MTIA's launches
    assert launches["launches"].sum() == 3 and launches["other_api_launches"].sum() == 0
    assert launches["device_ms"].sum() == pytest.approx(3.5)
    wait = next(e for e in json.loads(path.read_text())["traceEvents"] if e["name"] == "event_wait")
    first = iv[iv["step"] == iv["step"].min()]
    assert first["start"].min() < wait["ts"] * 1000 < first["end"].max()  # inside the first step


def _events(path: Path) -> list[dict]:
    with gzip.open(path) as f:
        return json.load(f)["traceEvents"]


@pytest.fixture(scope="module")
def mtia(tmp_path_factory):
    src = shared_trace(MTIA_TRACE)
    dst = tmp_path_factory.mktemp("mtia") / src.name
    shutil.copy(src, dst)
    return dst, tracekit.load(dst, cache=False, jobs=1)


def test_the_shared_mtia_trace_reads_its_device_events(mtia):
    path, a = mtia
    ev = [e for e in _events(path) if e.get("cat") == "mtia_ccp_events"]
    work = {
        n: sum(e["dur"] for e in ev if e["name"] == n) / 1000
        for n in ("merge", "remote", "pe_exe", "dma_request")
    }
    count = {n: sum(e["name"] == n for e in ev) for n in work}
    assert (a.meta["mode"], a.meta["device_kind"]) == ("gpu", "mtia")
    assert not any("device events not read" in n for n in a.meta["notices"])
    top = a.table("top_kernels").set_index("name")
    for n, ms in work.items():  # one step (no ProfilerStep): every event in it
        assert top.loc[n, "total_ms"] == pytest.approx(ms, rel=1e-6) and top.loc[n, "count"] == count[n]
    assert "event_wait" not in top.index and "event_record" not in top.index
    mem = a.table("memcpy").set_index("kind")
    assert mem["count"].sum() == count["dma_request"]
    by_call, size = {}, {}  # each request's enqueue call's direction (none: Other), its bytes
    calls = {
        e["args"]["correlation"]: e["name"]
        for e in _events(path)
        if e.get("cat") == "mtia_runtime" and "correlation" in e["args"]
    }
    for e in ev:
        if e["name"] == "dma_request":
            call = calls.get(e["args"].get("correlation"), "")
            kind = "HtoD" if "HtoD" in call else "DtoH" if "DtoH" in call else "Other"
            by_call[kind] = by_call.get(kind, 0) + 1
            size[kind] = size.get(kind, 0) + e["args"]["size"]
    assert mem["count"].to_dict() == by_call
    assert mem["bytes"].to_dict() == size and mem["bytes"].sum() == 788_900_408  # args.size
    iv = a.intervals
    corr = {e["args"]["correlation"] for e in ev if "correlation" in e["args"] and e["name"] in work}
    assert int(iv["launched"].sum()) == sum(
        e["name"] in work and e["args"].get("correlation") in corr for e in ev
    )
    assert set(iv.loc[iv["name"].isin(["merge", "remote"]), "runtime"].astype(str)) == {RUN}
    launches = a.table("launches")  # every launched activity: by an MTIA launch call
    assert launches["launches"].sum() == int(iv["launched"].sum()) == 730
    assert launches["other_api_launches"].sum() == 0


def test_the_shared_mtia_trace_copy_bytes_add_up_to_each_enqueued_copy(mtia):
    """A copy's DMA requests' ``size`` args sum to its enqueue call's ``mem size``: the bytes
    read are the bytes copied (all 110 copies with a call in the file)."""
    path, a = mtia
    iv = a.intervals
    dma = iv[iv["name"].astype(str) == "dma_request"]
    sent = dma[dma["launched"]].groupby("corr")["bytes"].sum()
    said = {
        e["args"]["correlation"]: float(e["args"]["mem size"].split()[0])
        for e in _events(path)
        if e.get("cat") == "mtia_runtime" and e["name"].startswith("enqueueCommand memcpy")
    }
    assert len(sent) == 110 and sent.to_dict() == {c: said[c] for c in sent.index}


def test_the_shared_mtia_trace_has_sane_numbers(mtia):
    _, a = mtia
    idle, ph = a.table("idle"), a.table("phases")
    assert len(idle) == 1 and idle["window_ms"].iloc[0] > 0  # the one step is not empty
    wall = ph["wall_ms"].sum()
    assert wall == pytest.approx(idle["window_ms"].iloc[0])
    assert 0 < ph["compute_ms"].sum() <= wall
    assert idle["busy_ms"].iloc[0] + idle["idle_ms"].iloc[0] == pytest.approx(wall)
    k = a.table("kernels")
    assert k["percent"].sum() == pytest.approx(100.0, abs=0.05)  # the categories and idle tile the step
    assert not any("duplicate correlation" in w["message"] for w in a.meta["warnings"])


def test_an_mtia_trace_of_only_synchronisation_says_its_device_events_are_not_read(tmp_path):
    b = TraceBuilder()
    with b.step():
        b.cpu(100)
        with b.op("aten::add"):
            b.cpu(50)
    doc = mtia_layout(b.trace())
    doc["traceEvents"] += [e for e in _extras(b, 0) if e["cat"] == "mtia_ccp_events" and "wait" in e["name"]]
    path = tmp_path / "sync.json"
    path.write_text(json.dumps(doc))
    a = tracekit.load(path, cache=False, jobs=1)
    said = [n for n in a.meta["notices"] if n.startswith("device events not read")]
    assert a.meta["mode"] == "cpu" and said and "ARTEMIS" in said[0] and "MTIA" in said[0]
    assert a.meta["device_kind"] == "cpu" and "mode: cpu" in head_lines(a.meta)[0]


def test_a_cuda_trace_is_a_gpu_in_its_header(tmp_path):
    b = TraceBuilder()
    with b.step():
        b.kernel("k", 100, op="aten::mm")
    path = tmp_path / "cuda.json"
    path.write_text(json.dumps(b.trace()))
    a = tracekit.load(path, cache=False, jobs=1)
    assert (a.meta["mode"], a.meta["device_kind"]) == ("gpu", "gpu") and "mode: gpu" in head_lines(a.meta)[0]
