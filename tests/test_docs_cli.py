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


def test_generated_sections_are_what_the_code_gives():
    """The analyze options, every table's columns and ratios, and the values of the label
    columns are written from the code (tests/docs_generated.py): run
    ``python tests/docs_cli.py --update`` after changing any of them."""
    from docs_generated import SECTIONS, sections

    found = sections(DOC.read_text(encoding="utf-8"))
    assert set(found) == set(SECTIONS)
    for name, make in SECTIONS.items():
        assert found[name] == make(), (
            f"docs/cli.md section {name} is stale: python tests/docs_cli.py --update"
        )


def test_the_readme_commands_write_nothing_git_would_track():
    """The README's main job writes ``runs/tiny`` into the checkout: .gitignore covers it."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    outs = sorted(set(re.findall(r"--out (runs/[\w./-]+)", (root / "README.md").read_text())))
    assert outs
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    for out in outs:
        r = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", f"{out}/rank0.json"], check=False)
        assert r.returncode == 0, f"{out} is not ignored by .gitignore"


def test_capture_infer_options_table_is_the_code():
    """docs/capture.md's `capture infer` table gives the options' real defaults (the docs said
    8 steps where the default is 64)."""
    from pathlib import Path

    import click
    from tracekit.capture.cli import infer

    doc = (Path(__file__).resolve().parents[1] / "docs" / "capture.md").read_text()
    section = doc.split("## `tracekit capture infer`")[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| `(--[\w-]+)[^|]*\| ([^|]*) \|", section, re.M))
    ctx = click.Context(infer)
    defaults = {f"--{p.name.replace('_', '-')}": p.get_default(ctx) for p in infer.params}
    for opt in ("--prompt-len", "--gen-len", "--batch-size"):
        assert rows[opt].strip() == str(defaults[opt]), (opt, rows[opt], defaults[opt])
    assert rows["--warmup"].strip() == "1"  # the infer default (train's is 2), set in infer()
    assert f"`--gen-len {defaults['--gen-len']}` is {defaults['--gen-len']} recorded steps" in " ".join(
        doc.split()
    )
