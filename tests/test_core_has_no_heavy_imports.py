"""The analysis never imports torch, deepspeed or transformers: a person analysing a trace a
colleague sent installs tracekit alone."""

from __future__ import annotations

import subprocess
import sys

from synthetic import make_trace, write_trace


def test_analysis_imports_no_torch(tmp_path):
    trace, _ = make_trace(n_layers=1, n_steps=1)
    path = write_trace(tmp_path / "t.pt.trace.json.gz", trace)
    code = (
        "import sys, tracekit, tracekit.cli\n"
        f"tracekit.load({str(path)!r}).tables()\n"
        "heavy = [m for m in ('torch', 'deepspeed', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
