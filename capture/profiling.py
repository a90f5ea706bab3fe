"""The torch profiler a capture runs under: W warm-up steps, then M recorded steps, one file.

Every step the caller runs ends with ``prof.step()``, so recorded steps are ``ProfilerStep#N``
ranges. The trace is written by ``torch.profiler.tensorboard_trace_handler`` (gzip) when the
recorded steps end, or when the ``with`` block is left early by an exception: the steps that
finished before a crash are still in the file (the crashed step's range ends at the crash).
"""

from __future__ import annotations

from pathlib import Path

from .output import worker_name


def step_schedule(warmup: int, steps: int):
    """``torch.profiler.schedule`` for ``warmup`` unrecorded then ``steps`` recorded steps.

    The last warm-up step is the profiler's own warm-up (tracing on, results dropped), which
    keeps tracer start-up cost out of the first recorded step.
    """
    from torch.profiler import schedule

    if steps < 1:
        raise ValueError("at least one recorded step")
    if warmup < 0:
        raise ValueError("warm-up steps cannot be negative")
    profiler_warmup = 1 if warmup >= 1 else 0
    return schedule(wait=warmup - profiler_warmup, warmup=profiler_warmup, active=steps, repeat=1)


def profiler(out: Path, rank: int, *, warmup: int, steps: int, gpu: bool, with_stack: bool):
    import torch.profiler as tp

    activities = [tp.ProfilerActivity.CPU]
    if gpu:
        activities.append(tp.ProfilerActivity.CUDA)
    return tp.profile(
        activities=activities,
        schedule=step_schedule(warmup, steps),
        on_trace_ready=tp.tensorboard_trace_handler(str(out), worker_name=worker_name(rank),
                                                    use_gzip=True),
        record_shapes=True,
        with_stack=with_stack,
    )
