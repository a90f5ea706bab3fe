"""``tracekit explain``: the chain behind each label, recovered exactly on a planted trace, and
no traceback on any real trace."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from shared_traces import params

from tracekit.cli import main
from tracekit.explain import compile_pattern
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

SAMPLES = ["tiny-infer", "tiny-train-1rank", "tiny-zero2-2ranks"]


def plant(tmp_path, modules: str = "capture", name: str = GEMM_A, **kw):
    """Three steps: forward GEMM in model.layers.0.mlp.up_proj, its backward, an optimizer."""
    b = TraceBuilder(modules=modules, **kw)
    for _ in range(3):
        with b.step():
            with b.module("LlamaMLP", "model.layers.0.mlp"):
                with b.module("Linear", "model.layers.0.mlp.up_proj"):
                    mm = b.kernel(name, 10, op="aten::mm")
                b.kernel(K_MUL, 2, op="aten::mul")
            with b.backward():
                b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm)
            with b.optimizer():
                b.kernel(K_ADAM, 5, op="aten::_fused_adam_")
    return b, b.write(tmp_path / "t.json")


def explain_json(path, *args):
    run = CliRunner().invoke(main, ["explain", str(path), *args, "--no-cache", "--format", "json"])
    assert run.exit_code == 0, run.output
    return json.loads(run.stdout)


def test_forward_chain_is_recovered_exactly(tmp_path):
    b, path = plant(tmp_path)
    doc = explain_json(path, "xmma_gemm")
    assert doc["meta"]["matched"] == 3 and doc["meta"]["groups"] == 1
    (c,) = doc["chains"]
    first = b.activities[0]
    assert c["count"] == 3 and c["steps"] == [1, 2, 3] and c["in_tables"] == [1, 2, 3]
    assert c["total_ms"] == pytest.approx(0.030, abs=1e-9)
    assert c["activity"]["start_ns"] == first.start and c["activity"]["dur_ns"] == 10_000
    assert c["launch"]["correlation"] == first.correlation
    assert c["launch"]["runtime"] == "cudaLaunchKernel"
    assert [o["name"] for o in c["op_stack"] if o["kind"] == "op"] == ["aten::mm"]
    assert c["op_stack"][0]["name"] == "ProfilerStep#1"
    assert c["module"]["path"] == "model.layers.0.mlp.up_proj"
    assert c["phase"] | {"why": ""} == {"phase": "forward", "evidence": "default", "why": ""}  # no evidence
    assert c["phase"]["why"].startswith("no evidence")
    assert c["step"] == {"step": 1, "by": "launch", "complete": True, "in_file": 1}
    assert c["kernel_category"]["category"] == "GEMM" and c["kernel_category"]["rule"]
    assert c["module_category"]["category"] == "MLP" and c["module_category"]["rule"]
    assert c["backward"] is None


@pytest.mark.parametrize("flows,link", [(True, "flow"), (False, "seq")])
def test_backward_chain_names_the_node_and_the_forward_module(tmp_path, flows, link):
    _, path = plant(tmp_path, modules="nn_module", flows=flows)
    (c,) = explain_json(path, "gemm_bf16_128x64")["chains"]
    assert c["phase"] | {"why": ""} == {"phase": "backward", "evidence": "autograd_thread", "why": ""}
    assert c["backward"]["node"] == "MmBackward0" and c["backward"]["link"] == link
    assert c["backward"]["forward_op"]["name"] == "aten::mm"
    assert c["backward"]["forward_op"]["seq"] == c["backward"]["seq"] is not None
    assert c["backward"]["forward_op"]["ts_ms"] < c["launch"]["ts_ms"]  # the creator ran first
    assert c["module"]["classes"] == ["LlamaMLP", "Linear"]  # the forward op's module
    assert c["module_category"]["category"] == "MLP"
    assert any(o["name"].startswith("autograd::engine::evaluate_function") for o in c["op_stack"])


def test_step_filter_limit_and_grouping(tmp_path):
    _, path = plant(tmp_path)
    doc = explain_json(path, ".", "--step", "2", "--limit", "2")
    assert doc["meta"]["matched"] == 4 and doc["meta"]["groups"] == 4 and doc["meta"]["shown"] == 2
    assert all(c["steps"] == [2] for c in doc["chains"])
    assert doc["chains"][0]["total_ms"] >= doc["chains"][1]["total_ms"]


def test_invalid_regex_is_a_literal():
    assert compile_pattern("gemm[").search("xGEMM[1]")
    assert compile_pattern("ncclDevKernel_(AllReduce|AllGather)").search("ncclDevKernel_AllGather_x")


def test_terminal_lines_fit_and_carry_no_control_characters(tmp_path, monkeypatch):
    _, path = plant(tmp_path, name="evil\x1b]0;pwned\x07_" + "k" * 300)
    monkeypatch.setenv("COLUMNS", "72")
    run = CliRunner().invoke(main, ["explain", str(path), "evil", "--no-cache"])
    assert run.exit_code == 0, run.output
    assert "\x1b" not in run.output and "\x07" not in run.output
    assert max(len(x) for x in run.output.splitlines()) <= 72
    assert "[1] evil\ufffd]0;pwned\ufffd_kkk" in run.output
    assert "tables      kernels compute/" in run.output


def test_no_match_says_so(tmp_path):
    _, path = plant(tmp_path)
    run = CliRunner().invoke(main, ["explain", str(path), "no-such-kernel", "--no-cache"])
    assert run.exit_code == 0 and "no activity name matches" in run.output


def test_bad_path_is_one_line(tmp_path):
    run = CliRunner().invoke(main, ["explain", str(tmp_path / "missing.json"), "x"])
    assert run.exit_code == 2 and "Traceback" not in run.output


@pytest.mark.parametrize("name", SAMPLES)
def test_every_sample(name, tmp_path):
    from golden import SAMPLES as SAMPLE_DIR

    dst = tmp_path / name
    shutil.copytree(SAMPLE_DIR / name, dst)
    doc = explain_json(dst, ".", "--limit", "3", "--rank", "0")
    assert doc["meta"]["matched"] > 0 and doc["chains"]
    run = CliRunner().invoke(main, ["explain", str(dst), ".", "--no-cache", "--limit", "2"])
    assert run.exit_code == 0 and "[1] " in run.output, run.output


@pytest.mark.parametrize("src", params())
def test_every_shared_trace(src, tmp_path):
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    doc = explain_json(dst, ".", "--limit", "3")
    assert doc["meta"]["matched"] > 0, "every trace has activities"
    for c in doc["chains"]:
        assert c["count"] >= 1 and c["kernel_category"]["rule"]
        if c["launch"] is None:  # no launch in the file: never placed "by launch"
            assert c["step"]["by"] != "launch" and c["op_stack"] == []
    run = CliRunner().invoke(main, ["explain", str(dst), ".", "--no-cache", "--limit", "2"])
    assert run.exit_code == 0 and "Traceback" not in run.output


def test_rank_of_a_directory(tmp_path):
    from golden import SAMPLES as SAMPLE_DIR

    dst = tmp_path / "two"
    shutil.copytree(SAMPLE_DIR / "tiny-zero2-2ranks", dst)
    assert explain_json(dst, "aten", "--rank", "1")["meta"]["rank"] == 1
    # without --rank one rank is searched, and the output says which and what else there is
    doc = explain_json(dst, "aten")
    assert doc["meta"]["rank"] == 0 and doc["meta"]["ranks"] == [0, 1]
    text = CliRunner().invoke(main, ["explain", str(dst), "aten", "--no-cache"]).output
    assert "one rank searched: rank 0 of the 2 here (ranks 0-1); --rank R searches another" in text
    run = CliRunner().invoke(main, ["explain", str(dst), "aten", "--rank", "7", "--no-cache"])
    assert run.exit_code == 2 and "no rank 7; ranks here: 0, 1" in run.output


def _window(tmp_path, name: str, kernel: str, start_ns: int):
    """One profiler window of process 48213: ProfilerStep#1 with a forward GEMM (``kernel``)
    in model.layers.0.mlp, written as ``name``."""
    b = TraceBuilder(modules="capture", start_ns=start_ns)
    with b.step(), b.module("LlamaMLP", "model.layers.0.mlp"):
        b.kernel(kernel, 10, op="aten::mm")
    return b, b.write(tmp_path / name)


def test_every_file_of_a_rank_is_explained(tmp_path):
    """Two successive windows of one process (a profiler schedule with repeat) are one rank of
    two files: explain searches both, numbers their steps as ``analyze`` does (the second
    window's step 1 becomes 2), and names the file each activity came from."""
    from tracekit.testing.kernels import GEMM_B

    d = tmp_path / "run"
    d.mkdir()
    _window(d, "w1.pt.trace.json", GEMM_A, 1_700_000_000_000_000_000)
    b, _ = _window(d, "w2.pt.trace.json", GEMM_B, 1_700_000_060_000_000_000)
    doc = explain_json(d, "gemm|nvjet")
    m = doc["meta"]
    assert m["rank"] == 0 and m["rank_files"] == 2 and m["files"] == ["w1.pt.trace.json", "w2.pt.trace.json"]
    assert m["matched"] == 2 and m["complete_steps"] == [1, 2]
    by_name = {c["name"]: c for c in doc["chains"]}
    first, second = by_name[GEMM_A], by_name[GEMM_B]
    assert first["file"] == "w1.pt.trace.json" and first["files"] == {"w1.pt.trace.json": 1}
    assert second["file"] == "w2.pt.trace.json" and second["steps"] == [2] and second["in_tables"] == [2]
    assert second["activity"]["start_ns"] == b.activities[0].start
    assert second["launch"]["correlation"] == b.activities[0].correlation
    assert second["op_stack"][0]["name"] == "ProfilerStep#1"  # the file's own range
    assert second["module"]["path"] == "model.layers.0.mlp"
    assert second["step"] == {"step": 2, "by": "launch", "complete": True, "in_file": 1}
    analyzed = CliRunner().invoke(
        main, ["analyze", str(d), "--no-cache", "--format", "json", "--table", "top_kernels", "--per-step"]
    )
    steps = {r["name"]: r["step"] for r in json.loads(analyzed.stdout)["tables"]["top_kernels"]}
    assert steps[GEMM_B] == 2  # the same step number as analyze's
    assert explain_json(d, "gemm|nvjet", "--step", "2")["meta"]["matched"] == 1
    run = CliRunner().invoke(main, ["explain", str(d), "gemm|nvjet", "--no-cache"])
    assert "this rank has 2 files (successive profiler windows), all searched" in run.output
    assert "file        w2.pt.trace.json (the chain: 1 in w2.pt.trace.json)" in run.output
    assert "step        2 (by launch; step 1 of its file, renumbered)" in run.output


def test_cpu_op_shows_its_whole_self_time(tmp_path):
    """On a CPU-only trace the activities are the self-time pieces of every op: aten::mm with
    two nested aten::resolve_conj is three pieces. explain shows the op's whole self time (its
    duration minus its children's, the sum of its pieces) and counts ops, not pieces."""
    b = TraceBuilder(modules="capture")
    for _ in range(2):
        with b.step(), b.module("LlamaMLP", "model.layers.0.mlp"), b.op("aten::linear"):
            b.cpu(3)
            with b.op("aten::mm"):
                for us in (5, 4):
                    b.cpu(us)
                    with b.op("aten::resolve_conj"):
                        b.cpu(1)
                b.cpu(2)
            b.cpu(2)
    path = b.write(tmp_path / "cpu.json")
    ops = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "cpu_op"]
    mm = [e for e in ops if e["name"] == "aten::mm"]
    conj = [e for e in ops if e["name"] == "aten::resolve_conj"]
    self_ns = [
        round(m["dur"] * 1000) - sum(round(c["dur"] * 1000) for c in conj[2 * i : 2 * i + 2])
        for i, m in enumerate(mm)
    ]
    assert self_ns[0] >= 11_000  # 5 + 4 + 2 us planted (the builder adds per-op overhead)
    doc = explain_json(path, "aten::mm")
    assert doc["meta"]["mode"] == "cpu" and doc["meta"]["matched"] == 2 and doc["meta"]["pieces"] == 6
    (c,) = doc["chains"]
    assert c["count"] == 2 and c["pieces"] == 6
    assert c["activity"]["dur_ns"] == self_ns[0] and c["activity"]["pieces"] == 3
    assert c["activity"]["start_ns"] == round(mm[0]["ts"] * 1000)
    assert c["total_ms"] == pytest.approx(sum(self_ns) / 1e6, abs=1e-12)
    run = CliRunner().invoke(main, ["explain", str(path), "aten::mm", "--no-cache"])
    assert "2 matches (6 self-time pieces)" in run.output
    assert f"self time {self_ns[0] / 1e6:,.3f} ms in 3 piece(s)" in run.output
