"""Ctrl-C inside ``torch.profiler``'s own step (capture/interrupts.py).

CI once lost every finished step of an interrupted capture: the Ctrl-C landed inside
``prof.step()``, after it closed ``ProfilerStep#N`` and before the next range was entered, and the
profiler's exit raised ``AssertionError: Expected record to be set`` instead of writing the
trace. These tests put the signal exactly there, deterministically, instead of waiting for the
race.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from tracekit.capture import interrupts


@pytest.fixture
def handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    interrupts.install()
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_an_interrupt_inside_a_deferred_block_is_raised_when_it_ends(handlers):
    done = []
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        done.extend(range(1000))  # Python runs the handler here, mid-block
        done.append("end")
    assert done[-1] == "end"
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN  # the launcher's own SIGINT: ignored


def test_sigterm_unwinds_as_terminated_and_nesting_holds_to_the_outer_end(handlers):
    order = []
    with pytest.raises(interrupts.Terminated), interrupts.deferred():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            order.append("inner")
        order.append("outer")
    assert order == ["inner", "outer"]


def test_an_interrupt_outside_is_raised_at_once(handlers):
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000_000):  # never reached in full
            pass
        pytest.fail("the interrupt was not raised")


def test_the_blocks_own_error_wins_over_a_held_interrupt(handlers):
    with pytest.raises(ValueError), interrupts.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        sum(range(1000))
        raise ValueError("the step's own failure")


def _ctrl_c_between_step_ranges(monkeypatch, tmp_path, step) -> list:
    """Run 6 steps under a real torch profiler; Ctrl-C arrives while ``prof.step()`` makes the
    range of step 3, after its ``record_function`` is made and before it is entered. Returns the names
    of the events in the traces the profiler wrote."""
    torch = pytest.importorskip("torch")
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler as tp
    from tracekit.capture.profiling import step_schedule

    original = autograd_profiler.record_function

    class InterruptedRange(original):
        def __enter__(self):
            if self.name == "ProfilerStep#3":
                os.kill(os.getpid(), signal.SIGINT)  # raised as __enter__ calls on: not entered
            return super().__enter__()

    monkeypatch.setattr(autograd_profiler, "record_function", InterruptedRange)
    written = []

    def ready(p) -> None:
        written.append(tmp_path / f"trace{len(written)}.json")
        p.export_chrome_trace(str(written[-1]))

    prof = tp.profile(
        activities=[tp.ProfilerActivity.CPU], schedule=step_schedule(0, 100), on_trace_ready=ready
    )
    with pytest.raises(KeyboardInterrupt), prof:
        for _ in range(6):
            torch.ones(4).add_(1)
            step(prof)
    return [{e.get("name") for e in json.loads(p.read_text())["traceEvents"]} for p in written]


def test_ctrl_c_inside_the_profilers_step_keeps_the_finished_steps(handlers, monkeypatch, tmp_path):
    from tracekit.capture.profiling import next_step

    [names] = _ctrl_c_between_step_ranges(monkeypatch, tmp_path, next_step)
    steps = {n for n in names if n and n.startswith("ProfilerStep#")}
    assert {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#2"} <= steps
