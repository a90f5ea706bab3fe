"""The torch profiler a capture runs under: W warm-up steps, then M recorded steps, one file.

Every step the caller runs ends with :func:`next_step` (``prof.step()``), so recorded steps are
``ProfilerStep#N`` ranges. The trace is written by ``torch.profiler.tensorboard_trace_handler``
(gzip) when the recorded steps end, or when the ``with`` block is left early by an exception:
the steps that finished before a crash are still in the file (the crashed step's range ends at
the crash).
"""

from __future__ import annotations

from pathlib import Path

from .interrupts import deferred
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


def profiler(
    out: Path,
    rank: int,
    *,
    warmup: int,
    steps: int,
    gpu: bool,
    with_stack: bool,
    profile_memory: bool = False,
):
    """The profiler of one rank (``profile_memory``: the allocator's ``[memory]`` events too)."""
    import torch.profiler as tp

    activities = [tp.ProfilerActivity.CPU]
    if gpu:
        activities.append(tp.ProfilerActivity.CUDA)
    return tp.profile(
        activities=activities,
        schedule=step_schedule(warmup, steps),
        on_trace_ready=tp.tensorboard_trace_handler(str(out), worker_name=worker_name(rank), use_gzip=True),
        record_shapes=True,
        with_stack=with_stack,
        profile_memory=profile_memory,
    )


def next_step(prof) -> None:
    """``prof.step()``, never cut by Ctrl-C (:mod:`~tracekit.capture.interrupts`): cut between
    closing one ``ProfilerStep#N`` range and opening the next, the profiler's exit could not
    write the trace of the steps already finished."""
    with deferred():
        prof.step()


#: Decode steps after each warm-up prefill (allocator, kernels and caches warm for both shapes).
WARMUP_DECODES = 2


def generation_steps(
    prof,
    report,
    *,
    warmup: int,
    steps: int,
    prefill,
    decode,
    phase,
    meter,
    batch: tuple[int, int],
    after_warmup=None,
) -> None:
    """The profiled steps of a generation: ``warmup`` short generations (one profiler step
    each), then one prefill step and ``steps - 1`` decode steps, each in its phase range and
    measured by ``meter`` (:class:`~tracekit.capture.measure.StepMeter`).

    ``prefill()`` returns a state and the next token; ``decode(state, token)`` the same.
    ``batch`` is (sequences, prompt tokens each): a prefill step's tokens are the prompt tokens
    of every sequence, a decode step's the one token each sequence generates.
    ``after_warmup()`` (optional) releases what a warm-up generation held.
    """
    for _ in range(warmup):
        state, token = prefill()
        for _ in range(WARMUP_DECODES):
            state, token = decode(state, token)
        if after_warmup is not None:
            after_warmup()
        next_step(prof)
    report(steps_run=warmup)
    sequences, prompt_len = batch
    meter.start()
    with phase("prefill"):
        state, token = prefill()
    meter.stop(warmup, tokens=sequences * prompt_len, samples=sequences, stage="prefill")
    next_step(prof)
    report(steps_run=warmup + 1, completed_steps=1, measures=meter.record())
    for i in range(1, steps):
        meter.start()
        with phase("decode"):
            state, token = decode(state, token)
        meter.stop(warmup + i, tokens=sequences, samples=sequences, stage="decode")
        next_step(prof)
        report(steps_run=warmup + 1 + i, completed_steps=1 + i, measures=meter.record())
