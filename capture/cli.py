"""``tracekit capture train|infer|sweep``: the click group the main ``tracekit`` CLI adds.

Wire-up (tracekit/cli/commands.py): ``from tracekit.capture.cli import capture; main.add_command(capture)``.
Standalone: ``python -m tracekit.capture.cli train --out run1``.
"""

from __future__ import annotations

import shutil
import textwrap
import time
from dataclasses import replace

import click

from . import checks, launch, output, runs, sweep
from .errors import NO_GPU, CaptureError
from .models import check_sequence_length, model_shape
from .options import Command, Common, argv, check_attention, common, resolve_dtype


@click.group(name="capture")
def capture() -> None:
    """Capture profiler traces of LLM training and inference steps (needs tracekit[capture])."""


@capture.command(cls=Command)
@common
@click.option("--seq-len", type=int, default=350, show_default=True, help="Tokens per sequence.")
@click.option("--zero", type=click.IntRange(0, 3), default=0, show_default=True, help="ZeRO stage.")
@click.option("--offload", is_flag=True, help="ZeRO-Offload: optimizer state (and ZeRO-3 params) on CPU.")
@click.option("--recompute", is_flag=True, help="Activation recomputation (gradient checkpointing).")
@click.option("--lora", "finetune_mode", flag_value="lora", default=None, help="LoRA fine-tuning (peft).")
@click.option(
    "--qlora", "finetune_mode", flag_value="qlora", help="QLoRA: 4-bit base + LoRA (GPU, bitsandbytes)."
)
@click.option("--steps", type=click.IntRange(min=1), default=1, show_default=True, help="Recorded steps.")
@click.option(
    "--nproc-per-node",
    type=int,
    default=1,
    show_default=True,
    help="Ranks to launch (gloo on CPU, NCCL on GPU); one trace each.",
)
def train(c: Common, seq_len, zero, offload, recompute, finetune_mode, steps, nproc_per_node):
    """Profile DeepSpeed training steps of a Llama 2 model with random weights."""
    t = runs.Train(seq_len, zero, offload, recompute, finetune_mode, steps, nproc_per_node)
    runs.run_train(c, t, argv=argv(), echo=click.echo)


def _check_infer(engine: str, attention: str, dtype: str | None) -> tuple[bool, str]:
    """Refuse an inference capture that cannot run here; (GPU host, compute dtype)."""
    if engine == "lightllm":
        from . import lightllm

        lightllm.check()
        checks.require(("torch",), why="--engine lightllm")
    else:
        checks.require(("torch", "transformers"), why="tracekit capture infer")
    gpu = checks.gpu_count() > 0
    if engine == "lightllm" and not gpu:
        raise CaptureError("--engine lightllm needs a CUDA GPU; none is visible (use --engine hf)", NO_GPU)
    if engine == "hf":
        check_attention(attention, gpu)
    dtype = resolve_dtype(dtype, gpu)
    if engine == "lightllm" and dtype != "bf16":
        raise CaptureError("--engine lightllm runs in bf16 here; drop --dtype fp32")
    return gpu, dtype


@capture.command(cls=Command)
@common
@click.option(
    "--engine",
    type=click.Choice(["hf", "lightllm"]),
    default="hf",
    show_default=True,
    help="hf: transformers with a KV cache (anywhere); lightllm: LightLLM (GPU).",
)
@click.option("--prompt-len", type=int, default=512, show_default=True, help="Prompt tokens.")
@click.option(
    "--gen-len",
    type=int,
    default=64,
    show_default=True,
    help="Generated tokens: 1 prefill step, then gen-len - 1 decode steps.",
)
def infer(c: Common, engine, prompt_len, gen_len):
    """Profile the prefill and decode steps of LLM inference (one profiler step each)."""
    started = time.monotonic()
    shape = model_shape(c.model, c.layers)
    if gen_len < 1:
        raise CaptureError(f"--gen-len must be at least 1, got {gen_len}")
    check_sequence_length(shape, prompt_len, "--prompt-len")
    check_sequence_length(shape, prompt_len + gen_len, "--prompt-len + --gen-len")
    if c.batch_size < 1:
        raise CaptureError(f"--batch-size must be at least 1, got {c.batch_size}")
    output.check_out(c.out, c.force)  # a previous run is refused before any dependency is looked for
    gpu, dtype = _check_infer(engine, c.attention, c.dtype)
    warmup = 1 if c.warmup is None else c.warmup
    out = output.prepare(c.out, c.force)
    own = {"engine": engine, "prompt_len": prompt_len, "gen_len": gen_len}
    spec = {"kind": "infer", "out": str(out.resolve()), **c.spec(dtype, warmup, gpu), **own}
    options = {k: v for k, v in spec.items() if k not in ("kind", "out")}
    config = {"model": {"name": c.model, **shape.as_dict()}}
    click.echo(
        f"capturing prefill + {gen_len - 1} decode step(s) of {c.model} "
        f"({shape.num_hidden_layers} layers, {engine}) on {'GPU' if gpu else 'CPU'} -> {out}"
    )
    result = launch.run(spec, nproc=1, argv=argv(), options=options, config=config)
    runs.finish(result, out, started, click.echo)


ALL_METHODS = "naive,zero2,zero3,offload,recompute,flash,lora,qlora"


@capture.command(name="sweep", cls=Command)
@common
@click.option(
    "--methods",
    default=ALL_METHODS,
    show_default=True,
    help="Comma-separated methods; + combines (zero3+offload+recompute). docs/capture.md.",
)
@click.option("--seq-len", type=int, default=350, show_default=True, help="Tokens per sequence.")
@click.option("--steps", type=click.IntRange(min=1), default=3, show_default=True, help="Recorded steps.")
@click.option("--nproc-per-node", type=int, default=1, show_default=True, help="Ranks per capture.")
@click.option("--max-batch", is_flag=True, help="Each method at the largest batch that fits (Table IV).")
@click.option(
    "--memory-limit",
    type=click.FloatRange(min=1),
    default=None,
    metavar="MB",
    help="A run whose peak memory (MiB) passes this does not fit; needed by --max-batch on CPU.",
)
@click.option(
    "--batch-cap", type=click.IntRange(min=1), default=1024, show_default=True, help="Largest batch tried."
)
@click.option("--paper", is_flag=True, help="The paper's published values beside (Tables III, IV, IX).")
def sweep_command(
    c: Common, methods, seq_len, steps, nproc_per_node, max_batch, memory_limit, batch_cap, paper
):
    """Capture each method's training steps and compare what they cost: tokens/s, peak memory."""
    from .methods import parse_methods
    from .sweep_report import terminal_lines

    chosen = parse_methods(methods)
    check_sequence_length(model_shape(c.model, c.layers), seq_len, "--seq-len")
    if c.batch_size < 1:
        raise CaptureError(f"--batch-size must be at least 1, got {c.batch_size}")
    if max_batch and batch_cap < c.batch_size:
        raise CaptureError(f"--batch-cap {batch_cap} is below --batch-size {c.batch_size}")
    checks.require()
    gpus = checks.gpu_count()
    checks.ranks(nproc_per_node, gpus)
    if max_batch and not gpus and memory_limit is None:
        raise CaptureError("--max-batch on a CPU host needs --memory-limit MB (the bound of its search)")
    out = sweep.prepare(c.out, c.force)
    t = runs.Train(seq_len=seq_len, steps=steps, nproc_per_node=nproc_per_node)
    s = sweep.Settings(replace(c, out=out), t, memory_limit, max_batch, batch_cap, paper, gpus > 0)
    started = time.monotonic()
    width = shutil.get_terminal_size((80, 24)).columns

    def say(text: str) -> None:
        for line in textwrap.wrap(text, width, subsequent_indent="      ") or [""]:
            click.echo(line)

    doc = sweep.run_sweep(s, chosen, argv(), say)
    for line in terminal_lines(doc, width):
        click.echo(line)
    click.echo(f"{len(chosen)} method(s) in {time.monotonic() - started:.0f} s, written to")
    click.echo(f"  {out / sweep.SWEEP_JSON}\n  {out / sweep.SWEEP_MD}")
    stopped = [r for r in doc["rows"] if r["status"] == sweep.INTERRUPTED]
    if stopped:
        code = stopped[0].get("exit_code") or 130
        what = "terminated (SIGTERM)" if code == 143 else "interrupted (Ctrl-C)"
        err = CaptureError(f"sweep {what}; the rows so far are in sweep.json, the later methods did not run")
        err.exit_code = code
        raise err


if __name__ == "__main__":
    capture(prog_name="tracekit capture")
