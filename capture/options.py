"""The options every ``tracekit capture`` command shares, and the one-line usage errors.

:class:`Common` holds what ``train`` and ``infer`` (and ``sweep``) take alike; :func:`common`
adds those options to a click command and hands them over as one :class:`Common`.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from .errors import MISSING_DEPENDENCY, NO_GPU, CaptureError
from .models import MODELS


class Command(click.Command):
    """Usage mistakes print ``tracekit: error: <what>`` (one line, status 2) like every other
    capture error, instead of click's usage block."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as err:
            raise CaptureError(err.format_message()) from None


@dataclass(frozen=True)
class Common:
    """The options every capture command takes (:func:`common`)."""

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
    profile_memory: bool = False

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
            "profile_memory": self.profile_memory,
            "gpu": gpu,
            "seed": self.seed,
        }


COMMON_OPTIONS = (
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
        help="Unrecorded warm-up steps before the recorded ones"
        " [default: 2 for train and sweep, 1 for infer].",
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
    click.option(
        "--profile-memory",
        is_flag=True,
        help="Record the allocator's [memory] events (torch.profiler profile_memory=True) for "
        "the memory tables; larger traces.",
    ),
)


def common(f):
    """The common options, handed to ``f`` as one :class:`Common` (its first argument), ahead of
    the command's own options in ``--help``."""

    @functools.wraps(f)
    def with_common(**kw):
        return f(Common(**{k: kw.pop(k) for k in Common.__dataclass_fields__}), **kw)

    for option in reversed(COMMON_OPTIONS):
        with_common = option(with_common)
    return with_common


def resolve_dtype(dtype: str | None, gpu: bool) -> str:
    if dtype is None:
        return "bf16" if gpu else "fp32"
    return dtype


def check_attention(attention: str, gpu: bool) -> None:
    if attention == "flash":
        if not gpu:
            raise CaptureError(
                "--attention flash needs a CUDA GPU; none is visible (use sdpa or eager)", NO_GPU
            )
        if importlib.util.find_spec("flash_attn") is None:
            raise CaptureError(
                "--attention flash needs the flash-attn package (pip install flash-attn)", MISSING_DEPENDENCY
            )


def argv() -> list[str]:
    """The command as the user would type it: ``tracekit capture <sub> <args...>``."""
    ctx = click.get_current_context()
    name = ctx.info_name
    args = sys.argv[1:]
    tail = args[args.index(name) + 1 :] if name in args else args
    return [*ctx.command_path.split(), *tail]
