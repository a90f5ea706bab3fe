"""The terminal's first screen (``tracekit analyze`` without ``--all`` or ``--table``): what
answers "where did the step time go" in at most :data:`LINES` lines at 80 columns.

In order: the header (path, device, steps) with the notices about what is shown here (those
about other tables are counted, ``--all`` prints them), coverage; one line per rank with the
step time, its compute, exposed communication and idle (slowest ranks first, at most
:data:`RANKS`); MFU with its caveat; the phases (key columns) and the top module rows of the
rank with the longest step; the findings, as many whole ones as the screen has room for; one
at most two lines naming the other tables (``--table NAME``, ``--all``). Every number is a table's number
(``idle``, ``phases``, ``modules``) or ``meta``'s (MFU): nothing is computed here.
"""

from __future__ import annotations

import textwrap

import pandas as pd
from rich.console import Console, RenderableType
from rich.text import Text

from ..ranks.meta import MEMORY_NOTICE, MODELLED_CAVEAT_PCT, NO_LAUNCH_NOTICE
from . import findings_text
from .common import cell, for_people

#: Most lines of the first screen (at 80 columns).
LINES = 60
#: Most ranks given a step line; module rows shown.
RANKS, MODULE_ROWS = 4, 6
#: The phases table's columns shown here (the rest: ``--table phases``).
PHASE_COLUMNS = ("rank", "stage", "phase", "wall_ms", "percent", "compute_ms", "exposed_comm_ms", "idle_ms")
#: Rows of the modules table that are not modules (their time is in the phases' columns).
NOT_MODULES = ("Idle", "Exposed communication")
#: The tables this screen shows (the footer names the others).
SHOWN = ("findings", "phases", "modules", "idle")
#: Most lines of the footer naming the other tables.
FOOTER_LINES = 2


def deferred(notice: str) -> bool:
    """Whether a notice is about tables this screen does not show (``--all`` prints it)."""
    return notice in (MEMORY_NOTICE, NO_LAUNCH_NOTICE) or notice.startswith("collectives:")


def _rank_of(df: pd.DataFrame, rank) -> pd.DataFrame:
    return df[df["rank"] == rank] if rank is not None and "rank" in df else df


def _slowest(idle: pd.DataFrame | None):
    """The rank with the longest step window (None on one rank without a rank column)."""
    if idle is None or idle.empty or "rank" not in idle:
        return None
    return idle.sort_values("window_ms", ascending=False, kind="stable")["rank"].iloc[0]


def step_lines(tables: dict) -> list[str]:
    """One line per rank (slowest first, at most :data:`RANKS`): step time, and the shares of
    it that compute, exposed communication and idle took (their ms: the phases table)."""
    idle, phases = tables.get("idle"), tables.get("phases")
    if idle is None or idle.empty or phases is None:
        return []
    rows = idle.sort_values("window_ms", ascending=False, kind="stable") if "rank" in idle else idle
    out = []
    for r in rows.head(RANKS).to_dict("records"):
        ph, step = _rank_of(phases, r.get("rank")), r["window_ms"]

        def pct(ms: float, step: float = step) -> str:
            return cell("phases", "percent", 100 * ms / step if step else 0) + "%"

        who = f"rank {r['rank']}: step" if "rank" in r else "step"
        out.append(
            f"{who} {cell('idle', 'window_ms', step)} ms: compute {pct(ph['compute_ms'].sum())}, "
            f"exposed comm {pct(ph['exposed_comm_ms'].sum())}, idle {pct(r['idle_ms'])}"
        )
    if len(rows) > RANKS:
        out.append(f"... {len(rows) - RANKS} more ranks: --table ranks")
    return out


def mfu_line(meta: dict, rank) -> str:
    """MFU of the shown rank with its caveat (a lower bound when under
    :data:`MODELLED_CAVEAT_PCT` % of compute-kernel time has a FLOP model)."""
    mfu = meta.get("mfu") or {}
    m = mfu.get(rank if rank is not None else next(iter(mfu), None)) or mfu.get(str(rank)) or {}
    if m.get("mean_pct") is None:
        return "MFU: not known here (the notes above say why)" if m else ""
    line = f"MFU: {cell('phases', 'mfu_pct', m['mean_pct'])}% (mean per step)"
    share = m.get("modelled_pct")
    if share is not None and share < MODELLED_CAVEAT_PCT:
        line += (
            f", a lower bound: only {share:.1f}% of compute-kernel time has a FLOP model "
            "(efficiency.modelled_pct)"
        )
    return line


def top_modules(modules: pd.DataFrame, rank) -> pd.DataFrame:
    """The module rows with the most time (not idle or exposed communication)."""
    m = _rank_of(modules, rank)
    m = m[~m["module"].isin(NOT_MODULES) & (m["time_ms"] > 0)]
    return m.sort_values("time_ms", ascending=False, kind="stable").head(MODULE_ROWS)


def footer(tables: dict, width: int = 80) -> list[str]:
    """The lines naming the other tables: at most :data:`FOOTER_LINES` lines of at most
    ``width`` columns, broken between words (never inside one), the continuation indented; the
    names that do not fit are counted (``+N more``; ``--all`` prints them, and ``--table``'s
    error names them all)."""
    rest = [n for n in tables if n not in SHOWN and for_people(n) and len(tables[n])]
    for n in range(len(rest), -1, -1):
        names = rest[:n] + ([f"+{len(rest) - n} more"] if n < len(rest) else [])
        lines = textwrap.wrap(
            "other tables (--table NAME or --all): " + ", ".join(names),
            width,
            subsequent_indent="  ",
            break_long_words=False,
            break_on_hyphens=False,
        )
        if len(lines) <= FOOTER_LINES:
            return lines
    return lines


def sections(meta: dict, tables: dict, rank, tables_of) -> list[RenderableType]:
    """The screen's parts before the findings (``tables_of(name, df, title)``: its tables)."""
    out: list[RenderableType] = [Text(s) for s in step_lines(tables)]
    if line := mfu_line(meta, rank):
        out.append(Text(line))
    phases, modules = tables.get("phases"), tables.get("modules")
    where = f", rank {rank} (longest step)" if rank is not None and len(meta.get("ranks", [])) > 1 else ""
    if phases is not None and len(phases):
        ph = _rank_of(phases, rank)
        cols = [c for c in ph.columns if c in PHASE_COLUMNS and (c != "rank" or not where)]
        cols += [c for c in ("recompute_ms", "mfu_pct") if c in ph and ph[c].fillna(0).any()]
        out += tables_of("phases", ph[cols].reset_index(drop=True), f"Phases{where}")
    if modules is not None and len(modules):
        top = top_modules(modules, rank)
        keys = ("stage", "phase", "module", "time_ms", "percent") + (() if where else ("rank",))
        cols = [c for c in top.columns if c in keys]
        out += tables_of("modules", top[cols].reset_index(drop=True), f"Top modules{where}")
    return out


def findings_lines(meta: dict, findings: pd.DataFrame | None, width: int, room: int) -> list[str]:
    """As many whole findings as ``room`` lines hold, and a line counting the rest."""
    if findings is None or findings.empty:
        return []
    path = meta.get("path", "TRACE")
    for n in range(min(len(findings), findings_text.SHOWN), 0, -1):
        lines = findings_text.lines(findings, path, width, shown=n, more="--table findings")
        if len(lines) <= room:
            return lines
    return [f"Findings: {len(findings)} (--table findings)"]


def height(console: Console, part: RenderableType) -> int:
    return len(console.render_lines(part, console.options, pad=False))


def render_first(
    meta: dict,
    tables: dict[str, pd.DataFrame],
    console: Console | None = None,
    *,
    wide: bool = False,
    top: int | None = None,
) -> None:
    """The first screen (module docstring), at most :data:`LINES` lines at 80 columns."""
    from .terminal import head_lines, rich_tables, wide_console

    console = wide_console(console or Console(highlight=False), wide)
    rank = _slowest(tables.get("idle"))
    mfu = mfu_line(meta, rank)
    notices = meta.get("notices", [])
    later = sum(deferred(n) for n in notices)
    said = "lower bound" in mfu  # the MFU line carries the caveat notice: not said twice
    keep = [n for n in notices if not deferred(n) and not (said and n.startswith("MFU counts"))]
    head = [Text.from_markup(s) for s in head_lines(meta, keep=lambda n: n in keep, coverage_ranks=1)]

    def tables_of(name: str, df: pd.DataFrame, heading: str) -> list:
        return rich_tables(name, df, width=console.width, wide=wide, split=False, heading=heading)

    body = sections(meta, tables, rank, tables_of)
    notes = f"{later} more note{'s' if later > 1 else ''} on other tables: --all prints them"
    tail = [Text(notes)] if later else []
    tail += [Text(line) for line in footer(tables, console.width)]
    used = sum(height(console, p) for p in head + body + tail)
    found = findings_lines(meta, tables.get("findings"), console.width, LINES - used)
    for part in head + body:
        console.print(part)
    if found:
        console.print("\n".join(found), markup=False)
    for part in tail:
        console.print(part)
