"""Steps on strangers' traces (issue 12, items 1 and 3), planted with tracekit.testing:

* a device activity whose launch is not in the file belongs to no step (never placed by time);
* ``ProfilerStep#N`` recorded as a torch 1.8-1.13 ``Operator`` (or ``cpu_op``) is a step;
* no ProfilerStep but repeated ``Optimizer.step#`` ranges: steps end where each one ends;
* no markers at all: one window, and the output says so.
"""

from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_ADAM, K_MUL

MS = 1e6


def _train(n_steps: int = 3, **kw) -> TraceBuilder:
    b = TraceBuilder(**kw)
    for _ in range(n_steps):
        with b.step():
            b.kernel(GEMM_A, 10, op="aten::mm")
            b.kernel(K_MUL, 2, op="aten::mul")
            with b.optimizer():
                b.kernel(K_ADAM, 3, op="aten::_fused_adam_")
            b.cpu(20)
    return b


def _load(tmp_path, doc: dict):
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    return tracekit.load(p, cache=False, jobs=1)


def _windows(a) -> dict:
    idle = a.table("idle", per_step=True)
    return dict(zip(idle["step"], idle["window_ms"]))


def test_an_activity_launched_before_the_file_belongs_to_no_step(tmp_path):
    b = TraceBuilder()
    with b.step():
        early = b.kernel(K_MUL, 30, op="aten::mul")  # its launch will be cut from the file
        b.kernel(GEMM_A, 10, op="aten::mm", gap_us=5)
    doc = b.trace()
    corr = early.activity.correlation
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if not (
            e.get("cat") in ("cuda_runtime", "cuda_driver", "ac2g")
            and e.get("args", {}).get("correlation") == corr
        )
    ]
    a = _load(tmp_path, doc)
    gemm = next(x for x in b.activities if x.name == GEMM_A)
    assert _windows(a) == {1: pytest.approx((gemm.end - gemm.start) / MS)}
    assert any("1 device activities with no launching runtime call" in n for n in a.meta["notices"])
    assert a.meta["coverage"][0]["outside"] == pytest.approx(30 / 40)


@pytest.mark.parametrize("category", ["Operator", "cpu_op"])
def test_profiler_step_of_any_category_is_a_step(tmp_path, category):
    b = _train()
    doc = b.trace()
    for e in doc["traceEvents"]:
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation":
            e["cat"] = category
    a = _load(tmp_path, doc)
    want = {s: (b.window(s)[1] - b.window(s)[0]) / MS for s in b.steps}
    assert _windows(a) == pytest.approx(want)
    # memory and shapes: not recorded by this trace (their notices only)
    assert [n for n in a.meta["notices"] if "profile_memory" not in n and "record_shapes" not in n] == []


def test_steps_are_inferred_from_optimizer_step_ranges(tmp_path):
    b = _train()
    doc = b.trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    a = _load(tmp_path, doc)
    want = {s: (b.window(s)[1] - b.window(s)[0]) / MS for s in b.steps}
    assert _windows(a) == pytest.approx(want)
    assert any("inferred from the Optimizer.step" in n for n in a.meta["notices"])
    ph = a.table("phases", per_step=True)
    opt = ph[ph["phase"] == "optimizer"]
    assert opt["wall_ms"].tolist() == pytest.approx([3e-3] * 3)


def test_no_markers_is_one_window(tmp_path):
    b = TraceBuilder()
    with b.step():
        b.kernel(GEMM_A, 10, op="aten::mm")
    doc = b.trace()
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    a = _load(tmp_path, doc)
    assert list(_windows(a)) == [0]
    assert any("treated as one step" in n for n in a.meta["notices"])
