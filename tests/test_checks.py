"""Self-checks (tracekit.pipeline.checks): each fires on a planted bad case, names its rank and step,
and reaches the terminal, JSON meta and HTML; they stay quiet where the numbers are right."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner
from shared_traces import SHARED, params

import tracekit
from tracekit.cli import main
from tracekit.pipeline import checks
from tracekit.pipeline.checks import TraceWarning, check_rank
from tracekit.pipeline.coverage import lines as coverage_lines
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_ADAM, K_MUL

CHECK_CODES = {
    "compute_exceeds_wall",
    "modules_do_not_sum",
    "kernels_do_not_sum",
    "placed_by_time",
    "outside_steps",
    "unattributed",
    "steps_overlap",
    "empty_step",
}


def _phases(compute_ms: float, wall_ms: float = 10.0) -> pd.DataFrame:
    return pd.DataFrame({"step": [3], "phase": ["forward"], "wall_ms": [wall_ms], "compute_ms": [compute_ms]})


def _steps(*windows: tuple[int, int, int]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "step": [s for s, _, _ in windows],
            "start": [a for _, a, _ in windows],
            "end": [b for _, _, b in windows],
            "complete": True,
        }
    )


def _codes(found: list[TraceWarning]) -> list[tuple[str, int | None, int | None]]:
    return [(w.code, w.rank, w.step) for w in found]


def test_compute_exceeding_wall_fires_with_rank_and_step():
    found = check_rank(2, {"phases": _phases(21.6)}, _steps(), {})
    assert _codes(found) == [("compute_exceeds_wall", 2, 3)]
    assert str(found[0]).startswith("rank 2, step 3: forward compute 21.600 ms exceeds")
    assert check_rank(2, {"phases": _phases(10.05)}, _steps(), {}) == []  # within 1%


def test_module_rows_that_do_not_sum_fire():
    mods = pd.DataFrame(
        {"step": [3, 3], "phase": ["forward", "forward"], "module": ["MLP", "Idle"], "time_ms": [9.0, 2.0]}
    )
    found = check_rank(0, {"phases": _phases(9.0), "modules": mods}, _steps(), {})
    assert _codes(found) == [("modules_do_not_sum", 0, 3)]
    mods["time_ms"] = [9.0, 1.0]
    assert check_rank(0, {"phases": _phases(9.0), "modules": mods}, _steps(), {}) == []


def test_kernel_rows_that_do_not_sum_fire():
    k = pd.DataFrame(
        {"step": [3, 3], "group": ["compute", "idle"], "category": ["GEMM", "Idle"], "time_ms": [4.0, 1.0]}
    )
    found = check_rank(0, {"kernels": k}, _steps((3, 0, 6_000_000)), {})
    assert _codes(found) == [("kernels_do_not_sum", 0, 3)]
    assert check_rank(0, {"kernels": k}, _steps((3, 0, 5_000_000)), {}) == []


@pytest.mark.parametrize(
    "key,code",
    [("by_time", "placed_by_time"), ("outside", "outside_steps"), ("unattributed", "unattributed")],
)
def test_shares_above_the_limit_fire(key, code):
    assert _codes(check_rank(1, {}, _steps(), {"coverage": {key: 0.051}})) == [(code, 1, None)]
    assert check_rank(1, {}, _steps(), {"coverage": {key: checks.SHARE_LIMIT}}) == []


def test_overlapping_and_empty_steps_fire():
    steps = _steps((1, 0, 1000), (2, 900, 2000), (3, 2000, 3000))
    found = check_rank(0, {}, steps, {"step_ranges": {"empty": [4], "cpu_overlaps": [[2, 3]]}})
    assert sorted(_codes(found)) == [("empty_step", 0, 4), ("steps_overlap", 0, 2), ("steps_overlap", 0, 3)]


def _clean_trace(b: TraceBuilder) -> None:
    with b.module("LlamaMLP", "model.layers.0.mlp"):
        mm = b.kernel(GEMM_A, 10, op="aten::mm")
    with b.backward():
        b.kernel(K_MUL, 3, op="aten::mul", creator=mm)
    with b.optimizer():
        b.kernel(K_ADAM, 5, op="aten::_fused_adam_")


def test_quiet_on_a_clean_trace(tmp_path):
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            _clean_trace(b)
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False, jobs=1)
    assert [w for w in a.warnings if w.code in CHECK_CODES] == []


def test_an_empty_step_reaches_terminal_json_and_html(tmp_path):
    b = TraceBuilder(rank=3, world_size=4)
    with b.step():
        _clean_trace(b)
    with b.step():  # step 2 launches nothing
        b.cpu(50)
    with b.step():
        _clean_trace(b)
    path = b.write(tmp_path / "t.json")
    a = tracekit.load(path, cache=False, jobs=1)
    assert _codes([w for w in a.warnings if w.code in CHECK_CODES]) == [("empty_step", 3, 2)]
    assert [w.as_dict() for w in a.warnings] == a.meta["warnings"]  # exactly what JSON shows

    run = CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "--format", "json"])
    doc = json.loads(run.stdout)
    assert {
        "code": "empty_step",
        "rank": 3,
        "step": 2,
        "message": "the ProfilerStep range launched no activity",
    } in doc["meta"]["warnings"]
    assert "tracekit: warning: rank 3, step 2: the ProfilerStep range launched no activity" in run.stderr
    out = tmp_path / "r.html"
    CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "--format", "html", "--out", str(out)])
    assert "rank 3, step 2: the ProfilerStep range launched no activity" in out.read_text()


def test_legacy_string_warnings_become_records():
    w = checks.as_warning("12 duplicate correlation ids", rank=5)
    assert (w.code, w.rank, w.step, str(w)) == ("trace", 5, None, "rank 5: 12 duplicate correlation ids")
    assert (
        checks.text({"run": "B", "code": "x", "rank": 0, "step": 1, "message": "m"}) == "B: rank 0, step 1: m"
    )


#: Shared traces whose numbers a self-check rightly doubts today (checked in the report of
#: each fix): trace name fragment -> the codes that may fire. Every other trace must be quiet.
KNOWN = {
    "cpu_only__rank-34": {"outside_steps"},  # 84% of CPU op time before the first step
    # kernels launched before the recorded CPU window belong to no step (issue 12, item 1):
    # reported as device time outside every step
    "negative_queue_length": {"outside_steps", "steps_overlap"},
    "trace_diff__test": {"outside_steps", "steps_overlap"},
    "resnet_act_checkpoint": {"outside_steps", "steps_overlap"},
    # launches on a process (pid 1670242) other than the ProfilerStep's (3100453): placed by time
    "triton_example": {"placed_by_time"},
    # torch 1.8 ProfilerStep as an Operator / no step markers (issue 12, item 3): fixed, quiet
}


@pytest.mark.parametrize("src", params())
def test_shared_traces_are_quiet_where_numbers_are_right(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    a = tracekit.load(dst, cache=False, jobs=1)
    fired = {w.code for w in a.warnings if w.code in CHECK_CODES}
    allowed = next((codes for frag, codes in KNOWN.items() if frag in src.name), set())
    assert fired <= allowed, [str(w) for w in a.warnings if w.code in fired - allowed]


def test_coverage_shares_are_exact_on_a_hand_built_table():
    from tracekit.pipeline.coverage import line, measure

    acts = pd.DataFrame(
        {
            "start": [0, 0, 0, 0],
            "end": [10, 20, 30, 40],  # durations 10, 20, 30, 40 (of 100)
            "step": [1, 1, 1, -1],
            "launched": [True, True, False, True],
            "module_id": [0, -1, -1, 3],
            "phase": ["forward", "backward", "forward", "unattributed"],
            "step_by": ["launch", "launch", "time", "none"],
            "phase_evidence": ["default", "autograd_thread", "default", "default"],
        }
    )
    cov = measure(acts)
    assert cov == {
        "device_ms": 1e-4,
        "launch": 0.7,
        "module": 0.5,
        "phase_evidence": 0.2,
        "phase_default": 0.4,  # the two forward rows: evidence "default"
        "training_phases": 0.2,
        "unattributed": 0.4,
        "by_time": 0.3,
        "outside": 0.4,
    }
    assert line(cov) == (
        "launch 70.0% · module 50.0% · phase evidence 20.0% + forward by default 40.0% · "
        "unattributed 40.0% · placed by time 30.0% · outside steps 40.0%"
    )
    forward_only = {**cov, "phase_evidence": 0.0, "phase_default": 1.0, "training_phases": 0.0}
    assert "· phase forward by default 100.0% (forward only: no backward or optimizer) ·" in line(
        forward_only
    )
    annotated = {**forward_only, "phase_evidence": 1.0, "phase_default": 0.0}
    assert "· phase evidence 100.0% (forward only: no backward or optimizer) ·" in line(annotated)


def test_phase_coverage_of_inference_and_training(tmp_path):
    """A forward-only trace is forward by default, and the coverage line says it is forward
    only rather than 0% evidence; a training step names both shares (evidence for backward and
    optimizer, the forward before them by default), adding up with unattributed to 100%."""
    from tracekit.testing.kernels import GEMM_NN

    inf = TraceBuilder()
    with inf.step(), inf.module("LlamaMLP", "model.layers.0.mlp"):
        inf.kernel(GEMM_A, 30, op="aten::mm")
    a = tracekit.load(inf.write(tmp_path / "i.json"), cache=False, jobs=1)
    c = a.meta["coverage"][0]
    assert (c["phase_evidence"], c["phase_default"], c["training_phases"]) == (0.0, 1.0, 0.0)
    train = TraceBuilder()
    with train.step():
        mm = train.kernel(GEMM_A, 10, op="aten::mm", at_us=10)  # forward: 10 of 40 us
        with train.backward():
            train.kernel(GEMM_NN, 25, op="aten::mm", creator=mm, at_us=30)
        with train.optimizer():
            train.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=60)
    t = tracekit.load(train.write(tmp_path / "t.json"), cache=False, jobs=1)
    c = t.meta["coverage"][0]
    assert (c["phase_evidence"], c["phase_default"], c["training_phases"]) == (0.75, 0.25, 0.75)
    run = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["analyze", str(tmp_path / "i.json"), "--no-cache"])
    assert "phase forward by default 100.0% (forward only: no backward or optimizer)" in run.output
    run = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["analyze", str(tmp_path / "t.json"), "--no-cache"])
    assert "phase evidence 75.0% + forward by default 25.0% ·" in run.output


@pytest.mark.shared
@pytest.mark.parametrize(
    "name", ["b200__eager_trace", "inference__sglang_prefilldecode__sglang_Qwen3-8B_prefilldecode"]
)
def test_real_inference_traces_are_forward_only(name, tmp_path):
    """TraceLens's vLLM (B200) and SGLang (MI300X) inference traces: all device time is forward
    by default, and the line says the trace is forward only (it read "phase evidence 0.0%")."""
    src = SHARED / "tracelens" / f"{name}.json.gz"
    if not src.is_file():
        pytest.skip(f"shared traces not found at {SHARED}")
    shutil.copy(src, tmp_path / src.name)
    a = tracekit.load(tmp_path / src.name, cache=False, jobs=1)
    c = a.meta["coverage"][0]
    assert (c["phase_evidence"], c["phase_default"], c["training_phases"]) == (0.0, 1.0, 0.0)
    assert (
        "phase forward by default 100.0% (forward only: no backward or optimizer)"
        in coverage_lines(a.meta)[0]
    )


def test_coverage_line_in_terminal_and_html(tmp_path):
    b = TraceBuilder()
    with b.step():
        _clean_trace(b)
    path = b.write(tmp_path / "t.json")
    run = CliRunner().invoke(main, ["analyze", str(path), "--no-cache"])
    assert "coverage (share of device time): launch 100.0% · module " in run.stdout
    out = tmp_path / "r.html"
    CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "--format", "html", "--out", str(out)])
    assert "coverage (share of device time): launch 100.0%" in out.read_text()


def test_a_cut_step_is_named_in_its_warning(tmp_path):
    b = TraceBuilder(rank=2, world_size=4)
    with b.step():  # 1: a sliver of a step, as when the profiling window opens mid-step
        b.kernel(K_MUL, 1, op="aten::mul")
    for _ in range(3):
        with b.step():
            _clean_trace(b)
            b.kernel(GEMM_A, 100, op="aten::mm")
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False, jobs=1)
    cut = [w for w in a.warnings if w.code == "step_cut"]
    assert [(w.rank, w.step) for w in cut] == [(2, 1)]
    assert str(cut[0]).startswith("rank 2, step 1: the step looks cut by the profiling window")
