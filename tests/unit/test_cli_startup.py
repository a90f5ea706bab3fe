"""``tracekit analyze`` imports only what it uses: the capture layer (and the HTML report's
plotting) are imported when their command or format runs, not at start-up."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from tracekit.cli import main

NOT_AT_STARTUP = ("tracekit.capture", "plotly", "rich", "pyarrow.parquet", "re2")


def test_importing_the_cli_leaves_out_the_capture_layer_and_renderers():
    code = (
        "import sys, tracekit.cli\n"
        f"print(sorted(m for m in sys.modules if m.startswith({NOT_AT_STARTUP!r})))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_the_lazy_capture_command_is_listed_and_runs():
    listed = CliRunner().invoke(main, ["--help"])
    assert listed.exit_code == 0 and "capture" in listed.output.split("Commands:")[1]
    got = CliRunner().invoke(main, ["capture", "--help"])
    assert got.exit_code == 0 and "Capture" in got.output
