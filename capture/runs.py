"""A training capture as a function: what ``tracekit capture train`` runs, and what
``tracekit capture sweep`` runs once per method.

:func:`run_train` checks that the capture can run here (one line, :class:`CaptureError` with
its ``kind``, before anything starts), writes the DeepSpeed config, starts the ranks and
returns the manifest.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import checks, finetune, launch, output
from .deepspeed_config import deepspeed_config
from .errors import UNSUPPORTED, CaptureError
from .models import check_sequence_length, model_shape
from .options import Common, check_attention, resolve_dtype


@dataclass(frozen=True)
class Train:
    """The options of a training capture beyond :class:`~tracekit.capture.options.Common`."""

    seq_len: int = 350
    zero: int = 0
    offload: bool = False
    recompute: bool = False
    finetune: str | None = None
    steps: int = 1
    nproc_per_node: int = 1


def check_train(c: Common, t: Train) -> bool:
    """Refuse a training capture that cannot run here, before anything starts; True on a GPU host."""
    if c.batch_size < 1:
        raise CaptureError(f"--batch-size must be at least 1, got {c.batch_size}")
    if t.offload and t.zero == 0:
        raise CaptureError("--offload needs --zero 1, 2 or 3", UNSUPPORTED)
    checks.require()
    gpus = checks.gpu_count()
    gpu = gpus > 0
    checks.ranks(t.nproc_per_node, gpus)
    check_attention(c.attention, gpu)
    finetune.check(t.finetune, gpu)
    if t.finetune == "qlora" and t.zero == 3:
        raise CaptureError(
            "--qlora runs with --zero 0, 1 or 2 (4-bit weights cannot be ZeRO-3 partitioned)", UNSUPPORTED
        )
    return gpu


def run_train(
    c: Common,
    t: Train,
    *,
    argv: list[str],
    echo=print,
    memory_limit_mb: float | None = None,
    written_by: str = "tracekit capture train",
) -> dict:
    """Capture ``t.steps`` training steps after the warm-up; the manifest (also written to
    ``c.out``). ``memory_limit_mb``: stop a rank whose resident memory passes it (CPU hosts).
    ``written_by``: the tool its manifest names (a sweep's ``--force`` removes only its own)."""
    started = time.monotonic()
    shape = model_shape(c.model, c.layers)
    check_sequence_length(shape, t.seq_len, "--seq-len")
    output.check_out(c.out, c.force)  # a previous run is refused before any dependency is looked for
    gpu = check_train(c, t)
    dtype = resolve_dtype(c.dtype, gpu)
    warmup = 2 if c.warmup is None else c.warmup
    ds_config = deepspeed_config(
        batch_size=c.batch_size, zero=t.zero, offload=t.offload, dtype=dtype, gpu=gpu
    )
    out = output.prepare(c.out, c.force)
    output.write_json(out / output.DEEPSPEED_CONFIG, ds_config)  # the file the ranks pass to DeepSpeed
    own = {k: v for k, v in asdict(t).items() if k != "nproc_per_node"}
    spec = {"kind": "train", "out": str(out.resolve()), **c.spec(dtype, warmup, gpu), **own}
    spec["deepspeed_config"] = ds_config
    options = {k: v for k, v in spec.items() if k not in ("kind", "out", "deepspeed_config")}
    spec["written_by"] = written_by
    options["nproc_per_node"] = t.nproc_per_node
    config = {"model": {"name": c.model, **shape.as_dict()}, "deepspeed": ds_config}
    echo(
        f"capturing {warmup}+{t.steps} training step(s) of {c.model} "
        f"({shape.num_hidden_layers} layers) on {t.nproc_per_node} rank(s), "
        f"{'GPU' if gpu else 'CPU'}, ZeRO-{t.zero} -> {out}"
    )
    limit = None if gpu or memory_limit_mb is None else int(memory_limit_mb * (1 << 20))
    result = launch.run(
        spec, nproc=t.nproc_per_node, argv=argv, options=options, config=config, memory_limit=limit
    )
    finish(result, out, started, echo)
    return result


def finish(result: dict, out: Path, started: float, echo) -> None:
    ranks = result["ranks"]
    steps = min((r.get("completed_steps", 0) for r in ranks), default=0)
    echo(f"captured {steps} step(s) on {len(ranks)} rank(s) in {time.monotonic() - started:.1f} s")
    for trace in result["traces"]:
        echo(f"  {out / trace}")
    echo(f"  {out / output.MANIFEST}")
    echo(f"analyse with: tracekit analyze {out}")
