"""tracekit capture, end to end on CPU: real DeepSpeed steps (1 rank; 2 ranks ZeRO-2 over gloo),
transformers inference, then the analysis of what they wrote. Plus the one-line errors.

Captures are tiny (2 layers, hidden 64, 32 tokens) and run once per module; the whole file takes
well under a minute on 2 cores.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.capture import output
from tracekit.capture.cli import capture
from tracekit.capture.deepspeed_config import deepspeed_config
from tracekit.capture.errors import CaptureError
from tracekit.capture.models import MODELS, model_shape

import tracekit
from tracekit.annotations import MODULE_PREFIX, PHASE_PREFIX

TINY = [
    "--model",
    "tiny",
    "--layers",
    "2",
    "--seq-len",
    "32",
    "--batch-size",
    "1",
    "--warmup",
    "1",
    "--steps",
    "1",
]
LAYERS = 2
PAPER_MODULES = ("QKV", "RoPE", "MLP", "RMSNorm", "Output", "Linear")


def _needs_capture_stack():
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name, reason=f"capture needs {name} (pip install 'tracekit[capture]')")


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``tracekit capture ...`` as a user runs it: its own process."""
    return subprocess.run(
        [sys.executable, "-m", "tracekit.capture.cli", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )


def events(trace: Path) -> list[dict]:
    with gzip.open(trace, "rt") as f:
        return json.load(f)["traceEvents"]


def names(trace: Path, cat: str = "user_annotation") -> list[str]:
    return [e["name"] for e in events(trace) if e.get("cat") == cat]


@pytest.fixture(scope="module")
def train1(tmp_path_factory):
    _needs_capture_stack()
    out = tmp_path_factory.mktemp("train1") / "run"
    r = run_cli("train", *TINY, "--out", str(out))
    assert r.returncode == 0, r.stderr + r.stdout + _logs(out)
    return out


@pytest.fixture(scope="module")
def train2(tmp_path_factory):
    _needs_capture_stack()
    out = tmp_path_factory.mktemp("train2") / "run"
    r = run_cli("train", *TINY, "--zero", "2", "--nproc-per-node", "2", "--no-stack", "--out", str(out))
    assert r.returncode == 0, r.stderr + r.stdout + _logs(out)
    return out


@pytest.fixture(scope="module")
def infer1(tmp_path_factory):
    _needs_capture_stack()
    out = tmp_path_factory.mktemp("infer1") / "run"
    r = run_cli(
        "infer", "--model", "tiny", "--layers", "2", "--prompt-len", "32", "--gen-len", "4", "--out", str(out)
    )
    assert r.returncode == 0, r.stderr + r.stdout + _logs(out)
    return out


def _logs(out: Path) -> str:
    logs = sorted((out / "logs").glob("*.log")) if (out / "logs").is_dir() else []
    return "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in logs)


# ---------------------------------------------------------------- pure parts (no torch needed)


def test_llama2_shapes_are_the_published_ones():
    expected = {
        "llama2-7b": (4096, 11008, 32, 32, 32),
        "llama2-13b": (5120, 13824, 40, 40, 40),
        "llama2-70b": (8192, 28672, 64, 8, 80),
    }
    for name, (hidden, inter, heads, kv, layers) in expected.items():
        s = MODELS[name]
        assert (
            s.hidden_size,
            s.intermediate_size,
            s.num_attention_heads,
            s.num_key_value_heads,
            s.num_hidden_layers,
            s.vocab_size,
        ) == (hidden, inter, heads, kv, layers, 32000)
    assert model_shape("llama2-70b", layers=2).num_hidden_layers == 2
    with pytest.raises(CaptureError, match="unknown model 'gpt5'"):
        model_shape("gpt5")


def test_deepspeed_config_maps_the_options():
    c = deepspeed_config(batch_size=4, zero=3, offload=True, dtype="bf16", gpu=True)
    assert c["train_micro_batch_size_per_gpu"] == 4
    assert c["zero_optimization"]["stage"] == 3
    assert c["zero_optimization"]["offload_optimizer"]["device"] == "cpu"
    assert c["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert c["bf16"]["enabled"] is True
    assert "torch_adam" not in c["optimizer"]["params"]  # DeepSpeed's fused Adam on GPUs
    cpu = deepspeed_config(batch_size=1, zero=2, offload=False, dtype="fp32", gpu=False)
    assert cpu["optimizer"]["params"]["torch_adam"] is True  # no C++ op build on CPU hosts
    assert cpu["bf16"]["enabled"] is False
    assert "offload_optimizer" not in cpu["zero_optimization"]
    stage2_offload = deepspeed_config(batch_size=1, zero=2, offload=True, dtype="fp32", gpu=False)
    assert "offload_param" not in stage2_offload["zero_optimization"]
    with pytest.raises(ValueError):
        deepspeed_config(batch_size=1, zero=0, offload=True, dtype="fp32", gpu=False)


def test_output_refuses_a_previous_run_without_force(tmp_path):
    out = tmp_path / "run"
    output.prepare(out, force=False)
    (out / "rank0.1.pt.trace.json.gz").write_bytes(b"old")
    (out / "manifest.json").write_text("{}")  # not tracekit's manifest: --force refuses it
    with pytest.raises(CaptureError, match="did not write"):
        output.prepare(out, force=True)
    doc = {"tracekit_capture": 1, "kind": "train", "environment": {"world_size": 1}}
    (out / "manifest.json").write_text(json.dumps(doc))  # tracekit's: it wrote what it names
    with pytest.raises(CaptureError, match="--force"):
        output.prepare(out, force=False)
    output.prepare(out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["logs"]
    (out / "notes.txt").write_text("mine")
    with pytest.raises(CaptureError, match="did not write"):
        output.prepare(out, force=True)  # --force replaces a capture, never a user's own files
    assert (out / "notes.txt").exists()


def _one_line_error(result, needle: str) -> None:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tracekit: error: ") and needle in lines[0], lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--model", "llama3-8b"], "unknown model 'llama3-8b'"),
        (["infer", "--model", "nope"], "unknown model 'nope'"),
        (["train", "--zero", "5"], "--zero"),
        (["train", "--offload"], "--offload needs --zero"),
        (["train", "--seq-len", "5000"], "exceeds the model's 1024 positions"),
        (["infer", "--engine", "lightllm"], "LightLLM"),
    ],
)
def test_bad_configurations_stop_with_one_line(tmp_path, args, needle):
    result = CliRunner().invoke(capture, [*args, "--out", str(tmp_path / "x")])
    _one_line_error(result, needle)
    assert not (tmp_path / "x").exists()  # nothing written for a capture that never ran


def test_existing_run_is_not_overwritten(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{}")
    result = CliRunner().invoke(capture, ["train", "--out", str(out)])
    _one_line_error(result, "--force")
    assert (out / "manifest.json").read_text() == "{}"


@pytest.mark.capture
def test_host_dependent_refusals(tmp_path):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("checks the CPU-host refusals")
    cores = len(os.sched_getaffinity(0))
    for args, needle in [
        (["train", "--nproc-per-node", str(cores + 1)], "CPU cores"),
        (["train", "--qlora"], "--qlora needs a CUDA GPU"),
        (["train", "--attention", "flash"], "--attention flash needs a CUDA GPU"),
        (["infer", "--attention", "flash"], "--attention flash needs a CUDA GPU"),
    ]:
        _one_line_error(CliRunner().invoke(capture, [*args, "--out", str(tmp_path / "x")]), needle)


# ---------------------------------------------------------------- real captures


@pytest.mark.capture
def test_train_one_rank_layout_and_annotations(train1):
    traces = output.traces(train1)
    assert [t.name.split(".")[0] for t in traces] == ["rank0"]
    assert traces[0].stat().st_size < 2 * 1024 * 1024
    ranges = names(traces[0])
    assert "ProfilerStep#1" in ranges  # warm-up step 0 is not recorded
    assert not any(n == "ProfilerStep#0" for n in ranges)
    for p in ("forward", "backward", "optimizer"):
        assert ranges.count(PHASE_PREFIX + p) == 1
    for i in range(LAYERS):
        for module in (
            f"LlamaDecoderLayer:model.layers.{i}",
            f"LlamaAttention:model.layers.{i}.self_attn",
            f"Linear:model.layers.{i}.self_attn.q_proj",
            f"LlamaMLP:model.layers.{i}.mlp",
            f"LlamaRMSNorm:model.layers.{i}.input_layernorm",
        ):
            assert MODULE_PREFIX + module in ranges
    assert MODULE_PREFIX + "Linear:lm_head" in ranges
    assert MODULE_PREFIX + "Embedding:model.embed_tokens" in ranges
    assert any(e.get("cat") == "python_function" for e in events(traces[0]))  # stacks on by default


@pytest.mark.capture
def test_train_manifest(train1):
    m = json.loads((train1 / "manifest.json").read_text())
    assert m["status"] == "finished" and m["kind"] == "train"
    assert m["command"].startswith("tracekit capture train ") and "--layers 2" in m["command"]
    assert m["options"]["zero"] == 0 and m["options"]["nproc_per_node"] == 1
    assert m["config"]["model"]["num_hidden_layers"] == LAYERS
    assert m["config"]["deepspeed"] == json.loads((train1 / "logs" / "deepspeed_config.json").read_text())
    for package in ("torch", "deepspeed", "transformers", "python"):
        assert m["versions"][package]
    assert m["hardware"]["cpu_count"] >= 1
    assert "git" in m
    assert m["traces"] == [t.name for t in output.traces(train1)]
    assert m["ranks"][0]["completed_steps"] == 1


@pytest.mark.capture
def test_train_two_ranks_zero2(train2):
    traces = output.traces(train2)
    assert sorted(t.name.split(".")[0] for t in traces) == ["rank0", "rank1"]
    for t in traces:
        evs = events(t)
        assert not any(e.get("cat") == "python_function" for e in evs)  # --no-stack
        gloo = {e["name"] for e in evs if e.get("name", "").startswith("gloo:")}
        assert "gloo:all_reduce" in gloo, gloo  # real collectives, not a single-process stand-in
        assert PHASE_PREFIX + "optimizer" in names(t)
    m = json.loads((train2 / "manifest.json").read_text())
    assert m["config"]["deepspeed"]["zero_optimization"]["stage"] == 2
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    assert m["environment"]["backend"] == "gloo"


@pytest.mark.capture
def test_infer_steps(infer1):
    [trace] = output.traces(infer1)
    ranges = names(trace)
    assert ranges.count(PHASE_PREFIX + "prefill") == 1
    assert ranges.count(PHASE_PREFIX + "decode") == 3
    assert sum(n.startswith("ProfilerStep#") for n in ranges) == 4
    assert ranges.count(MODULE_PREFIX + "LlamaDecoderLayer:model.layers.1") == 4


@pytest.mark.capture
def test_crash_keeps_the_finished_steps(tmp_path):
    _needs_capture_stack()
    out = tmp_path / "run"
    r = run_cli(
        "train",
        *TINY[:-2],
        "--steps",
        "3",
        "--no-stack",
        "--out",
        str(out),
        env={"TRACEKIT_CAPTURE_FAIL_AT_STEP": "3"},
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: capture failed on rank 0"), r.stderr
    [trace] = output.traces(out)
    steps = [n for n in names(trace) if n.startswith("ProfilerStep#")]
    assert steps[:2] == ["ProfilerStep#1", "ProfilerStep#2"]  # both finished steps kept
    assert names(trace).count(PHASE_PREFIX + "optimizer") == 2
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and "failure injected" in m["error"]
    assert m["ranks"][0]["completed_steps"] == 2


# ---------------------------------------------------------------- the analysis of captures


def _tables(path: Path) -> dict:
    import tracekit

    if not hasattr(tracekit, "load"):
        pytest.fail("tracekit.load is missing: the analysis core must load capture output")
    return tracekit.load(path).tables()


def _module_time(tables, phase: str, module: str) -> float:
    m = tables["modules"]
    return float(m[(m["phase"] == phase) & (m["module"] == module)]["time_ms"].sum())


@pytest.mark.capture
@pytest.mark.parametrize("run", ["train1", "train2"])
def test_training_capture_analyses(run, request):
    tables = _tables(request.getfixturevalue(run))
    for phase in ("forward", "backward"):
        for module in PAPER_MODULES:
            assert _module_time(tables, phase, module) > 0, (run, phase, module)
    phases = tables["phases"]
    optimizer = phases[phases["phase"] == "optimizer"]
    assert len(optimizer) and float(optimizer["wall_ms"].sum()) > 0


@pytest.mark.capture
def test_two_rank_capture_has_communication(train2):
    comm = _tables(train2)["comm"]
    assert len(comm) and float(comm["time_ms"].sum()) > 0
    assert "AllReduce" in set(comm["collective"]) or "ReduceScatter" in set(comm["collective"])


@pytest.mark.capture
def test_inference_timeline_finds_every_layer(infer1):
    timeline = _tables(infer1)["timeline"]
    blocks = dict(zip(timeline["block"], timeline["count"]))
    assert blocks.get("attention") == LAYERS and blocks.get("ffn") == LAYERS, timeline


@pytest.mark.capture
@pytest.mark.peers
def test_tensorboard_plugin_loads_capture(train2):
    pytest.importorskip("torch_tb_profiler", reason="needs the peers extra (torch-tb-profiler)")
    from torch_tb_profiler import io
    from torch_tb_profiler.profiler.loader import RunLoader

    run = RunLoader("capture", str(train2), io.Cache()).load()
    workers = {w for w, _ in run.profiles}
    assert {"rank0", "rank1"} <= workers, workers


@pytest.mark.capture
def test_two_rank_manifest_measures_each_rank(train2):
    """Each rank times and measures its own profiled step; the job's step is its slowest rank's."""
    m = json.loads((train2 / "manifest.json").read_text())
    walls = []
    for rank in m["ranks"]:
        [step] = rank["measures"]["steps"]
        assert step["step"] == 1 and step["tokens"] == 32 and step["samples"] == 1  # seq-len 32, batch 1
        assert step["wall_ms"] > 0 and step["peak_rss_bytes"] > 50 << 20
        walls.append(step["wall_ms"])
    job = m["measures"]["job"]
    assert job["ranks"] == 2 and job["step_ms"] == pytest.approx(max(walls))
    assert job["tokens_per_s"] == pytest.approx(64 / (max(walls) / 1e3))
    table = tracekit.load(train2, cache=False).table("throughput", per_step=True)
    assert table["rank"].tolist() == [0, 1] and table["step"].tolist() == [1, 1]


@pytest.mark.capture
def test_infer_manifest_measures_prefill_and_decode_apart(infer1):
    m = json.loads((infer1 / "manifest.json").read_text())
    steps = m["ranks"][0]["measures"]["steps"]
    assert [(s["step"], s["stage"], s["tokens"]) for s in steps] == [
        (1, "prefill", 32),  # the prompt's tokens
        (2, "decode", 1),  # one generated token per sequence
        (3, "decode", 1),
        (4, "decode", 1),
    ]
    assert "prompt token" in m["ranks"][0]["measures"]["token"]
    assert set(m["measures"]["job"]["stages"]) == {"prefill", "decode"}
    table = tracekit.load(infer1, cache=False).table("throughput")
    assert table["stage"].tolist() == ["prefill", "decode"] and table["tokens"].tolist() == [32, 1]
