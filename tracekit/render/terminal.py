"""Readable terminal tables (rich), titled with the paper table each one reproduces.

Tables fit the console's width: numbers are never wrapped or cut (their column is as wide as
the widest value), headers wrap at spaces, names fold onto more lines. What is shown of each
table (units in headers, integers for counts, no all-zero rows, the top rows of long tables,
short names unless ``wide``) comes from the table registry (:mod:`tracekit.render.common`).
"""

from __future__ import annotations

import re

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tracekit.analyses import spec_of

from ..pipeline.coverage import lines as coverage_lines
from . import findings_text
from .common import (
    SHORT_CHARS,
    cell,
    device_lines,
    filters_text,
    for_people,
    header,
    mode_text,
    numeric,
    shown_rows,
    steps_text,
    title,
)
from .fasttable import FastTable
from .safetext import clean

#: C0 and C1 control characters: a kernel name is attacker-controlled text, and an escape
#: sequence (ESC [, OSC ...) printed raw would drive the user's terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe_plain(text) -> str:
    """Trace text for a plain (non-rich) terminal line: control and bidi characters replaced."""
    return clean(text)


def safe(text) -> str:
    """Trace text for the terminal: control and bidi characters replaced by U+FFFD, rich
    markup escaped."""
    return escape(clean(text))


def safe_text(text, lines: bool = False) -> Text:
    """:func:`safe` as the Text rich makes of it (markup and emoji codes read), made once: rich
    would parse the string again for every measure and render of the cell. ``lines``: the
    text's own line breaks (:func:`wrap_name`'s) are kept, each line cleaned."""
    s = "\n".join(clean(x) for x in str(text).split("\n")) if lines else clean(text)
    return Text(s) if "[" not in s and ":" not in s else Text.from_markup(escape(s))


def _steps_line(steps: dict) -> str:
    counts = {len(s) for s in steps.values()}
    if len(steps) > 4 and len(counts) == 1:
        return f"{counts.pop()} per rank ({len(steps)} ranks)"
    return "; ".join(f"rank {r}: {len(s)}" for r, s in steps.items())


#: Narrowest a name column gets before a table is split (a category's longest word,
#: "Normalization", stays whole); widest it asks for on an 80-column terminal.
NAME_MIN, NAME_MAX = 14, 28
#: A name may break after these (kernel names are identifiers, one long word for rich).
_BREAK = re.compile(r"(?<=[_/,:<>\s-])")


def name_cap(width: int) -> int:
    """The widest a name column asks for: NAME_MAX, or a third of a wider terminal (up to a
    short name's length, so a 200-column terminal shows a short kernel name on one line)."""
    return max(NAME_MAX, min(SHORT_CHARS, width // 3))


def _pieces(text: str) -> list[str]:
    return [p for p in _BREAK.split(text) if p]


def wrap_name(text: str, width: int) -> str:
    """``text`` in lines of at most ``width``, broken after ``_ : / , < > -`` or a space, so
    that words are not cut mid-way; only a piece longer than a line is folded. A line break
    already in the text (a hostile name's) is no break: it is cleaned later, as one character."""
    text = text.replace("\n", "\ufffd")
    if len(text) <= width or width < 1:
        return text
    lines: list[str] = []
    cur = ""
    for piece in _pieces(text):
        if cur and len(cur) + len(piece.rstrip()) > width:
            lines.append(cur.rstrip())
            cur = ""
        while len(cur) + len(piece) > width and len(piece.rstrip()) > width:
            lines.append(piece[:width])
            piece = piece[width:]
        cur += piece
    if cur.strip():
        lines.append(cur.rstrip())
    return "\n".join(lines)


def _widths(
    name: str, df: pd.DataFrame, rows: pd.DataFrame, texts: dict, wide: bool, cap: int
) -> dict[str, int]:
    """Each column's width in the table: numbers their widest value, names up to ``cap``,
    and never less than the longest word of the header (headers wrap at spaces, never cut)."""
    out = {}
    for c in df.columns:
        longest = max([len(t) for t in texts[c]] + [1])
        word = max(len(w) for w in header(name, c).split())
        if numeric(df, c) or wide:
            out[c] = max(longest, word)
        else:  # the narrowest a name folds to (pieces kept whole up to NAME_MIN)
            pieces = max([len(p.strip()) for v in texts[c] for p in _pieces(v)] + [1])
            out[c] = max(min(word, cap), min(pieces, NAME_MIN))
    return out


def _chunks(keys: list[str], values: list[str], widths: dict[str, int], room: int) -> list[list[str]]:
    """Value columns in groups that fit ``room`` beside the key columns (3 per column for
    padding and border)."""
    base = sum(widths[k] + 3 for k in keys) + 1
    groups: list[list[str]] = [[]]
    used = base
    for c in values:
        if groups[-1] and used + widths[c] + 3 > room:
            groups.append([])
            used = base
        groups[-1].append(c)
        used += widths[c] + 3
    return groups


def _longest(texts: dict[str, list[str]], c: str, cap: int) -> int:
    return min(max([len(t) for t in texts[c]] + [1]), cap)


def _fit(
    df: pd.DataFrame,
    texts: dict[str, list[str]],
    cols: list[str],
    widths: dict[str, int],
    room: int,
    cap: int,
) -> dict[str, int]:
    """Exact column widths within ``room``: numbers their values' width (headers wrap), names
    their minimum plus what is left, given to each up to its longest value, in order."""
    sized = {c: widths[c] for c in cols}
    spare = room - (sum(sized.values()) + 3 * len(cols) + 1)
    for c in cols:
        if spare <= 0:
            break
        if not numeric(df, c):
            want = _longest(texts, c, cap)
            add = max(min(want - sized[c], spare), 0)
            sized[c] += add
            spare -= add
    return sized


def _keys(name: str, df: pd.DataFrame) -> list[str]:
    """The columns that say which row this is, repeated in every part of a split table."""
    spec = spec_of(name)
    if spec is not None:
        return [c for c in df.columns if c in spec.keys or c in ("rank", "step", "stage")]
    return [c for c in df.columns if not numeric(df, c)]


def rich_tables(
    name: str,
    df: pd.DataFrame,
    *,
    width: int,
    top: int | None = None,
    wide: bool = False,
    skip_zero: bool = True,
    split: bool = True,
    heading: str | None = None,
) -> list[Table]:
    """One table as rich Tables that fit ``width``; [] when nothing is left to show. When the
    value columns do not fit beside the key columns: with ``split``, several tables, each
    repeating the key columns; without, the key columns and the value columns that fit (in
    declared order), and a caption naming the rest (``--wide`` shows them). ``heading``: the
    title instead of the table's."""
    shown = shown_rows(name, df, top=top, wide=wide, skip_zero=skip_zero)
    rows = shown.frame
    if rows.empty:
        return []
    texts = {c: [cell(name, c, v) for v in rows[c]] for c in df.columns}
    cap = name_cap(width)
    widths = _widths(name, df, rows, texts, wide, cap)
    keys = _keys(name, df)
    values = [c for c in df.columns if c not in keys]
    groups = [values] if wide else _chunks(keys, values, widths, width)
    notes = shown.notes() if skip_zero else []
    if not split and len(groups) > 1:
        rest = [header(name, c) for g in groups[1:] for c in g]
        notes.append(f"{len(rest)} more columns with --wide: " + ", ".join(rest))
        groups = groups[:1]
    caption = "; ".join(notes) or None
    out: list[Table] = []
    for i, group in enumerate(groups):
        part = f" ({i + 1}/{len(groups)})" if len(groups) > 1 else ""
        t = FastTable(
            title=safe(heading or title(name)) + part,
            title_justify="left",
            caption=caption if i == len(groups) - 1 else None,
            caption_justify="left",
        )
        cols = [c for c in df.columns if c in keys or c in group]
        room = _columns(t, name, df, texts, cols, widths, width, wide, cap)
        wrap = {c: room[c] for c in cols if not (wide or numeric(df, c))}
        for row in zip(*(texts[c] for c in cols)):
            t.add_row(
                *(
                    safe_text(wrap_name(v, wrap[c]), lines=True) if c in wrap else safe_text(v)
                    for c, v in zip(cols, row)
                )
            )
        out.append(t)
    return out


def _columns(
    t: Table,
    name: str,
    df: pd.DataFrame,
    texts: dict,
    cols: list[str],
    widths: dict,
    width: int,
    wide: bool,
    cap: int,
) -> dict[str, int]:
    """The columns of one part of a table, sized to fit ``width``; returns the widest line
    each column's cells may have (names are wrapped to it at their break points)."""
    # When the columns at their natural width (header on one line) do not fit, numbers get
    # exactly their values' width and headers wrap: rich's own shrinking can overshoot.
    natural = sum(max(widths[c], len(header(name, c)), _longest(texts, c, cap)) + 3 for c in cols) + 1
    sized = _fit(df, texts, cols, widths, width, cap) if not wide and natural > width else {}
    room = {}
    for c in cols:
        right = numeric(df, c)
        room[c] = sized.get(c) or max(widths[c], cap)
        t.add_column(
            safe_text(header(name, c)),
            justify="right" if right else "left",
            no_wrap=wide,
            overflow="fold",
            min_width=widths[c],
            width=sized.get(c),
            max_width=None if right or wide else max(widths[c], cap),
        )
    return room


def head_lines(meta: dict, keep=None, coverage_ranks: int = 4) -> list[str]:
    """The header as rich markup lines: path and mode, device, steps, filters, the notices
    (those ``keep`` keeps, default all), coverage (one line per rank up to ``coverage_ranks``
    ranks, else the worst of them), the paper's citation."""
    line = f"[bold]{safe(str(meta.get('path')))}[/bold]  mode: {safe(mode_text(meta))}"
    devices = device_lines(meta)
    if meta.get("devices") and not devices:
        line += "  devices: " + safe(", ".join(map(str, meta["devices"])))
    out = [line, *(safe(d) for d in devices)]
    out.append(
        "times: ms, "
        + safe(meta.get("aggregation", ""))
        + "; steps analysed: "
        + safe(_steps_line(meta.get("complete_steps", {})))
    )
    if meta.get("filters"):
        line = "filters: " + filters_text(meta["filters"])
        kept = meta["filters"].get("complete_steps_kept")
        if kept is not None:
            line += "; complete steps kept: " + _steps_line(kept)
            if not any(kept.values()):
                line += " (none: the steps here are " + _steps_line_ids(meta) + ")"
        if meta["filters"].get("tables_left_out"):
            line += " (not applicable to: " + ", ".join(meta["filters"]["tables_left_out"]) + ")"
        out.append(safe(line))
    out += [f"[yellow]note:[/yellow] {safe(n)}" for n in meta.get("notices", []) if keep is None or keep(n)]
    out += [safe(c) for c in coverage_lines(meta, coverage_ranks)]
    return out + _paper_lines(meta)


def _head(meta: dict, console: Console) -> None:
    for line in head_lines(meta):
        console.print(line)


def _steps_line_ids(meta: dict) -> str:
    ids = sorted({s for v in meta.get("complete_steps", {}).values() for s in v})
    return steps_text(ids) if ids else "none"


def wide_console(console: Console, wide: bool) -> Console:
    """``console``, at least 400 columns wide with ``wide`` (no wrapping: full names)."""
    if not wide:
        return console
    return Console(
        file=console.file,
        width=max(console.width, 400),
        highlight=False,
        force_terminal=console.is_terminal,
        no_color=console.no_color,
    )


def render(
    meta: dict,
    tables: dict[str, pd.DataFrame],
    console: Console | None = None,
    *,
    wide: bool = False,
    top: int | None = None,
) -> None:
    console = wide_console(console or Console(highlight=False), wide)
    _head(meta, console)
    for name, df in tables.items():
        if name == "findings" and len(df):  # a list to read first, not a table
            console.print(
                "\n".join(findings_text.lines(df, meta.get("path", "TRACE"), console.width)), markup=False
            )
            continue
        shown = len(df) and for_people(name)
        for t in rich_tables(name, df, width=console.width, top=top, wide=wide, split=False) if shown else []:
            console.print(t)


def render_compare(
    meta: dict,
    tables: dict[str, pd.DataFrame],
    console: Console | None = None,
    *,
    wide: bool = False,
    top: int | None = None,
) -> None:
    """A vs B tables (``tracekit compare``); rows where both runs are 0 are left out."""
    console = console or Console(highlight=False)
    for k in ("a", "b"):
        m = meta.get(k, {})
        line = f"[bold]{k.upper()}[/bold]: {safe(str(m.get('path')))}"
        if m.get("devices"):
            line += f"  devices: {safe(', '.join(map(str, m['devices'])))}"
        console.print(line + "  steps: " + safe(_steps_line(m.get("complete_steps", {}))))
    console.print("times: ms, mean per complete step; delta = B - A; std: per-step noise")
    _paper_note(meta, console)
    for name, df in tables.items():
        if df.empty:
            continue
        shown = df[(df["a_ms"] != 0) | (df["b_ms"] != 0)] if {"a_ms", "b_ms"} <= set(df) else df
        for t in rich_tables(
            name, shown.reset_index(drop=True), width=console.width, top=top, wide=wide, skip_zero=False
        ):
            console.print(t)


def _paper_lines(meta: dict) -> list[str]:
    if not meta.get("paper"):
        return []
    paper = meta["paper"]
    return [f"[cyan]paper_* columns:[/cyan] {safe(paper['setting'])} From: {safe(paper['citation'])}"]


def _paper_note(meta: dict, console: Console) -> None:
    for line in _paper_lines(meta):
        console.print(line)
