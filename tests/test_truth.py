"""Ground truth: tracekit recovers exactly the times planted in synthetic traces.

Each trace comes from tracekit.testing.llama_training with a Truth computed from the planted device
intervals and the labels the generator meant (phase, module category, block, collective), by
the definitions in docs/metrics.md. Times are planted in integer nanoseconds, so every ms value
must match to 1e-6 ms (one nanosecond).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.testing import llama_training, write_trace
from tracekit.testing.expected import TABLE_KEYS

ABS = 1e-6  # ms: one nanosecond
PCT = 1e-6  # percent points


CONFIGS = {
    "default": dict(),
    "sdpa": dict(attention="sdpa"),
    "capture": dict(modules="capture"),
    "both": dict(modules="both"),
    "main_thread_backward": dict(autograd_thread=False),
    "fwd_thread_id_tid": dict(fwd_thread_id="tid"),
    "int_ts": dict(ts_format="int", seed=3),
    "big_ids_shuffled": dict(big_ids=True, shuffle=True, seed=7),
    "old_categories": dict(old_categories=True, seed=5),
    "three_layers_three_steps": dict(n_layers=3, n_steps=3, seed=2),
    "one_layer_one_step": dict(n_layers=1, n_steps=1, seed=4),
    "no_comm_no_side_stream": dict(comm=False, side_stream=False, rotary_module=False, zero_grad=False),
    "sdpa_capture_shuffled": dict(attention="sdpa", modules="capture", shuffle=True, seed=9),
}


_cache: dict = {}


def analysed(name: str, tmp_path_factory, suffix: str = ".json.gz"):
    key = (name, suffix)
    if key not in _cache:
        trace, truth = llama_training(**CONFIGS[name])
        path = write_trace(tmp_path_factory.mktemp("truth") / f"{name}.pt.trace{suffix}", trace)
        a = tracekit.load(str(path))
        _cache[key] = (a, truth, path)
    return _cache[key]


def _key(row, cols):
    return tuple(row[c] for c in cols)


def assert_table(
    actual: pd.DataFrame, expected: list[dict], name: str, per_step: bool, columns: list[str] | None = None
) -> None:
    """Every expected row is present with equal values; extra actual rows are all-zero."""
    cols = (("step",) if per_step else ()) + TABLE_KEYS[name]
    assert isinstance(actual, pd.DataFrame), name
    for c in cols:
        assert c in actual.columns, f"{name}: no column {c!r} in {list(actual.columns)}"
    value_cols = columns or [c for c in expected[0] if c not in cols]
    for c in value_cols:
        assert c in actual.columns, f"{name}: no column {c!r} in {list(actual.columns)}"
    rows = {}
    for r in actual.to_dict("records"):
        k = tuple(int(r[c]) if c == "step" else r[c] for c in cols)
        assert k not in rows, f"{name}: duplicate row {k}"
        rows[k] = r
    problems = []
    for exp in expected:
        k = _key(exp, cols)
        got = rows.pop(k, None)
        if got is None:
            if any(exp[c] for c in value_cols if isinstance(exp[c], (int, float)) and c != "count"):
                problems.append(f"{name}{list(k)}: missing row, expected {exp}")
            continue
        for c in value_cols:
            tol = PCT if c == "percent" else ABS
            if got[c] != pytest.approx(exp[c], abs=tol):
                problems.append(f"{name}{list(k)}.{c}: expected {exp[c]!r}, got {got[c]!r}")
    for k, got in rows.items():
        for c in value_cols:
            if c == "count":
                continue
            v = got[c]
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)) and abs(v) > ABS:
                problems.append(f"{name}{list(k)}: unexpected row with {c}={v!r}")
    assert not problems, "\n".join(problems)


def per_step_expected(truth, name, phases=None):
    recs = truth.per_step[name]
    if phases is not None:
        recs = [r for r in recs if r["phase"] in phases]
    return recs


def actual_table(a, name, per_step, phases=None):
    t = a.tables(per_step=per_step)[name]
    if phases is not None:
        t = t[t["phase"].isin(phases)]
    return t


# ---------------------------------------------------------------------------------------------
# per-step tables: the primary checks


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_idle_per_step(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    assert_table(actual_table(a, "idle", True), truth.per_step["idle"], "idle", True)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_phases_per_step(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    assert_table(actual_table(a, "phases", True), truth.per_step["phases"], "phases", True)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_gemm_per_step(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    assert_table(actual_table(a, "gemm", True), truth.per_step["gemm"], "gemm", True)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_comm_per_step(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    got = actual_table(a, "comm", True)
    if not CONFIGS[cfg].get("comm", True):
        assert "comm" not in truth.per_step
        assert (
            got.empty
            or (got.select_dtypes("number").drop(columns=["step"], errors="ignore").abs() < ABS).all().all()
        )
        return
    assert_table(got, truth.per_step["comm"], "comm", True)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_modules_forward_backward_per_step(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    fb = ("forward", "backward")
    assert_table(
        actual_table(a, "modules", True, fb), per_step_expected(truth, "modules", fb), "modules", True
    )


@pytest.mark.parametrize("cfg", ["default", "big_ids_shuffled"])
def test_modules_optimizer_column_per_step(cfg, tmp_path_factory):
    """tracekit's Table VI has an optimizer column (so every phase reconciles); it is exact."""
    a, truth, _ = analysed(cfg, tmp_path_factory)
    got = actual_table(a, "modules", True, ("optimizer",))
    assert not got.empty, "the modules table lost its optimizer column"
    assert_table(got, per_step_expected(truth, "modules", ("optimizer",)), "modules", True)


@pytest.mark.parametrize("cfg", list(CONFIGS))
def test_timeline_per_step(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    assert_table(
        actual_table(a, "timeline", True),
        truth.per_step["timeline"],
        "timeline",
        True,
        columns=["count", "time_ms"],
    )


@pytest.mark.parametrize("cfg", ["default", "three_layers_three_steps"])
def test_timeline_percent_of_forward_wall(cfg, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    assert_table(
        actual_table(a, "timeline", True), truth.per_step["timeline"], "timeline", True, columns=["percent"]
    )


@pytest.mark.parametrize("cfg", ["default", "sdpa", "three_layers_three_steps"])
def test_columns_reconcile(cfg, tmp_path_factory):
    """Module columns add up to their phase wall time, phases to the step window."""
    a, truth, _ = analysed(cfg, tmp_path_factory)
    t = a.tables(per_step=True)
    for step in truth.steps:
        ph = t["phases"][t["phases"]["step"] == step]
        idle = t["idle"][t["idle"]["step"] == step]
        assert ph["wall_ms"].sum() == pytest.approx(float(idle["window_ms"].iloc[0]), abs=ABS)
        for phase in ("forward", "backward"):
            m = t["modules"][(t["modules"]["step"] == step) & (t["modules"]["phase"] == phase)]
            wall = float(ph[ph["phase"] == phase]["wall_ms"].iloc[0])
            assert m["time_ms"].sum() == pytest.approx(wall, abs=ABS)
            assert m["percent"].sum() == pytest.approx(100.0, abs=PCT)


# ---------------------------------------------------------------------------------------------
# mean over steps


@pytest.mark.parametrize("cfg", ["default", "three_layers_three_steps", "big_ids_shuffled"])
@pytest.mark.parametrize("name", ["idle", "phases", "gemm", "comm", "modules", "timeline"])
def test_mean_tables_times(cfg, name, tmp_path_factory):
    a, truth, _ = analysed(cfg, tmp_path_factory)
    exp = truth.mean[name]
    cols = [c for c in exp[0] if c not in TABLE_KEYS[name] and c != "percent"]
    assert_table(a.tables()[name], exp, name, False, columns=cols)


@pytest.mark.parametrize("cfg", ["default", "three_layers_three_steps"])
@pytest.mark.parametrize("name", ["idle", "phases", "gemm", "modules", "timeline"])
def test_mean_tables_percent_is_ratio_of_means(cfg, name, tmp_path_factory):
    """Definitional: the mean table's percent column is the ratio of the mean times (of the
    mean step window, phase wall, compute time), never the mean of the per-step percents."""
    a, truth, _ = analysed(cfg, tmp_path_factory)
    assert_table(a.tables()[name], truth.mean[name], name, False, columns=["percent"])


def test_step_column_is_profiler_step_number(tmp_path_factory):
    a, truth, _ = analysed("three_layers_three_steps", tmp_path_factory)
    steps = sorted(int(s) for s in a.tables(per_step=True)["idle"]["step"].unique())
    assert steps == truth.steps == [5, 6, 7]
    assert "step" not in a.tables()["idle"].columns


# ---------------------------------------------------------------------------------------------
# plain json, and the CLI end to end


def test_plain_json_equals_gzip(tmp_path_factory):
    a_gz, truth, _ = analysed("default", tmp_path_factory, ".json.gz")
    a_js, _, _ = analysed("default", tmp_path_factory, ".json")
    t_gz, t_js = a_gz.tables(per_step=True), a_js.tables(per_step=True)
    assert set(t_gz) == set(t_js)
    for name in t_gz:
        pd.testing.assert_frame_equal(t_js[name].reset_index(drop=True), t_gz[name].reset_index(drop=True))
    for name in ("idle", "phases", "comm", "timeline"):
        assert_table(t_js[name], truth.per_step[name], name, True)


def _cli(path):
    # the console script of the interpreter under test (a `tracekit` found on PATH may be another
    # install's), else the module
    exe = Path(sys.executable).with_name("tracekit")
    cmd = [str(exe)] if exe.is_file() else [sys.executable, "-m", "tracekit.cli"]
    return subprocess.run(
        cmd + ["analyze", str(path), "--format", "json"], capture_output=True, text=True, timeout=300
    )


def test_cli_json_end_to_end(tmp_path):
    trace, truth = llama_training(n_layers=2, n_steps=2, seed=21, big_ids=True)
    path = write_trace(tmp_path / "rank0.pt.trace.json", trace)
    p = _cli(path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= {"meta", "tables"}
    for name in ("idle", "phases", "gemm", "comm"):
        exp = truth.mean[name]
        assert_table(
            pd.DataFrame(out["tables"][name]),
            exp,
            name,
            False,
            columns=[c for c in exp[0] if c not in TABLE_KEYS[name] and c != "percent"],
        )
    fb = [r for r in truth.mean["modules"] if r["phase"] in ("forward", "backward")]
    got = pd.DataFrame(out["tables"]["modules"])
    assert_table(got[got["phase"].isin(["forward", "backward"])], fb, "modules", False, columns=["time_ms"])


# ---------------------------------------------------------------------------------------------
# random combinations of the knobs


def _random_config(seed: int) -> dict:
    import random

    r = random.Random(seed)
    return dict(
        n_layers=r.randint(1, 4),
        n_steps=r.randint(1, 3),
        seed=seed,
        attention=r.choice(["eager", "sdpa"]),
        modules=r.choice(["nn_module", "capture", "both"]),
        autograd_thread=r.choice([True, False]),
        fwd_thread_id=r.choice(["real", "tid"]),
        comm=r.random() < 0.8,
        forward_allgather=r.random() < 0.7,
        side_stream=r.random() < 0.5,
        rotary_module=r.random() < 0.7,
        zero_grad=r.random() < 0.5,
        ts_format=r.choice(["float", "int"]),
        big_ids=r.random() < 0.5,
        old_categories=r.random() < 0.2,
        shuffle=r.random() < 0.5,
        first_step=r.randint(0, 30),
    )


@pytest.mark.parametrize("seed", range(100, 112))
def test_random_configurations(seed, tmp_path):
    cfg = _random_config(seed)
    trace, truth = llama_training(**cfg)
    path = write_trace(tmp_path / ("t.json.gz" if seed % 2 else "t.json"), trace)
    tables = tracekit.load(str(path)).tables(per_step=True)
    for name in ("idle", "phases", "gemm", "comm", "modules", "timeline"):
        if name not in truth.per_step:
            continue
        assert_table(
            tables[name][tables[name]["phase"] != "optimizer"] if name == "modules" else tables[name],
            [r for r in truth.per_step[name] if name != "modules" or r["phase"] != "optimizer"],
            name,
            True,
        )
