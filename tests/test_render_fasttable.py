"""FastTable prints exactly what rich's Table prints: the terminal output is unchanged by the
shortcut (measuring columns from their extreme cells, laying out one-line cells directly)."""

from __future__ import annotations

import io
import random

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text
from shared_traces import SHARED

from tracekit.render import terminal
from tracekit.render.fasttable import FastTable

WORDS = [
    "aten::mm",
    "ampere_sgemm_128x64_nn",
    "x",
    "",
    "  lead",
    "trail  ",
    "a b c d e f",
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
    "全角の名前",
    ":thumbs_up: kernel",
    "[bold]not markup[/bold]",
    "tab\there",
    "two\nlines",
    "1,234.567",
    "0.000",
]


def _print(cls, console: Console, title: str, columns: list[dict], rows: list[list]) -> str:
    t = cls(title=title, title_justify="left", caption="2 rows hidden", caption_justify="left")
    for c in columns:
        t.add_column(**c)
    for r in rows:
        t.add_row(*r)
    console.print(t)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def _random_table(rng: random.Random) -> tuple[list[dict], list[list]]:
    n_cols = rng.randint(1, 6)
    columns = []
    for i in range(n_cols):
        right = rng.random() < 0.5
        columns.append(
            dict(
                header=Text(rng.choice(["wall (ms)", "name", "exposed comm (ms)", f"c{i}"])),
                justify="right" if right else "left",
                no_wrap=rng.random() < 0.2,
                overflow="fold",
                min_width=rng.choice([None, 1, 4, 9]),
                width=rng.choice([None, None, 6, 12]),
                max_width=rng.choice([None, 12, 28]),
            )
        )
    rows = [
        [
            Text.from_markup(rng.choice(WORDS)) if rng.random() < 0.1 else Text(rng.choice(WORDS))
            for _ in columns
        ]
        for _ in range(rng.randint(1, 7))
    ]
    return columns, rows


@pytest.mark.parametrize("seed", range(40))
def test_fasttable_prints_what_rich_prints(seed):
    rng = random.Random(seed)
    columns, rows = _random_table(rng)
    for width in (20, 60, 80, 140):
        for color in (False, True):
            out = []
            for cls in (Table, FastTable):
                console = Console(
                    file=io.StringIO(), width=width, highlight=False, force_terminal=color or None
                )
                out.append(_print(cls, console, "Module time per phase (Table VI)", columns, rows))
            assert out[0] == out[1], (seed, width, color)


@pytest.mark.shared
@pytest.mark.parametrize(
    "name", ["tracelens/b200__eager_trace.json.gz", "hta/trace_filter__sampled_rank-0.json.gz"]
)
def test_terminal_tables_unchanged_on_real_traces(name, monkeypatch):
    """Every table of real traces at 80 and 60 columns, --wide, --top 3 and in colour: the same
    bytes as rich's own Table."""
    import tracekit
    from tracekit.render.safetext import TERMINAL_NAME_CHARS, clean_obj, clean_tables

    src = SHARED / name
    if not src.exists():
        pytest.skip(f"shared traces not found at {SHARED}")
    a = tracekit.load(src, cache=False)
    meta, tables = clean_obj(a.meta), clean_tables(a.tables(), TERMINAL_NAME_CHARS)
    for width, wide, top, color in [(80, False, None, False), (80, True, None, False), (60, False, 3, True)]:
        out = []
        for cls in (Table, FastTable):
            monkeypatch.setattr(terminal, "FastTable", cls)
            buf = io.StringIO()
            console = Console(file=buf, width=width, highlight=False, force_terminal=color or None)
            terminal.render(meta, tables, console, wide=wide, top=top)
            out.append(buf.getvalue())
        assert out[0] == out[1], (name, width, wide, top, color)
        assert out[0].count("┏") >= 8
