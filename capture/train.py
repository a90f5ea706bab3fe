"""One rank of ``tracekit capture train``: a DeepSpeed Llama training loop under the profiler.

Runs in its own process (see launch.py), with RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT
set. Each step: forward (loss included), backward, optimizer step, each in its tracekit phase
range, then ``prof.step()`` (:func:`~tracekit.capture.profiling.next_step`).
"""

from __future__ import annotations

import os
from pathlib import Path

from . import finetune, measure
from .annotate import annotate_modules, phase
from .checks import devices
from .models import build_model, model_shape
from .output import DEEPSPEED_CONFIG
from .profiling import next_step, profiler


def _skip_shm_comm_op() -> None:
    """Keep DeepSpeed from compiling its shared-memory all-reduce op on CPU hosts.

    DeepSpeed's torch comm backend builds the ``deepspeed_shm_comm`` C++ op (about 75 s on a
    fresh machine) whenever the op is marked compatible; only ``inference_all_reduce`` uses it,
    never training. DeepSpeed keeps the compatibility table in ``deepspeed.ops`` and reads it at
    backend creation, so marking the op incompatible there makes the backend plain gloo.
    """
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


def run(spec: dict, report) -> None:
    """Train ``spec["warmup"] + spec["steps"]`` steps, recording the last ``steps``.

    ``report(**fields)`` updates this rank's status file.
    """
    import deepspeed
    import torch

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    gpu = spec["gpu"]
    if gpu:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        _skip_shm_comm_op()
        device = torch.device("cpu")
    deepspeed.init_distributed(dist_backend="nccl" if gpu else "gloo", verbose=False)
    report(devices=devices(), backend=torch.distributed.get_backend())
    engine = _engine(spec, device)
    _train_steps(spec, engine, rank, report)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def _engine(spec: dict, device):
    """The annotated model (fine-tuning adapters, recomputation) inside a DeepSpeed engine."""
    import deepspeed
    import torch

    shape = model_shape(spec["model"], spec["layers"])
    dtype = getattr(torch, {"bf16": "bfloat16", "fp32": "float32"}[spec["dtype"]])
    # Not under deepspeed.zero.Init: with torch 2.13 its Tensor.__new__ override fails torch's
    # signature check (TypeError at the first parameter). ZeRO-3 partitions at initialize()
    # instead, so each rank first holds the whole model once (in the compute dtype).
    model = build_model(
        shape,
        spec["attention"],
        spec["dtype"],
        seed=spec["seed"],
        device=device if spec["gpu"] and spec["finetune"] != "qlora" else None,
    )
    if spec["recompute"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model = finetune.apply(model, spec["finetune"], dtype)
    annotate_modules(model, strip=finetune.PEFT_PREFIXES)
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        model_parameters=[p for p in model.parameters() if p.requires_grad],
        config=str(Path(spec["out"]) / DEEPSPEED_CONFIG),
    )
    engine.train()
    return engine


def _train_steps(spec: dict, engine, rank: int, report) -> None:
    """The warm-up and recorded steps: forward, backward, optimizer, each in its phase range."""
    import torch

    vocab_size = model_shape(spec["model"], spec["layers"]).vocab_size
    generator = torch.Generator().manual_seed(spec["seed"] + 1000 + rank)
    batch_shape = (spec["batch_size"], spec["seq_len"])
    warmup, steps = spec["warmup"], spec["steps"]
    meter = measure.StepMeter(
        cuda=measure.cuda_or_none(spec["gpu"]), device=engine.device, token=measure.train_token()
    )
    # Fault injection for tests and for checking crash behaviour: fail when this step starts.
    fail_at = int(os.environ.get("TRACEKIT_CAPTURE_FAIL_AT_STEP", "-1"))
    with profiler(
        Path(spec["out"]),
        rank,
        warmup=warmup,
        steps=steps,
        gpu=spec["gpu"],
        with_stack=spec["with_stack"],
        profile_memory=spec.get("profile_memory", False),
    ) as prof:
        for step in range(warmup + steps):
            if step == fail_at:
                raise RuntimeError(f"failure injected at step {step} (TRACEKIT_CAPTURE_FAIL_AT_STEP)")
            if step >= warmup:  # a profiled step: ProfilerStep#<step> in the trace
                meter.start()
            tokens = torch.randint(0, vocab_size, batch_shape, generator=generator).to(engine.device)
            with phase("forward"):
                loss = engine(input_ids=tokens, labels=tokens).loss
            with phase("backward"):
                engine.backward(loss)
            with phase("optimizer"):
                engine.step()
            if step >= warmup:
                meter.stop(step, tokens=tokens.numel(), samples=batch_shape[0])
            next_step(prof)
            report(
                steps_run=step + 1,
                completed_steps=max(0, step + 1 - warmup),
                loss=float(loss.detach().float().item()),
                measures=meter.record(),
            )
