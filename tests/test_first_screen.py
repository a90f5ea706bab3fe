"""The terminal's first screen (issue 38.8): at most 60 lines at 80 columns on every sample and
shared trace, the planted step time, phases, modules and findings on it, ``--all`` for every
table, and a wide table's extra columns moved to ``--wide`` instead of split into parts."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import main
from tracekit.render.first_screen import FOOTER_LINES, LINES
from tracekit.testing import TraceBuilder

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import SHARED, params

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _run(*args: str, columns: int = 80):
    res = CliRunner(env={"COLUMNS": str(columns)}).invoke(main, ["analyze", *args, "--no-cache", "-j", "1"])
    assert res.exit_code in (0, 1), res.output
    return res.stdout


def _planted(tmp_path: Path) -> Path:
    """Two steps of one 1 ms and one 2 ms kernel, 1 ms apart: a 4 ms step, 3 ms compute, 1 ms idle."""
    b = TraceBuilder()
    for s in range(2):
        base = 1000.0 + 10_000.0 * s
        with b.step():
            with b.forward():
                b.kernel("sm80_xmma_gemm_bf16", 1000, op="aten::mm", at_us=base)
                b.kernel("sm80_xmma_gemm_bf16", 2000, op="aten::mm", at_us=base + 2000)
    return b.write(tmp_path / "t.json")


def test_the_first_screen_answers_the_question(tmp_path):
    text = _run(str(_planted(tmp_path)))
    lines = text.splitlines()
    assert len(lines) <= LINES
    assert "step 4.000 ms: compute 75.0%, exposed comm 0.0%, idle 25.0%" in lines
    assert text.index("step 4.000 ms") < text.index("Phases") < text.index("Top modules")
    assert "MFU: not known here" in text  # no shapes recorded: the notes above say why
    assert _footer(lines)[0].startswith("other tables (--table NAME or --all): ")
    assert "top_kernels" in text and "Top kernels" not in text  # named, not shown
    full = _run(str(_planted(tmp_path)), "--all")
    assert "Top kernels" in full and "Kernel categories" in full
    assert "other tables (" not in full


def test_the_first_screen_keeps_notes_of_what_it_shows_and_counts_the_rest(tmp_path):
    text = _run(str(_planted(tmp_path)))
    assert "no input shapes" in text  # about MFU, which is shown
    assert "no memory events" not in text  # about the memory tables, which are not
    assert "more note on other tables: --all prints them" in text
    assert "no memory events" in _run(str(_planted(tmp_path)), "--all")


def test_findings_come_after_the_phases_and_as_many_as_fit():
    two = SAMPLES / "tiny-zero2-2ranks"
    text = _run(str(two))
    assert text.index("Phases, rank") < text.index("Findings")
    assert len(text.splitlines()) <= LINES
    assert "rank 1: step" in text and "rank 0: step" in text  # slowest first, each rank's line


def _sources() -> list:
    out = [pytest.param(p, id=f"sample-{p.name}") for p in sorted(SAMPLES.iterdir()) if p.is_dir()]
    return out + params()


@pytest.mark.parametrize("src", _sources())
def test_first_screen_is_at_most_60_lines_at_80_columns(src):
    lines = _run(str(src)).splitlines()
    assert len(lines) <= LINES, "\n".join(lines)
    assert max(len(ln) for ln in lines) <= 80
    _assert_footer_is_whole_words(_footer(lines))


def _footer(lines: list[str]) -> list[str]:
    """The footer naming the other tables: its first line and its indented continuation."""
    at = next(i for i, ln in enumerate(lines) if ln.startswith("other tables ("))
    return [lines[at]] + [ln for ln in lines[at + 1 : at + FOOTER_LINES] if ln.startswith("  ")]


def _assert_footer_is_whole_words(footer: list[str]) -> None:
    """At most two lines, the second indented, broken between names: every word after the
    prefix is a whole table name (or the count of the names left out), none split."""
    from analyses._registry import REGISTRY

    assert 1 <= len(footer) <= FOOTER_LINES and footer == _footer(footer + ["x"])
    assert all(ln == ln.rstrip() and len(ln) <= 80 for ln in footer)
    words = " ".join(footer).split(": ", 1)[1].split(", ")
    more = words[-1].startswith("+") and words[-1].endswith(" more")
    assert all(w.strip() in REGISTRY for w in words[: len(words) - more]), footer


def test_the_footer_counts_the_names_it_has_no_room_for():
    from tracekit.render.first_screen import footer

    tables = {f"t{i:02d}_{'x' * 12}": [1] for i in range(20)}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tracekit.render.first_screen.for_people", lambda n: True)
        lines = footer(tables, 80)
    assert len(lines) == FOOTER_LINES and lines[1].startswith("  ") and "\n" not in "".join(lines)
    shown = [w.strip() for w in " ".join(lines).split(": ", 1)[1].split(", ")]
    assert shown[-1] == f"+{20 - len(shown) + 1} more"
    assert all(w in tables for w in shown[:-1]) and max(len(ln) for ln in lines) <= 80
    assert footer({"gemm": [1]}, 80) == ["other tables (--table NAME or --all): gemm"]


@pytest.mark.shared
def test_the_two_rank_shared_directory_fits(tmp_path):
    ranks = sorted(SHARED.glob("hta/trace_filter__sampled_rank-*.json.gz"))
    if len(ranks) < 2:
        pytest.skip(f"the two trace_filter ranks are not under {SHARED}")
    for p in ranks:
        shutil.copy(p, tmp_path / p.name)
    lines = _run(str(tmp_path)).splitlines()
    assert len(lines) <= LINES, "\n".join(lines)


def test_a_wide_table_shows_its_key_columns_and_names_the_rest_for_wide():
    text = _run(str(SAMPLES / "tiny-train-1rank"), "--table", "op_shapes")
    assert "(1/" not in text  # never split into parts
    assert max(len(ln) for ln in text.splitlines()) <= 80
    flat = " ".join(text.split())
    assert "more columns with --wide: " in flat
    hidden = flat.split("more columns with --wide: ")[1].split(", ")
    assert "ideal mem (ms)" in hidden
    wide = _run(str(SAMPLES / "tiny-train-1rank"), "--table", "op_shapes", "--wide")
    assert "more columns with --wide" not in wide
    assert "ideal mem (ms)" in wide


def test_other_formats_are_unchanged_by_the_first_screen():
    src = str(SAMPLES / "tiny-train-1rank")
    doc = json.loads(_run(src, "--format", "json"))
    assert {"op_shapes", "top_kernels", "phases", "findings"} <= set(doc["tables"])
    md = _run(src, "--format", "md")
    assert "other tables (" not in md and "Top kernels" in md


def test_the_mfu_caveat_is_said_once_beside_mfu():
    from shared_traces import shared_trace

    text = _run(str(shared_trace("tracelens/b200__eager_trace.json.gz")))
    flat = " ".join(text.split())
    assert "MFU: 0.1% (mean per step), a lower bound: only 20.0% of compute-kernel time" in flat
    assert "MFU counts the FLOPs" not in flat  # the notice is the MFU line's caveat
    assert "3 more notes on other tables" in flat  # memory and the two collectives notes
