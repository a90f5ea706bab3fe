"""docs/cli.md's views are real output (tests/docs_cli.py): every documented command still runs
and shows the tables the documentation shows. ``python tests/docs_cli.py --check`` compares the
blocks line by line; ``--update`` regenerates them after a deliberate change."""

from __future__ import annotations

import re

import pytest
from docs_cli import DOC, RANK_DIR, RANK_FILES, argv, run, views
from shared_traces import SHARED

BORDER = "┏"


def titles(block: str) -> list[str]:
    """The title lines of the terminal tables in an output block (the line above each top
    border), and the first line (the header, an error or a Markdown title)."""
    lines = block.splitlines()
    return lines[:1] + [lines[i - 1].strip() for i, x in enumerate(lines) if x.startswith(BORDER) and i]


COMMANDS = [(m.group(1), m.group(2)) for m in views(DOC.read_text(encoding="utf-8"))]


def _reads_shared(command: str) -> bool:
    """Whether a documented command reads one of the shared traces (the rest read samples)."""
    return any(a.endswith(".gz") or a.rstrip("/") == RANK_DIR for a in argv(command)[0])


def test_every_view_of_the_issue_is_documented():
    text = " ".join(c for c, _ in COMMANDS)
    for needed in ("top_kernels", "layers", "layer_spread", "rank_summary", "--module", "--steps", "explain"):
        assert needed in text, needed
    assert any("coverage (share of device time)" in out for _, out in COMMANDS)
    assert len(COMMANDS) >= 10


@pytest.mark.parametrize(
    "command, documented",
    [
        pytest.param(
            c, out, id=re.sub(r"\s+", " ", c)[23:80], marks=[pytest.mark.shared] if _reads_shared(c) else []
        )
        for c, out in COMMANDS
    ],
)
def test_documented_command_runs_and_shows_the_same_tables(command, documented):
    _, both = argv(command)
    if not SHARED.is_dir() and _reads_shared(command):
        pytest.skip(f"shared traces not found at {SHARED}")
    code, out = run(command)
    assert code == (2 if both else 0), out
    assert titles(out) == titles(documented), "docs/cli.md is stale: run python tests/docs_cli.py --update"


@pytest.mark.shared
def test_rank_dir_files_exist():
    if not SHARED.is_dir():
        pytest.skip(f"shared traces not found at {SHARED}")
    assert all((SHARED / "hta" / f).is_file() for f in RANK_FILES)
