"""The one error type of the capture layer: a one-line message, exit status 2, no traceback."""

from __future__ import annotations

import click


class CaptureError(click.ClickException):
    """A capture that cannot run as asked. Shown as ``tracekit: error: <message>``."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"tracekit: error: {self.format_message()}", err=True, file=file)
