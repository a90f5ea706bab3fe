"""Warnings for people: a kind repeated per step is shown a few times, then counted in one line."""

from __future__ import annotations

from tracekit.pipeline.checks import SHOWN, TraceWarning, listed, text, warning_lines


def _overlap(rank: int, step: int) -> TraceWarning:
    return TraceWarning("steps_overlap", f"the device windows of steps 2 and {step} overlap", rank, step)


def test_a_repeated_kind_is_shown_then_counted_with_its_steps() -> None:
    ws = [_overlap(0, s) for s in range(3, 603)]
    lines = warning_lines(ws)
    assert lines[:SHOWN] == [text(w) for w in ws[:SHOWN]]
    assert len(lines) == SHOWN + 1
    assert lines[-1] == (
        f"rank 0: {600 - SHOWN} more warnings like these (steps_overlap, steps {3 + SHOWN}-602); "
        "the JSON output's meta.warnings lists each"
    )


def test_few_warnings_pass_through_and_one_kind_stays_together() -> None:
    ws = ["a plain notice", _overlap(0, 3), TraceWarning("trace", "no step here", 0), _overlap(0, 4)]
    assert warning_lines(ws) == [text(ws[i]) for i in (0, 1, 3, 2)]


def test_ranks_kinds_and_runs_are_counted_apart() -> None:
    ws = [_overlap(r, s) for r in (0, 1) for s in range(3, 3 + SHOWN + 2)]
    ws += [{"code": "empty_step", "message": "m", "rank": 0, "step": s, "run": "b"} for s in range(9)]
    lines = warning_lines(ws)
    assert len(lines) == 3 * (SHOWN + 1)
    assert lines[SHOWN].startswith("rank 0: 2 more warnings like these (steps_overlap")
    assert lines[2 * SHOWN + 1].startswith("rank 1: 2 more")
    assert lines[-1].startswith(
        f"b: rank 0: {9 - SHOWN} more warnings like these (empty_step, steps {SHOWN}-8)"
    )


def test_listed_names_the_first_items_and_counts_the_rest() -> None:
    assert listed(["a", "b"], "files") == "a; b"
    assert listed([str(i) for i in range(600)], "files") == "0; 1; 2; and 597 more files"
