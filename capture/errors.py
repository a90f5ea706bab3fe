"""The one error type of the capture layer: a one-line message, exit status 2, no traceback."""

from __future__ import annotations

import click

#: Why a capture cannot run, as ``tracekit capture sweep`` reports it (``CaptureError.kind``).
NO_GPU = "no-gpu"
MISSING_DEPENDENCY = "missing-dependency"
UNSUPPORTED = "unsupported"
OOM = "oom"
FAILED = "failed"


class CaptureError(click.ClickException):
    """A capture that cannot run as asked. Shown as ``tracekit: error: <message>``.

    ``kind`` says why, for a sweep's row: :data:`NO_GPU`, :data:`MISSING_DEPENDENCY`,
    :data:`UNSUPPORTED` (a combination that does not exist), :data:`OOM`, :data:`FAILED`
    (the run itself failed), or ``error`` (a usage mistake)."""

    exit_code = 2

    def __init__(self, message: str, kind: str = "error") -> None:
        super().__init__(message)
        self.kind = kind

    def show(self, file=None) -> None:
        click.echo(f"tracekit: error: {self.format_message()}", err=True, file=file)
