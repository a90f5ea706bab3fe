"""Readable terminal tables (rich), titled with the paper table each one reproduces."""

from __future__ import annotations

import pandas as pd
from rich.console import Console
import re

from rich.markup import escape
from rich.table import Table

from ..coverage import lines as coverage_lines

TITLES = {
    "phases": "Phases: forward / backward / optimizer (Tables V, VII)",
    "modules": "Module time per phase (Table VI)",
    "gemm": "GEMM share of compute-kernel time (Table XIII)",
    "comm": "Communication per phase and collective (Tables XV, XVI)",
    "idle": "Device idle per step",
    "kernels": "Kernel categories (Table X)",
    "memcpy": "Memory copies (Table XIV)",
    "timeline": "Forward timeline (Table XI)",
    "attention": "Attention time, A vs B (Table VIII)",
    "phases_delta": "Phase wall time, B - A",
    "modules_delta": "Module time per phase, B - A",
    "kernels_delta": "Kernel categories, B - A",
}


#: C0 and C1 control characters: a kernel name is attacker-controlled text, and an escape
#: sequence (ESC [, OSC ...) printed raw would drive the user's terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def safe_plain(text) -> str:
    """Trace text for a plain (non-rich) terminal line: control characters replaced."""
    return _CONTROL.sub("\ufffd", str(text))


def safe(text) -> str:
    """Trace text for the terminal: control characters replaced by U+FFFD, rich markup escaped."""
    return escape(_CONTROL.sub("\ufffd", str(text)))


def _fmt(v) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:,.3f}"
    return safe(str(v))


def render(meta: dict, tables: dict[str, pd.DataFrame], console: Console | None = None) -> None:
    console = console or Console()
    head = f"[bold]{safe(str(meta.get('path')))}[/bold]  mode: {meta.get('mode')}"
    if meta.get("devices"):
        head += "  devices: " + safe(", ".join(meta["devices"]))
    console.print(head)
    steps = meta.get("complete_steps", {})
    console.print("times: ms, " + meta.get("aggregation", "") + "; steps analysed: " +
                  safe("; ".join(f"rank {r}: {len(s)}" for r, s in steps.items())))
    for n in meta.get("notices", []):
        console.print(f"[yellow]note:[/yellow] {safe(n)}")
    for c in coverage_lines(meta):
        console.print(safe(c))
    _paper_note(meta, console)
    for name, df in tables.items():
        if df.empty:
            continue
        t = Table(title=TITLES.get(name, name), title_justify="left", show_lines=False)
        for c in df.columns:
            numeric = pd.api.types.is_numeric_dtype(df[c])
            t.add_column(safe(str(c)), justify="right" if numeric else "left")
        shown = df
        if name == "modules" and "time_ms" in df:
            shown = df[df["time_ms"] > 0]
        if name == "kernels" and "time_ms" in df:
            shown = df[(df["time_ms"] > 0) | (df["count"] > 0)]
        for row in shown.itertuples(index=False, name=None):
            t.add_row(*(_fmt(v) for v in row))
        console.print(t)


def render_compare(meta: dict, tables: dict[str, pd.DataFrame], console: Console | None = None) -> None:
    """A vs B tables (``tracekit compare``); rows where both runs are 0 are left out."""
    console = console or Console()
    for k in ("a", "b"):
        m = meta.get(k, {})
        console.print(f"[bold]{k.upper()}[/bold]: {safe(str(m.get('path')))}  "
                      f"devices: {safe(', '.join(m.get('devices', [])))}  steps: " +
                      safe("; ".join(f"rank {r}: {len(s)}" for r, s in m.get("complete_steps", {}).items())))
    console.print("times: ms, mean per complete step; delta = B - A; std: per-step noise")
    _paper_note(meta, console)
    for name, df in tables.items():
        if df.empty:
            continue
        shown = df[(df["a_ms"] != 0) | (df["b_ms"] != 0)] if {"a_ms", "b_ms"} <= set(df) else df
        t = Table(title=TITLES.get(name, name), title_justify="left")
        for c in df.columns:
            t.add_column(safe(str(c)), justify="right" if pd.api.types.is_numeric_dtype(df[c]) else "left")
        for row in shown.itertuples(index=False, name=None):
            t.add_row(*("" if isinstance(v, float) and v != v else _fmt(v) for v in row))
        console.print(t)


def _paper_note(meta: dict, console: Console) -> None:
    if meta.get("paper"):
        console.print(f"[cyan]paper_* columns:[/cyan] {safe(meta['paper']['setting'])} "
                      f"From: {safe(meta['paper']['citation'])}")
