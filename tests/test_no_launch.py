"""Device activities with no launching runtime call in the file (issue 14, item 5 of the views
brief): the warning, the coverage line and ``tracekit explain`` tell the same story, with the
count and the share of device time, and explain says which of the three causes it was."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_B, GEMM_C, K_MUL, K_SILU


def _cut(tmp_path):
    """One step of five kernels (10, 20, 30, 15, 25 us); the runtime calls of the first (its
    correlation id below every recorded call's: launched before the window), the third (between
    recorded calls: dropped) and the last (above them: launched after the window) are removed
    from the file: 3 of 5 activities, 65 of 100 us."""
    b = TraceBuilder()
    with b.step():
        plan = [(K_MUL, 10), (GEMM_A, 20), (GEMM_B, 30), (K_SILU, 15), (GEMM_C, 25)]
        ks = [b.kernel(k, d, op="aten::mm") for k, d in plan]
    cut = {ks[i].activity.correlation for i in (0, 2, 4)}
    doc = b.trace()
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if not (
            e.get("cat") in ("cuda_runtime", "cuda_driver", "ac2g")
            and e.get("args", {}).get("correlation") in cut
        )
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(doc))
    return path


def test_warning_coverage_and_explain_agree(tmp_path):
    path = _cut(tmp_path)
    a = tracekit.load(path, cache=False, jobs=1)
    (w,) = [w for w in a.warnings if w.code == "no_launch"]
    assert w.message == (
        "3 of 5 device activities (65.0% of device time) have no launching runtime call in the "
        "file: launched before the profiler's CPU window began or after it ended, or by a runtime "
        "call the profiler dropped; a trace with step markers leaves them out of every step"
    )
    cov = a.meta["coverage"][0]
    assert cov["launch"] == pytest.approx(0.35) and cov["outside"] == pytest.approx(0.65)
    assert any(n.startswith("3 device activities with no launching runtime call") for n in a.meta["notices"])
    run = CliRunner().invoke(main, ["explain", str(path), ".", "--no-cache", "--format", "json"])
    why = {c["name"]: c["launch_missing"] for c in json.loads(run.stdout)["chains"]}
    assert why == {K_MUL: "before", GEMM_A: None, GEMM_B: "dropped", K_SILU: None, GEMM_C: "after"}
    text = CliRunner().invoke(main, ["explain", str(path), ".", "--no-cache"], terminal_width=200)
    assert "none in the file: the profiler dropped its runtime call" in text.output
    assert "none in the file: launched after the CPU window ended" in text.output
    corr = [c["activity"]["correlation"] for c in json.loads(run.stdout)["chains"] if c["name"] == GEMM_C]
    assert f"(its correlation id {corr[0]} is above every recorded runtime call's)" in text.output


def test_without_step_markers_they_stay_in_the_one_window(tmp_path):
    """No ProfilerStep: the whole trace is one window, and it holds the unlaunched activities
    too (the warning's last clause is about traces with step markers only)."""
    b = TraceBuilder()
    k1 = b.kernel(K_MUL, 10, op="aten::mul")
    b.kernel(GEMM_A, 30, op="aten::mm")
    doc = b.trace()
    corr = k1.activity.correlation
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if not (e.get("cat") in ("cuda_runtime", "ac2g") and e.get("args", {}).get("correlation") == corr)
    ]
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(doc))
    a = tracekit.load(path, cache=False, jobs=1)
    assert any(w.code == "no_launch" and "(25.0% of device time)" in w.message for w in a.warnings)
    assert a.meta["coverage"][0]["outside"] == 0 and a.meta["coverage"][0]["launch"] == pytest.approx(0.75)
    assert a.table("kernels")["time_ms"].sum() == pytest.approx(0.040)


@pytest.mark.shared
def test_real_trace_agrees(tmp_path):
    """TraceLens's MI300 ResNet with activation checkpointing: 968 of 3653 device activities
    (31.8% of device time) have no runtime call in the file; coverage says launch 68.2% and
    outside steps 31.8%, and explain finds every one launched before the CPU window began."""
    import shutil

    from shared_traces import SHARED

    src = SHARED / "tracelens" / "mi300__resnet_act_checkpoint.json.gz"
    if not src.is_file():
        pytest.skip(f"shared traces not found at {SHARED}")
    path = tmp_path / src.name
    shutil.copy(src, path)
    a = tracekit.load(path, cache=False, jobs=1)
    (w,) = [w for w in a.warnings if w.code == "no_launch"]
    assert w.message.startswith("968 of 3653 device activities (31.8% of device time) have no launching")
    cov = a.meta["coverage"][0]
    assert f"{1 - cov['launch']:.1%}" == "31.8%" and cov["outside"] == pytest.approx(1 - cov["launch"])
    run = CliRunner().invoke(
        main, ["explain", str(path), ".", "--no-cache", "--format", "json", "--limit", "1000"]
    )
    doc = json.loads(run.stdout)
    missing = [c for c in doc["chains"] if c["launch"] is None]
    assert sum(c["count"] for c in missing) == 968
    assert {c["launch_missing"] for c in missing} == {"before"}
