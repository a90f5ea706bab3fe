"""The views of docs/cli.md are real output: each documented command, run again.

    python tests/docs_cli.py --update        # rerun every command, rewrite its output block
    python tests/docs_cli.py --check         # exit 1 when a block differs from today's output

In docs/cli.md a view is an indented command line ``    COLUMNS=80 tracekit ...`` (a trailing
``2>&1`` keeps stderr too) followed, after any prose, by a fenced block with its output. The
command's inputs are names: a file of ../shared/traces (any folder), a directory of
sample_traces/, or ``trace_filter_ranks/`` (HTA's two sampled ranks of one job). They are copied
into a temporary directory first, and the command runs there: nothing is written beside an input.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "cli.md"
SAMPLES = HERE.parent / "sample_traces"
sys.path.insert(0, str(HERE))

from shared_traces import SHARED

#: A view: its command (group 1, continuation lines joined), then its fenced output (group 2).
VIEW = re.compile(
    r"^    (COLUMNS=80 tracekit (?:[^\n]*\\\n)*[^\n]*)\n(?:(?!```|    COLUMNS=80)[^\n]*\n)*?```[a-z]*\n(.*?)```",
    re.M | re.S,
)
RANK_DIR = "trace_filter_ranks"
RANK_FILES = ["trace_filter__sampled_rank-0.json.gz", "trace_filter__sampled_rank-1.json.gz"]


def views(text: str) -> list[re.Match]:
    return list(VIEW.finditer(text))


def argv(command: str) -> tuple[list[str], bool]:
    """The ``tracekit`` arguments of a documented command, and whether it shows stderr."""
    words = shlex.split(command.replace("\\\n", " "))
    both = words[-1] == "2>&1"
    words = words[:-1] if both else words
    assert words[:2] == ["COLUMNS=80", "tracekit"], command
    return words[2:], both


def stage(args: list[str], where: Path) -> None:
    """Copy the inputs a command names into ``where``."""
    for a in args:
        name = a.rstrip("/")
        if name == RANK_DIR:
            (where / RANK_DIR).mkdir(exist_ok=True)
            for f in RANK_FILES:
                shutil.copy(SHARED / "hta" / f, where / RANK_DIR / f)
        elif (SAMPLES / name).is_dir() and "/" not in name:
            shutil.copytree(SAMPLES / name, where / name, dirs_exist_ok=True)
        else:
            hits = sorted(SHARED.glob(f"*/{name}")) if name.endswith((".json", ".gz")) else []
            if hits:
                shutil.copy(hits[0], where / name)


def run(command: str) -> tuple[int, str]:
    """(exit code, output) of a documented command, at 80 columns, in a scratch directory."""
    import os

    from click.testing import CliRunner

    from tracekit.cli import main

    args, both = argv(command)
    with tempfile.TemporaryDirectory() as tmp:
        stage(args, Path(tmp))
        old = os.getcwd()
        os.chdir(tmp)
        try:
            r = CliRunner(env={"COLUMNS": "80", "TRACEKIT_CACHE_DIR": str(Path(tmp) / ".cache")}).invoke(
                main, args
            )
        finally:
            os.chdir(old)
    out = r.output if both else r.stdout
    return r.exit_code, "\n".join(line.rstrip() for line in out.splitlines()).rstrip("\n") + "\n"


def regenerate(text: str) -> str:
    """``text`` with every view's block replaced by its command's output today, and every
    generated section (tests/docs_generated.py) as the code gives it."""
    from docs_generated import regenerate as generated

    text = generated(text)
    out, last = [], 0
    for m in views(text):
        _code, got = run(m.group(1))
        out += [text[last : m.start(2)], got]
        last = m.end(2)
    return "".join(out) + text[last:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--update", action="store_true", help="rewrite docs/cli.md's output blocks")
    ap.add_argument("--check", action="store_true", help="exit 1 when a block is stale")
    opts = ap.parse_args()
    text = DOC.read_text(encoding="utf-8")
    new = regenerate(text)
    if opts.update:
        DOC.write_text(new, encoding="utf-8")
        print(f"{DOC}: {len(views(text))} views regenerated")
        return 0
    diff = list(
        difflib.unified_diff(text.splitlines(), new.splitlines(), "docs/cli.md", "today", lineterm="")
    )
    print("\n".join(diff) or "docs/cli.md: every view is current")
    return 1 if diff and opts.check else 0


if __name__ == "__main__":
    sys.exit(main())
