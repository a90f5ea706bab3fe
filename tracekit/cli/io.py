"""The command line's boundary: the one error handler every command runs in, and how outputs
are written (what is written is the renderers' business, :mod:`tracekit.render`).

* Every message is one line on stderr, ``tracekit: error: ...`` (exit 2), ``tracekit: warning:
  ...``, or ``tracekit: interrupted`` (exit 130), with no control or bidi characters
  (:mod:`tracekit.render.safetext`); usage errors too, instead of click's four-line block.
* Every file goes through :mod:`tracekit.safewrite` (temporary name, fsync, rename; no links).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn

import click

from ..errors import RunError, TraceError
from ..render.safetext import bounded, clean_obj, clean_tables


class TracekitGroup(click.Group):
    """Every command runs inside one error handler: a usage error, a bad trace, an output that
    cannot be written, an unforeseen failure or Ctrl-C is one line on stderr, never a traceback
    (``--debug`` shows the traceback of an unforeseen failure).

    A command added with :meth:`add_lazy` is imported only when it is run (or help lists it):
    its imports cost the other commands nothing."""

    def __init__(self, *args, **kw) -> None:
        super().__init__(*args, **kw)
        self._lazy: dict[str, Callable[[], click.Command]] = {}

    def add_lazy(self, name: str, load: Callable[[], click.Command]) -> None:
        """Command ``name``, given by ``load()`` the first time it is looked up."""
        self._lazy[name] = load

    def list_commands(self, ctx) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._lazy})

    def get_command(self, ctx, cmd_name: str):
        if cmd_name in self._lazy:
            self.add_command(self._lazy.pop(cmd_name)(), cmd_name)
        return super().get_command(ctx, cmd_name)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            with sigterm_as_interrupt():
                rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except click.ClickException as e:  # usage errors: one line, not click's block
            _line("error", e.format_message())
            sys.exit(e.exit_code)
        except click.exceptions.Abort as e:
            interrupted(isinstance(e.__context__, Terminated))
        except Terminated:
            interrupted(True)
        sys.exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        try:
            with warnings.catch_warnings():  # numpy's RuntimeWarnings and the like: one line
                warnings.showwarning = _show_warning
                return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `tracekit analyze t.json | head`: the reader left, so do we
            sys.stderr.close()
            sys.exit(1)
        except KeyboardInterrupt as e:
            interrupted(isinstance(e, Terminated))
        except (TraceError, RunError) as e:
            fail(str(e))
        except OSError as e:  # writing --out (a missing folder, a file in the way): one line
            where = f"{e.filename}: " if e.filename else ""
            fail(f"{where}cannot write ({e.strerror or e})")
        except MemoryError:
            fail("out of memory")
        except Exception as e:
            if ctx.meta.get("tracekit.debug"):
                raise
            fail(
                f"unexpected failure ({e.__class__.__name__}: {str(e)[:200]}); rerun with --debug for details"
            )


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    _line("warning", f"{category.__name__}: {message}")


def _line(kind: str, message: str) -> None:
    """``tracekit: <kind>: message`` on stderr: one line, no control or bidi characters."""
    click.echo(f"tracekit: {kind}: {bounded(message, 2000)}", err=True)


def fail(message: str) -> NoReturn:
    _line("error", message)
    sys.exit(2)


def warn(message: str) -> None:
    _line("warning", message)


def interrupted(terminated: bool = False) -> None:
    """Ctrl-C (exit status 130) or SIGTERM (143), after the cleanup they both run."""
    click.echo("tracekit: terminated" if terminated else "tracekit: interrupted", err=True)
    sys.exit(143 if terminated else 130)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``kill``, Kubernetes and CI send), raised where the program is, as Ctrl-C's
    KeyboardInterrupt is: the same cleanup runs (temporary outputs removed, pools terminated)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def _sigterm_default_in_child() -> None:
    """In a process forked while :func:`sigterm_as_interrupt` holds (a pool worker, a forked
    reader), SIGTERM is the default again, and unblocked, before anything else runs there: a
    worker that the pool's ``terminate`` reaches while it still starts up ends at once, rather
    than raising in its start-up or holding the signal until its initializer runs."""
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sigterm_default_in_child)


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while the block runs (in the main thread; the
    previous handler is put back after)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def reported(path, debug: bool) -> Iterator[None]:
    """Turn every unforeseen failure while analysing ``path`` into one line and exit status 2
    (bad traces, usage errors, Ctrl-C and write errors go to the group's handler)."""
    click.get_current_context().meta["tracekit.debug"] = debug
    try:
        yield
    except (TraceError, RunError, click.ClickException, OSError):
        raise
    except MemoryError:
        fail(f"{path}: out of memory while analysing")
    except Exception as e:  # a trace we did not foresee: one line, never a traceback
        if debug:
            raise
        fail(
            f"{path}: could not analyse ({e.__class__.__name__}: "
            f"{str(e)[:200]}); rerun with --debug for details"
        )


def is_dir_out(out: Path) -> bool:
    """``--out`` names a directory: an existing one (not a link to one), or a new name with no
    suffix."""
    if out.is_symlink():
        return False
    return out.is_dir() or (not out.suffix and not out.exists())


def emit(text: str, out: Path | None) -> None:
    """``text`` to ``out`` (whole or not at all), or to stdout."""
    if out:
        from ..safewrite import write_text

        write_text(out, text)
    else:
        click.echo(text)


def emit_pieces(pieces: Iterable[str], out: Path | None) -> None:
    """:func:`emit` of ``"".join(pieces)``, written piece by piece (the whole text is never
    held at once; a file still appears whole or not at all)."""
    if out:
        from ..safewrite import atomic_file

        with atomic_file(out) as f:
            for piece in pieces:
                f.write(piece.encode("utf-8", errors="replace"))
    else:
        for piece in pieces:
            click.echo(piece, nl=False)
        click.echo("")


def write_csv_members(out: Path, texts: dict[str, str]) -> None:
    from ..safewrite import write_members

    def member(text: str) -> Callable:
        return lambda f: f.write(text.encode("utf-8"))

    write_members(out, {f"{k}.csv": member(v) for k, v in texts.items()})


def html_target(out: Path) -> Path:
    """``--format html --out DIR`` writes ``DIR/report.html``."""
    if is_dir_out(out):
        out.mkdir(parents=True, exist_ok=True)
        return out / "report.html"
    return out


def write_table(render: Callable, meta: dict, tables: dict, out: Path | None, **kw) -> None:
    """Rich tables, highlighting off (rich's highlighter is quadratic on long names)."""
    from rich.console import Console

    if not out:
        render(meta, tables, Console(highlight=False), **kw)
        return
    from io import StringIO

    from ..safewrite import write_text

    buf = StringIO()
    render(meta, tables, Console(file=buf, width=140, highlight=False), **kw)
    write_text(out, buf.getvalue())


#: Shortest time between two redraws of the progress bar.
REDRAW_SECONDS = 0.1


def load_with_progress(load: Callable, path, **kw):
    """``load(path)`` with a progress bar on stderr when stderr is a terminal: per file, and
    per rank file done in a directory."""
    if not sys.stderr.isatty():
        return load(path, **kw)
    from rich.console import Console
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..progress import listening
    from ..read.reader import trace_files

    p = Path(path)
    try:
        files = trace_files(p) if p.is_dir() else [p]
        total = sum(f.stat().st_size for f in files)
    except (TraceError, OSError):
        return load(path, **kw)  # let load say what is wrong
    label = escape(bounded(p.name, 80))  # a file name is not rich markup
    # Redrawn from the progress events, not by rich's refresh thread: with another thread
    # running, a process may not fork, and one big file would be decoded and tabulated on
    # one core (tracekit.read.parallel, tracekit.forked).
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True, highlight=False),
        transient=True,
        auto_refresh=False,
    ) as prog:
        n = len(files)
        task = prog.add_task(
            f"analysing {label} ({total / 2**20:,.1f} MiB, {n} file{'s' if n != 1 else ''})", total=n
        )
        done, drawn = [0], [0.0]

        def on_progress(event: str, value: float) -> None:
            if event == "done":
                done[0] += 1
                prog.update(task, completed=done[0])
            else:
                prog.update(task, completed=done[0] + value)
            if time.monotonic() - drawn[0] >= REDRAW_SECONDS:
                prog.refresh()
                drawn[0] = time.monotonic()

        with listening(on_progress):
            return load(path, **kw)


def write_output(
    fmt: str,
    meta: dict,
    tables: Mapping,
    out: Path | None,
    terminal: str,
    *,
    wide: bool = False,
    top: int | None = None,
) -> None:
    """Warnings to stderr, then the tables in ``fmt`` to ``out`` (or stdout).

    The output boundary: every name is cleaned here, once (:mod:`tracekit.render.safetext`; JSON keeps
    names exact, its writer escapes them), and every file goes through :mod:`tracekit.safewrite`.
    """
    from ..pipeline.checks import warning_lines
    from ..render import formats
    from ..render.finite import finite_output

    meta, tables = finite_output(meta, tables)  # never inf in any format (render/finite.py)
    for line in warning_lines(meta["warnings"]):
        warn(line)
    if fmt == "json":  # tables computed when read stay so (tracekit.cli.one_by_one)
        emit_pieces(formats.json_pieces(meta, tables), out)
        return
    meta = clean_obj(meta)
    tables = clean_tables(dict(tables))  # bounded where shown, after shortening (render.common)
    if fmt == "table":  # rich is imported for terminal tables only
        from ..render import first_screen
        from ..render import terminal as term

        render = first_screen.render_first if terminal == "render_first" else getattr(term, terminal)
        write_table(render, meta, tables, out, wide=wide, top=top)
    elif fmt == "md":
        emit(formats.markdown_report(meta, tables, top=top), out)
    elif fmt == "csv" and out and is_dir_out(out):
        write_csv_members(out, {k: formats.to_csv(v) for k, v in tables.items()})
    elif fmt == "csv":
        emit("\n".join(f"# {k}\n{formats.to_csv(v)}" for k, v in tables.items()), out)
    elif fmt == "parquet":
        if not out:
            fail("--format parquet needs --out DIR")
        formats.write_parquet(tables, out)
    elif fmt == "html":
        from ..render.html import write_report

        if not out:
            fail("--format html needs --out FILE.html (or --out DIR for DIR/report.html)")
        write_report(meta, tables, html_target(out))
