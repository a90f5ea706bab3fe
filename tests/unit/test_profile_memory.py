"""``--profile-memory`` (issue 38.9): a capture can record the allocator's ``[memory]`` events,
so the memory tables of tracekit's own captures are no longer always empty."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from tracekit.capture import runs, sweep
from tracekit.capture.methods import parse_methods
from tracekit.capture.options import Common


def _common(tmp_path: Path, **kw) -> Common:
    return replace(Common("tiny", None, 1, "sdpa", None, 1, True, 0, tmp_path, True), **kw)


def test_the_flag_reaches_the_spec_and_the_sweeps_commands(tmp_path):
    assert _common(tmp_path).spec("fp32", 1, False)["profile_memory"] is False
    on = _common(tmp_path, profile_memory=True)
    assert on.spec("fp32", 1, False)["profile_memory"] is True
    method = parse_methods("naive")[0]
    argv = sweep.train_argv(on, runs.Train(seq_len=32, steps=1), method)
    assert "--profile-memory" in argv
    assert "--profile-memory" not in sweep.train_argv(
        _common(tmp_path), runs.Train(seq_len=32, steps=1), method
    )


def test_the_profiler_records_memory_when_asked(tmp_path):
    pytest.importorskip("torch")
    from tracekit.capture.profiling import profiler

    for wanted in (False, True):
        prof = profiler(tmp_path, 0, warmup=1, steps=1, gpu=False, with_stack=False, profile_memory=wanted)
        assert prof.profile_memory is wanted
