"""tracekit.testing.TraceBuilder: the trace it writes is Kineto-shaped and tracekit recovers
exactly the times planted in it."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

import tracekit
from tracekit.testing import COMM_STREAM, TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

US = 1e-3  # one microsecond in ms
EXACT = 1e-9


def plant(**kwargs) -> TraceBuilder:
    """One training step with every time planted (us after the origin):

    forward   GEMM 10-20, mul 25-27 (both in model.layers.0.mlp)
    backward  mul 40-43, GEMM 45-65 (their nodes' forward ops are in the MLP),
              AllReduce 60-68 on the comm stream (3 us not under compute)
    optimizer Adam 70-75
    """
    b = TraceBuilder(**kwargs)
    with b.step():
        with b.module("LlamaMLP", "model.layers.0.mlp"):
            with b.module("Linear", "model.layers.0.mlp.up_proj"):
                mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=10)
            mul = b.kernel(K_MUL, 2, op="aten::mul", at_us=25)
        with b.backward():
            b.kernel(K_MUL, 3, op="aten::mul", creator=mul, at_us=40)
            b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, at_us=45)
            with b.gradient_hook():
                b.comm("AllReduce", 8, at_us=60)
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=70)
    return b


VARIANTS = {
    "nn_module": {},
    "capture": {"modules": "capture"},
    "both": {"modules": "both"},
    "no_flows": {"flows": False},
    "main_thread_backward": {"autograd_thread": False},
    "int_ts_big_ids": {"ts_format": "int", "big_ids": True},
    "old_kineto": {"old_categories": True},
    "jitter": {"jitter_seed": 3},
}


def _rows(df, key):
    return {r[key]: r for r in df.to_dict("records")}


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_planted_times_come_back_exactly(tmp_path, variant, suffix):
    b = plant(**VARIANTS[variant])
    check_planted(tracekit.load(b.write(tmp_path / f"rank0.pt.trace{suffix}"), cache=False))


def check_planted(a: tracekit.Analysis) -> None:
    """The tables of :func:`plant`'s trace hold exactly the planted times."""
    assert a.meta["complete_steps"] == {0: [1]}
    phases = _rows(a.table("phases"), "phase")
    assert phases["forward"]["wall_ms"] == pytest.approx(30 * US, abs=EXACT)
    assert phases["backward"]["wall_ms"] == pytest.approx(30 * US, abs=EXACT)
    assert phases["optimizer"]["wall_ms"] == pytest.approx(5 * US, abs=EXACT)
    assert phases["backward"]["exposed_comm_ms"] == pytest.approx(3 * US, abs=EXACT)
    m = a.table("modules")
    got = {(r["phase"], r["module"]): r["time_ms"] for r in m.to_dict("records") if r["time_ms"]}
    assert got == pytest.approx(
        {
            ("forward", "MLP"): 12 * US,
            ("forward", "Idle"): 18 * US,
            ("backward", "MLP"): 23 * US,
            ("backward", "Exposed communication"): 3 * US,
            ("backward", "Idle"): 4 * US,
            ("optimizer", "Other"): 5 * US,
        },
        abs=EXACT,
    )
    idle = a.table("idle").iloc[0]
    assert (idle["window_ms"], idle["idle_ms"]) == pytest.approx((65 * US, 22 * US), abs=EXACT)
    comm = a.table("comm").iloc[0]
    assert (comm["phase"], comm["collective"], comm["count"]) == ("backward", "AllReduce", 1)


def test_activities_hold_the_planted_truth():
    b = plant()
    gemm, mul, bmul, bgemm, ar, adam = b.activities
    assert [(x.start - b.origin, x.end - b.origin) for x in b.activities] == [
        (10_000, 20_000),
        (25_000, 27_000),
        (40_000, 43_000),
        (45_000, 65_000),
        (60_000, 68_000),
        (70_000, 75_000),
    ]
    assert [x.phase for x in b.activities] == ["forward"] * 2 + ["backward"] * 3 + ["optimizer"]
    assert (gemm.module, mul.module) == ("model.layers.0.mlp.up_proj", "model.layers.0.mlp")
    assert (bgemm.module, bmul.module) == (gemm.module, mul.module)  # through the creator
    assert (ar.comm, ar.collective, ar.stream) == (True, "AllReduce", COMM_STREAM)
    assert gemm.gemm and bgemm.gemm and not adam.gemm
    assert b.window(1) == (b.origin + 10_000, b.origin + 75_000)


def test_fields_are_the_ones_kineto_writes():
    """Top-level keys per event category, and the args real PyTorch traces carry (from
    ../shared/traces: tracelens b200 eager trace and the HTA backward-thread trace)."""
    real_args = {
        "cpu_op": {
            "External id",
            "Record function id",
            "Sequence number",
            "Fwd thread id",
            "Collective name",
            "dtype",
            "Process Group Name",
            "Group size",
            "Ev Idx",
        },
        "user_annotation": {"External id", "Record function id", "Ev Idx"},
        "python_function": {"Python id", "Python parent id", "Python module id", "Ev Idx"},
        "cuda_runtime": {"External id", "cbid", "correlation"},
        "kernel": {
            "External id",
            "queued",
            "device",
            "context",
            "stream",
            "correlation",
            "registers per thread",
            "shared memory",
            "blocks per SM",
            "warps per SM",
            "grid",
            "block",
            "est. achieved occupancy %",
        },
        "gpu_memcpy": {
            "External id",
            "device",
            "context",
            "stream",
            "correlation",
            "bytes",
            "memory bandwidth (GB/s)",
        },
        "gpu_user_annotation": {"External id"},
    }
    b = plant()
    with b.step():
        b.memcpy(4)
    trace = b.trace()
    assert {"schemaVersion", "deviceProperties", "distributedInfo", "traceEvents"} <= set(trace)
    seen = set()
    for e in trace["traceEvents"]:
        cat = e.get("cat")
        if e["ph"] == "X" and cat in real_args:
            seen.add(cat)
            assert set(e) == {"ph", "cat", "name", "pid", "tid", "ts", "dur", "args"}, e
            assert set(e["args"]) <= real_args[cat], (cat, set(e["args"]) - real_args[cat])
        if e["ph"] in ("s", "f"):
            assert e["cat"] in ("ac2g", "fwdbwd") and {"id", "pid", "tid", "ts", "name"} <= set(e)
    assert seen == set(real_args)


def test_backward_nodes_carry_the_forward_sequence_number():
    b = plant(flows=False)
    ev = b.trace()["traceEvents"]
    fwd = {
        e["args"]["Sequence number"]
        for e in ev
        if e.get("cat") == "cpu_op" and e["name"] == "aten::mm" and "Sequence number" in e["args"]
    }
    node = [e for e in ev if e.get("name") == "MmBackward0"]
    assert len(node) == 1 and node[0]["args"]["Sequence number"] in fwd
    assert node[0]["args"]["Fwd thread id"] == 1
    assert not [e for e in ev if e.get("cat") == "fwdbwd"]


def test_planting_the_impossible_is_an_error():
    b = TraceBuilder()
    with b.step():
        mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=10)
        with pytest.raises(ValueError, match="before its launch or the end of stream"):
            b.kernel(GEMM_A, 10, op="aten::mm", at_us=15)  # stream 7 is busy until 20
    with pytest.raises(ValueError, match="whole microsecond"):
        TraceBuilder(ts_format="int").kernel(GEMM_A, 1.5, op="aten::mm")
    with pytest.raises(RuntimeError, match="inside backward"), b.backward_node(mm):
        pass  # a backward node outside backward()


def test_steps_number_up_and_files_are_gzip(tmp_path):
    b = TraceBuilder(first_step=7)
    for _ in range(3):
        with b.step():
            b.kernel(K_MUL, 2, op="aten::mul", gap_us=5)
    assert b.steps == [7, 8, 9]
    p = b.write(tmp_path / "x.json.gz")
    assert json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]
    a = tracekit.load(p, cache=False)
    assert a.meta["complete_steps"] == {0: [7, 8, 9]}
    assert len(a.table("phases", per_step=True).query("phase == 'forward'")) == 3


def test_importing_it_pulls_neither_torch_nor_hypothesis():
    code = (
        "import sys, tracekit.testing; print(sorted(m for m in ('torch', 'hypothesis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_planted_shapes_come_back_as_their_json_text(tmp_path, suffix):
    """``op(..., input_dims=...)`` and ``kernel(..., op=..., input_dims=...)`` write the four
    shape args as ``record_shapes=True`` does; the reader keeps each as its JSON text (which
    parses back to what was planted), "" on ops planted without them."""
    from tracekit.read.reader import read_trace

    b = TraceBuilder()
    dims, types = [[8, 4096], [4096, 11008]], ["c10::BFloat16", "c10::BFloat16"]
    with b.step():
        k = b.kernel(GEMM_A, 10, op="aten::mm", input_dims=dims, input_types=types,
                     input_strides=[[4096, 1], [1, 4096]], concrete_inputs=["", ""])  # fmt: skip
        with b.op("aten::add", input_dims=[[8], []], concrete_inputs=["", "1"]):
            b.kernel(K_MUL, 2)
        b.kernel(K_MUL, 2, op="aten::mul")
    assert k.op is not None and k.op.shapes["input_dims"] == dims
    with pytest.raises(ValueError):
        b.kernel(K_MUL, 1, input_dims=[[1]])  # shapes without an op of their own
    ev = read_trace(b.write(tmp_path / f"t{suffix}")).events
    ops = ev[ev["name"].isin(["aten::mm", "aten::add", "aten::mul"])].set_index("name")
    cols = ["input_dims", "input_types", "input_strides", "concrete_inputs"]
    parsed = ops[cols].astype(object).map(lambda t: json.loads(t) if t else None)
    assert parsed.loc["aten::mm"].tolist() == [dims, types, [[4096, 1], [1, 4096]], ["", ""]]
    assert parsed.loc["aten::add"].tolist() == [[[8], []], None, None, ["", "1"]]
    assert ops.loc["aten::mul", cols].tolist() == ["", "", "", ""]
    assert ops.loc["aten::mm", "input_dims"] == json.dumps(dims)  # the text as written
