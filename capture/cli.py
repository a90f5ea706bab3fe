"""``tracekit capture train|infer``: the click group the main ``tracekit`` CLI adds.

Wire-up (tracekit/cli/commands.py): ``from tracekit.capture.cli import capture; main.add_command(capture)``.
Standalone: ``python -m tracekit.capture.cli train --out run1``.
"""

from __future__ import annotations

import functools
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from . import checks, finetune, launch, output
from .deepspeed_config import deepspeed_config
from .errors import CaptureError
from .models import MODELS, check_sequence_length, model_shape


class _Command(click.Command):
    """Usage mistakes print ``tracekit: error: <what>`` (one line, status 2) like every other
    capture error, instead of click's usage block."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as err:
            raise CaptureError(err.format_message()) from None


@click.group(name="capture")
def capture() -> None:
    """Capture profiler traces of LLM training and inference steps (needs tracekit[capture])."""


@dataclass(frozen=True)
class Common:
    """The options every capture command takes (:func:`_common`)."""

    model: str
    layers: int | None
    batch_size: int
    attention: str
    dtype: str | None
    warmup: int | None
    no_stack: bool
    seed: int
    out: Path
    force: bool

    def spec(self, dtype: str, warmup: int, gpu: bool) -> dict:
        """The common part of the spec the ranks run from."""
        return {
            "model": self.model,
            "layers": self.layers,
            "batch_size": self.batch_size,
            "attention": self.attention,
            "dtype": dtype,
            "warmup": warmup,
            "with_stack": not self.no_stack,
            "gpu": gpu,
            "seed": self.seed,
        }


_COMMON_OPTIONS = (
    click.option(
        "--model",
        default="tiny",
        show_default=True,
        metavar="NAME",
        help=f"Model shape: {', '.join(MODELS)} (random weights, never downloaded).",
    ),
    click.option("--layers", type=int, default=None, help="Decoder layers (default: the model's)."),
    click.option("--batch-size", type=int, default=1, show_default=True, help="Sequences per rank."),
    click.option(
        "--attention",
        type=click.Choice(["eager", "sdpa", "flash"]),
        default="sdpa",
        show_default=True,
        help="Attention implementation (flash: FlashAttention-2, GPU).",
    ),
    click.option(
        "--dtype",
        type=click.Choice(["bf16", "fp32"]),
        default=None,
        help="Compute dtype [default: bf16 on GPU hosts, fp32 on CPU hosts].",
    ),
    click.option(
        "--warmup",
        type=click.IntRange(min=0),
        default=None,
        help="Unrecorded warm-up steps before the recorded ones.",
    ),
    click.option("--no-stack", is_flag=True, help="Record no Python stacks (smaller traces)."),
    click.option("--seed", type=int, default=0, show_default=True, help="Seed of weights and tokens."),
    click.option(
        "--out",
        type=click.Path(file_okay=False, path_type=Path),
        required=True,
        help="Directory for the traces and manifest.json.",
    ),
    click.option("--force", is_flag=True, help="Replace a previous capture in --out."),
)


def _common(f):
    """The common options (:data:`_COMMON_OPTIONS`), handed to ``f`` as one :class:`Common`
    (its first argument), ahead of the command's own options in ``--help``."""

    @functools.wraps(f)
    def with_common(**kw):
        return f(Common(**{k: kw.pop(k) for k in Common.__dataclass_fields__}), **kw)

    for option in reversed(_COMMON_OPTIONS):
        with_common = option(with_common)
    return with_common


def _resolve_dtype(dtype: str | None, gpu: bool) -> str:
    if dtype is None:
        return "bf16" if gpu else "fp32"
    return dtype


def _check_attention(attention: str, gpu: bool) -> None:
    import importlib.util

    if attention == "flash":
        if not gpu:
            raise CaptureError("--attention flash needs a CUDA GPU; none is visible (use sdpa or eager)")
        if importlib.util.find_spec("flash_attn") is None:
            raise CaptureError("--attention flash needs the flash-attn package (pip install flash-attn)")


def _argv() -> list[str]:
    """The command as the user would type it: ``tracekit capture <sub> <args...>``."""
    ctx = click.get_current_context()
    name = ctx.info_name
    args = sys.argv[1:]
    tail = args[args.index(name) + 1 :] if name in args else args
    return [*ctx.command_path.split(), *tail]


def _finish(result: dict, out: Path, started: float, echo) -> None:
    ranks = result["ranks"]
    steps = min((r.get("completed_steps", 0) for r in ranks), default=0)
    echo(f"captured {steps} step(s) on {len(ranks)} rank(s) in {time.monotonic() - started:.1f} s")
    for trace in result["traces"]:
        echo(f"  {out / trace}")
    echo(f"  {out / output.MANIFEST}")
    echo(f"analyse with: tracekit analyze {out}")


def _check_train(batch_size, zero, offload, finetune_mode, attention, nproc_per_node) -> bool:
    """Refuse a training capture that cannot run here, before anything starts; True on a GPU host."""
    if batch_size < 1:
        raise CaptureError(f"--batch-size must be at least 1, got {batch_size}")
    if offload and zero == 0:
        raise CaptureError("--offload needs --zero 1, 2 or 3")
    checks.require()
    gpus = checks.gpu_count()
    gpu = gpus > 0
    checks.ranks(nproc_per_node, gpus)
    _check_attention(attention, gpu)
    finetune.check(finetune_mode, gpu)
    if finetune_mode == "qlora" and zero == 3:
        raise CaptureError("--qlora runs with --zero 0, 1 or 2 (4-bit weights cannot be ZeRO-3 partitioned)")
    return gpu


@capture.command(cls=_Command)
@_common
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
    started = time.monotonic()
    shape = model_shape(c.model, c.layers)
    check_sequence_length(shape, seq_len, "--seq-len")
    output.check_out(c.out, c.force)  # a previous run is refused before any dependency is looked for
    gpu = _check_train(c.batch_size, zero, offload, finetune_mode, c.attention, nproc_per_node)
    dtype = _resolve_dtype(c.dtype, gpu)
    warmup = 2 if c.warmup is None else c.warmup
    ds_config = deepspeed_config(batch_size=c.batch_size, zero=zero, offload=offload, dtype=dtype, gpu=gpu)
    out = output.prepare(c.out, c.force)
    output.write_json(out / output.DEEPSPEED_CONFIG, ds_config)  # the file the ranks pass to DeepSpeed
    own = {"seq_len": seq_len, "zero": zero, "offload": offload, "recompute": recompute}
    own |= {"finetune": finetune_mode, "steps": steps}
    spec = {"kind": "train", "out": str(out.resolve()), **c.spec(dtype, warmup, gpu), **own}
    spec["deepspeed_config"] = ds_config
    options = {k: v for k, v in spec.items() if k not in ("kind", "out", "deepspeed_config")}
    options["nproc_per_node"] = nproc_per_node
    config = {"model": {"name": c.model, **shape.as_dict()}, "deepspeed": ds_config}
    click.echo(
        f"capturing {warmup}+{steps} training step(s) of {c.model} "
        f"({shape.num_hidden_layers} layers) on {nproc_per_node} rank(s), "
        f"{'GPU' if gpu else 'CPU'}, ZeRO-{zero} -> {out}"
    )
    result = launch.run(spec, nproc=nproc_per_node, argv=_argv(), options=options, config=config)
    _finish(result, out, started, click.echo)


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
        raise CaptureError("--engine lightllm needs a CUDA GPU; none is visible (use --engine hf)")
    if engine == "hf":
        _check_attention(attention, gpu)
    dtype = _resolve_dtype(dtype, gpu)
    if engine == "lightllm" and dtype != "bf16":
        raise CaptureError("--engine lightllm runs in bf16 here; drop --dtype fp32")
    return gpu, dtype


@capture.command(cls=_Command)
@_common
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
    result = launch.run(spec, nproc=1, argv=_argv(), options=options, config=config)
    _finish(result, out, started, click.echo)


if __name__ == "__main__":
    capture(prog_name="tracekit capture")
