"""The ``tracekit`` command: ``analyze`` (and ``capture`` when the capture extra is installed)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import click

from ..errors import install_hint
from .cache import cache_group
from .io import TracekitGroup, fail, reported, write_output
from .names import TABLE_NAMES
from .reading import reading_options

#: Phases a --phase filter can name.
PHASES = ["forward", "recompute", "backward", "unattributed", "optimizer"]

FORMATS = ["table", "json", "csv", "md", "parquet", "html"]


@click.group(cls=TracekitGroup)
@click.version_option(package_name="tracekit")
def main() -> None:
    """Where did the time of this LLM step go? Analyse PyTorch profiler traces."""


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="table",
    show_default=True,
    help="table: terminal tables; json: one object, the JSON contract (docs/cli.md); csv: every "
    "table after a '# name' line; md: Markdown; parquet: one file per table (needs --out DIR); "
    "html: a self-contained report with charts (needs --out).",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    help="Write here instead of stdout. csv: a directory gets one NAME.csv per table; parquet: a "
    "directory; html: FILE.html, or a directory (DIR/report.html).",
)
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Terminal: every table (without it, --format table prints a first screen: step time, "
    "phases, top modules, MFU, findings, and the names of the other tables).",
)
@click.option("--per-step", is_flag=True, help="One row per step (a `step` column) instead of the mean.")
@click.option(
    "--table",
    "only",
    multiple=True,
    metavar="NAME",
    type=click.Choice(TABLE_NAMES, case_sensitive=False),
    help="Only this table (repeatable): "
    + ", ".join(TABLE_NAMES)
    + ". Only these are computed: the perf model runs only for gemm_shapes, efficiency or op_shapes"
    " (without them, phases has no gflop/ideal/mfu columns), memory events are read only for the"
    " memory tables, the critical path is walked only for the critical_path tables.",
)
@click.option(
    "--steps", "steps_filter", metavar="LIST", help="Only these steps: ranges and lists, e.g. 3-7 or 2,4,9."
)
@click.option(
    "--phase",
    "phase_filter",
    type=click.Choice(PHASES, case_sensitive=False),
    help="Only this phase, in the tables that can tell phases apart (recompute: the part of "
    "backward that reruns forward modules).",
)
@click.option(
    "--module",
    "module_filter",
    metavar="NAMES",
    help="Only these module categories: a name (case-insensitive; a unique prefix will do, "
    "e.g. rms = RMSNorm), or several separated by commas (bmm0,softmax,bmm1).",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=None,
    help="Rows of long tables (top kernels, ranks) shown in the terminal.",
)
@click.option(
    "--wide",
    is_flag=True,
    help="Terminal: full names instead of their short form (up to 8,000 characters), no "
    "wrapping (wider than the window). Files always keep full names.",
)
@reading_options
@click.option(
    "--no-cache",
    is_flag=True,
    help="Neither read nor write the Parquet cache of "
    "parsed columns (in ~/.cache/tracekit; see `tracekit cache info`).",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Ranks analysed in parallel (local process pool). [default: one per core]",
)
@click.option(
    "--scheduler",
    metavar="ADDRESS",
    callback=lambda ctx, param, value: _scheduler(value),
    help="Run the per-rank work on an existing Dask cluster (e.g. tcp://host:8786; needs tracekit[dask]).",
)
@click.option(
    "--paper",
    is_flag=True,
    help="Add the paper's published values (Llama 2-7B on "
    "A800, Zhang et al.) beside yours as paper_* columns, where a table matches.",
)
@click.option(
    "--full-series",
    is_flag=True,
    help="Files: the memory timeline's every event, instead of at most 400 points per device "
    "(each step's peak kept exact), and the critical path timeline's every piece.",
)
@click.option(
    "--findings",
    "findings_file",
    type=click.Path(exists=True, dir_okay=False),
    callback=lambda ctx, param, value: _findings_file(value),
    help="TOML file of findings rules (thresholds, fixes) replacing the built-in ones key by key.",
)
@click.option("--debug", is_flag=True, help="Show a traceback on unexpected errors.")
def analyze(
    path,
    fmt,
    out,
    show_all,
    per_step,
    only,
    steps_filter,
    phase_filter,
    module_filter,
    top,
    wide,
    reading,
    no_cache,
    jobs,
    scheduler,
    paper,
    full_series,
    findings_file,
    debug,
):
    """Print the paper's tables for a trace file or a directory of per-rank traces.

    Exit status: 0; 1 when files of a directory were skipped (a partial result); 2 on error.
    """
    filters = _filters(steps_filter, phase_filter, module_filter)
    with reported(path, debug):
        only = [n.lower() for n in only]
        analysis = reading.load(
            path,
            cache=not no_cache,
            jobs=jobs,
            scheduler=scheduler,
            tables=only or None,  # a run computes only what its output needs
            full_series=full_series,
            findings=findings_file,
            keep_intervals=per_step or filters.active,  # else the report reads none
        )
        tables, meta = _report(_filtered(analysis, filters), only, per_step, paper, fmt)
        first = fmt == "table" and not (show_all or only or per_step)
        write_output(fmt, meta, tables, out, "render_first" if first else "render", wide=wide, top=top)
    if meta.get("partial"):
        sys.exit(1)


def _findings_file(path: str | None) -> str | None:
    """A --findings file that is not TOML, or names a rule or key tracekit does not know, is a
    usage error."""
    if path is None:
        return None
    from tracekit.analyses.findings import rules

    try:
        rules(path)
    except (ValueError, OSError) as e:  # tomllib.TOMLDecodeError is a ValueError
        raise click.BadParameter(str(e), param_hint="--findings") from None
    return path


def _scheduler(address: str | None) -> str | None:
    """A --scheduler that is not a Dask scheduler's address is a usage error."""
    if address is None:
        return None
    from ..ranks.pool import check_scheduler

    try:
        return check_scheduler(address)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--scheduler") from None


def _filters(steps_filter: str | None, phase_filter: str | None, module_filter: str | None):
    """The --steps/--phase/--module filters; a --steps list that does not parse is a usage error."""
    from ..filters import Filters, parse_steps

    try:
        return Filters(
            step_ranges=parse_steps(steps_filter) if steps_filter else None,
            phase=phase_filter.lower() if phase_filter else None,
            module=module_filter or None,
        )
    except ValueError as e:
        raise click.BadParameter(str(e).removeprefix("--steps "), param_hint="--steps") from None


def _filtered(analysis, filters):
    """``analysis`` under ``filters``; a --module name that matches no category (or several), or
    --steps that hold no step of the run, is a usage error."""
    from ..filters import FilterError

    try:
        return analysis.filtered(filters) if filters.active else analysis
    except FilterError as e:
        raise click.BadParameter(str(e).removeprefix(e.option + " "), param_hint=e.option) from None


def _report(analysis, only: list[str], per_step: bool, paper: bool, fmt: str) -> tuple[Mapping, dict]:
    """(tables, meta) to write: the tables asked for, the aggregation said, the paper's values
    beside them with ``paper``. JSON of many ranks gets its tables one at a time
    (:mod:`tracekit.cli.one_by_one`), counted first: the meta is read after every table was."""
    from . import one_by_one

    if one_by_one.wanted(analysis, fmt, paper):
        names = list(_selected(analysis, only, per_step, names_only=True)) if only else analysis.names()
        tables: Mapping = one_by_one.OneByOne(analysis, names, per_step, whole=not only).count()
    else:
        tables = _selected(analysis, only, per_step)
    meta = analysis.meta
    if per_step:
        meta["aggregation"] = "per step (one row per complete step)"
    if paper:
        tables, meta = _add_paper(dict(tables), meta)
    return tables, meta


def _selected(analysis, only: list[str], per_step: bool, names_only: bool = False) -> dict:
    """The tables asked for (all by default); naming one the run does not have is an error.
    ``names_only``: their names (as keys), not computed."""
    if not only:
        return analysis.tables(per_step=per_step)
    from tracekit.analyses import REGISTRY

    have = analysis.names()
    missing = [n for n in only if n not in have]
    if missing:
        if all(REGISTRY[n].cross_rank for n in missing):
            why = "needs a directory of several ranks"
        elif all(REGISTRY[n].from_manifest for n in missing) and not analysis.filters.active:
            why = "needs a tracekit capture directory (its manifest.json records the steps' measures)"
        else:
            why = "does not apply to this run or its filters"
        raise click.BadParameter(f"{', '.join(missing)}: {why}", param_hint="--table")
    return {n: None if names_only else analysis.table(n, per_step) for n in have if n in only}


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.argument("pattern")
@click.option("--step", type=int, help="Only activities of this step.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Show at most this many chains (largest total time first).",
)
@click.option("--op", "by_op", is_flag=True, help="Match the op whose FLOPs they carry (aten::addmm).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@reading_options
@click.option("--no-cache", is_flag=True, help="Neither read nor write the Parquet cache.")
@click.option("--debug", is_flag=True, help="Show a traceback on unexpected errors.")
def explain(path, pattern, step, limit, by_op, fmt, reading, no_cache, debug):
    """Why is this number what it is: the chain behind the labels of the activities whose
    name matches PATTERN (case-insensitive substring or regex), in one rank: a directory's
    lowest rank, or --rank R (the output names the ranks there). docs/explain.md."""
    from ..explain import run

    with reported(path, debug):
        doc = run(
            path,
            pattern,
            step=step,
            rank=reading.rank,
            limit=limit,
            options=reading.options(cache=not no_cache),
            by_op=by_op,
        )
        if fmt == "json":
            from ..render.finite import strict_json

            click.echo(strict_json(doc))
        else:
            import shutil

            from ..render.explain import fit, lines
            from ..render.safetext import clean

            width = shutil.get_terminal_size((100, 24)).columns
            click.echo("\n".join(fit(clean(ln), width) for ln in lines(doc)))


COMPARE_FORMATS = ["table", "json", "csv", "md", "html"]


@main.command()
@click.argument("a", type=click.Path(path_type=Path))
@click.argument("b", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(COMPARE_FORMATS), default="table", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), help="Write here instead of stdout.")
@reading_options
@click.option(
    "--paper",
    is_flag=True,
    help="Add the paper's Table VIII (naive vs FlashAttention) beside the attention table.",
)
@click.option("--debug", is_flag=True, help="Show a traceback on unexpected errors.")
def compare(a, b, fmt, out, reading, paper, debug):
    """Compare two runs A and B (e.g. eager vs SDPA attention, ZeRO-2 vs ZeRO-3).

    Tables: attention (Table VIII: attention time per phase, improvement of B over A in %),
    and deltas (B - A) per phase, module and kernel category with per-step noise.
    """
    from ..compare import compare as compare_runs
    from ..compare import compare_meta

    runs = []
    for path in (a, b):
        with reported(path, debug):
            runs.append(reading.load(path))
    with reported(f"{a} vs {b}", debug):
        tables = compare_runs(*runs)
        meta = compare_meta(*runs)
        if paper:
            tables, meta = _add_paper(dict(tables), meta)
        write_output(fmt, meta, tables, out, "render_compare")
    if any(r.meta.get("partial") for r in runs):
        sys.exit(1)


def _add_paper(tables: dict, meta: dict) -> tuple[dict, dict]:
    """Tables with the paper's values joined beside them, meta with the citation."""
    from ..paper import citation_meta, with_paper

    return with_paper(tables), {**meta, "paper": citation_meta()}


def _capture() -> click.Command:
    """``tracekit capture``, imported when it is run (the capture layer's imports cost
    ``analyze`` nothing); without the capture extra, a command that explains itself."""
    try:
        from tracekit.capture.cli import capture
    except ImportError:  # capture layer not installed: `tracekit capture` explains itself

        @click.command(context_settings={"ignore_unknown_options": True})
        @click.argument("args", nargs=-1, type=click.UNPROCESSED)
        def missing(args):
            """Capture traces (needs the capture extra, not installed here)."""
            fail(f"capture needs the capture extra: {install_hint('capture')}")

        return missing
    return capture


main.add_lazy("capture", _capture)
main.add_command(cache_group)


if __name__ == "__main__":
    main()
