"""The analysis never imports torch, deepspeed or transformers: a person analysing a trace a
colleague sent installs tracekit alone."""

from __future__ import annotations

import subprocess
import sys

from tracekit.testing import llama_training, write_trace


def test_analysis_imports_no_torch(tmp_path):
    trace, _ = llama_training(n_layers=1, n_steps=1)
    path = write_trace(tmp_path / "t.pt.trace.json.gz", trace)
    code = (
        "import sys, tracekit, tracekit.cli\n"
        f"tracekit.load({str(path)!r}).tables()\n"
        "heavy = [m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_import_and_machine_formats_import_no_rich_or_plotly(tmp_path):
    """``import tracekit`` (every pool worker pays it) and ``tracekit.cli`` load neither rich nor
    plotly, and ``analyze --format json`` never loads rich: only terminal tables print with it."""
    trace, _ = llama_training(n_layers=1, n_steps=2)
    path = write_trace(tmp_path / "t.pt.trace.json.gz", trace)
    out = tmp_path / "out.json"
    code = (
        "import sys, tracekit, tracekit.cli\n"
        "loaded = [m for m in ('rich', 'plotly') if m in sys.modules]\n"
        "assert not loaded, ('on import', loaded)\n"
        "tracekit.cli.main(['analyze', "
        f"{str(path)!r}, '--format', 'json', '--no-cache', '--out', {str(out)!r}], standalone_mode=False)\n"
        "loaded = [m for m in ('rich', 'plotly') if m in sys.modules]\n"
        "assert not loaded, ('after --format json', loaded)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0


def test_cli_help_and_version_import_no_pandas_numpy_or_pyarrow():
    """``import tracekit``, ``tracekit --help`` and ``--version`` import none of the analysis's
    libraries (pandas alone is ~90% of the instructions of importing the analysis): they are
    imported when ``tracekit.load`` (or a command that reads a trace) is first used."""
    code = (
        "import sys, tracekit, tracekit.cli\n"
        "for args in (['--help'], ['--version'], ['analyze', '--help']):\n"
        "    try:\n"
        "        tracekit.cli.main(args, standalone_mode=False)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "heavy = [m for m in ('pandas', 'numpy', 'pyarrow', 'msgspec') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "tracekit.load\n"
        "assert 'pandas' in sys.modules\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "--table NAME" in r.stdout and "layer_spread" in r.stdout


def test_cli_table_names_are_the_registry():
    """The CLI's ``--table`` names (written out so the CLI need not import the analyses) are
    the registry's, in report order."""
    from tracekit.analyses import REGISTRY

    from tracekit.cli.commands import TABLE_NAMES

    assert list(REGISTRY) == TABLE_NAMES
