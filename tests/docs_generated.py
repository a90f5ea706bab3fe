"""The parts of docs/cli.md written from the code, not by hand (issue 26: the docs had drifted).

A generated section sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``
and is rewritten by ``python tests/docs_cli.py --update``; tests/test_docs_cli.py fails when
one differs from what the code gives today:

* ``analyze-options``: every option of ``tracekit analyze``, its default and its help (the
  same text as ``--help``: one source for both);
* ``tables``: every registered table, its key and value columns with their units, and how
  each ratio column is derived (the registry's :class:`~tracekit.analyses._registry.Ratio`);
* ``values``: the values the label columns take (phases, module rows, kernel and
  communication categories, blocks, stages, copy kinds).
"""

from __future__ import annotations

import re

import click

MARK = re.compile(r"(<!-- generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def analyze_options() -> str:
    from tracekit.cli.commands import analyze

    ctx = click.Context(analyze)
    rows = ["| option | default | meaning |", "|---|---|---|"]
    for p in analyze.params:
        if not isinstance(p, click.Option):
            continue
        arg = f" {p.metavar}" if p.metavar else ""
        names = ", ".join(f"`{o}{arg}`" for o in [*p.opts, *p.secondary_opts])
        value = p.get_default(ctx, call=False)
        unset = value is None or value == () or "UNSET" in repr(value)  # click 8.3: a sentinel
        default = "" if p.is_flag or unset else f"`{value}`"
        meaning = p.help or ""
        if isinstance(p.type, click.Choice) and p.name != "only":
            meaning += (
                (" " if meaning else "") + "One of: " + ", ".join(f"`{c}`" for c in p.type.choices) + "."
            )
        rows.append(f"| {names} | {default} | {_cell(meaning)} |")
    return "\n".join(rows) + "\n"


def _ratio(r) -> str:
    from tracekit.analyses._registry import PHASE_WALL, STEP_WINDOW

    if r.of in (STEP_WINDOW, PHASE_WALL):
        of = f"the {r.of}"
    elif r.within is not None:
        by = " and ".join(f"`{w}`" for w in r.within)
        of = f"the total of `{r.of}` over the step's rows" + (f" of the same {by}" if by else "")
    else:
        of = f"`{r.of}`"
    return f"`{r.num}` / {of} x {r.scale:g}"


def tables() -> str:
    from tracekit.analyses import REGISTRY
    from tracekit.analyses._registry import INTEGER_UNITS, PER_STEP, PRESENT_MEAN

    out = ["| table | keys | column | unit | value |", "|---|---|---|---|---|"]
    for name, spec in REGISTRY.items():
        keys = ", ".join(f"`{k}`" for k in spec.keys)
        for i, (col, unit) in enumerate(spec.values.items()):
            if col in spec.ratios:
                how = "ratio: " + _ratio(spec.ratios[col])
            elif col in spec.derived:
                how = "derived after the mean: " + spec.derived[col]
            elif getattr(spec, "from_manifest", None) is not None:
                how = {
                    "/s": "ratio of totals: the count over the steps' time",
                    "MB": "peak over the steps",
                }.get(unit, "from the capture manifest, mean per step")
            elif "_p50" in col or "_p95" in col:  # percentiles (launches) do not add
                how = "per step (a percentile); mean over the steps that hold the row"
            elif spec.aggregate == PRESENT_MEAN:
                how = "per step, mean over the steps that hold the row"
            elif spec.aggregate == PER_STEP:
                how = "per step"
            elif unit in INTEGER_UNITS - {"index"} and not spec.cross_rank and spec.source is None:
                how = "sum per step; a mean keeps its fraction"
            elif unit == "index":
                how = "index"
            elif unit == "%":
                how = "derived after the mean, from the columns beside it"
            else:
                how = (
                    "per rank"
                    if spec.cross_rank
                    else ("derived from " + spec.source if spec.source else "sum per step")
                )
            head = (f"`{name}`", keys) if i == 0 else ("", "")
            out.append(f"| {head[0]} | {head[1]} | `{col}` | {unit} | {how} |")
    return "\n".join(out) + "\n"


def values() -> str:
    from tracekit.analyses._common import WINDOW_PHASES
    from tracekit.analyses._stages import ORDER
    from tracekit.analyses.kernels import GROUPS
    from tracekit.analyses.memcpy import KINDS
    from tracekit.analyses.modules import ROWS
    from tracekit.analyses.timeline import BLOCKS

    from tracekit.cli.commands import PHASES
    from tracekit.pipeline.taxonomy import COMM_CATEGORIES, MODULE_CATEGORIES

    def words(xs) -> str:
        return ", ".join(f"`{x}`" for x in xs)

    rows = [
        ("`phase`", "phases, modules, gemm, comm, top_kernels", words(WINDOW_PHASES)),
        ("`phase`", "layers (and `--phase`)", words(PHASES)),
        ("`module`", "modules", words(ROWS)),
        ("`module`", "top_kernels", words([*MODULE_CATEGORIES, "Other"])),
        ("`group`", "kernels", words(GROUPS)),
        *[("`category`", f"kernels, group `{g}`", words(c)) for g, c in GROUPS.items()],
        ("`collective`", "comm", words(COMM_CATEGORIES)),
        ("`kind`", "memcpy", words(KINDS)),
        ("`block`", "timeline", words(BLOCKS)),
        ("`stage`", "kernels, timeline, layers (inference traces)", words(ORDER)),
    ]
    out = ["| column | tables | values |", "|---|---|---|"]
    out += [f"| {c} | {t} | {v} |" for c, t, v in rows]
    return "\n".join(out) + "\n"


SECTIONS = {"analyze-options": analyze_options, "tables": tables, "values": values}


def regenerate(text: str) -> str:
    """``text`` with every generated section as the code gives it today."""
    return MARK.sub(lambda m: m.group(1) + SECTIONS[m.group(2)]() + m.group(4), text)


def sections(text: str) -> dict[str, str]:
    return {m.group(2): m.group(3) for m in MARK.finditer(text)}
