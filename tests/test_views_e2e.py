"""Every view and format of ``tracekit analyze`` on every real trace (../shared), every sample
and a multi-rank directory: no traceback, tables that fit 80 columns, files that parse.

One load per trace; each view reuses it through the CLI's own code (``commands._selected``, ``cli_io.write_output``).
Nothing is written beside the traces (they are read with the cache off; outputs go to tmp_path).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from shared_traces import param, shared_traces

import tracekit
from tracekit.cli import commands
from tracekit.cli import io as cli_io
from tracekit.filters import Filters

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"


def _sources() -> list:
    found = list(shared_traces()) + sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    return [param(p, p.name[:50]) for p in found]


def _views(a) -> list[tuple[str, object, list[str], bool]]:
    """(label, analysis, tables, per_step) for each view a user can ask for."""
    first = next((s[0] for s in a.meta["complete_steps"].values() if s), None)
    views = [("all", a, [], False), ("per-step", a, [], True)]
    views += [("steps", a.filtered(Filters(steps=(first,))), [], False)] if first is not None else []
    views += [
        ("phase", a.filtered(Filters(phase="backward")), [], False),
        ("module", a.filtered(Filters(module="attention")), ["top_kernels", "layers"], False),
    ]
    return views


@pytest.mark.parametrize("src", _sources())
def test_every_view_and_format(src, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()
    if src.is_dir():  # a sample run directory: read from a copy
        shutil.copytree(src, tmp_path / src.name)
        src = tmp_path / src.name
    a = tracekit.load(src, cache=False, jobs=1)
    for label, view, only, per_step in _views(a):
        tables = commands._selected(view, only, per_step)
        meta = view.meta
        out = tmp_path / label
        out.mkdir()
        cli_io.write_output("table", meta, tables, None, "render")
        narrow = capsys.readouterr().out
        assert max(len(line) for line in narrow.splitlines()) <= 80, label
        rows = [line for line in narrow.splitlines() if line.startswith(("┏", "┃", "│", "└"))]
        assert all(line.endswith(("┓", "┃", "│", "┘")) for line in rows), label  # none cut
        cli_io.write_output("table", meta, tables, None, "render", wide=True, top=5)
        assert "Traceback" not in capsys.readouterr().out
        cli_io.write_output("json", meta, tables, out / "t.json", "render")
        doc = json.loads((out / "t.json").read_text())
        assert set(doc["tables"]) == set(tables)
        for name, rows in doc["tables"].items():
            # a count is whole per step; a mean keeps its fraction (count x mean = total); the
            # Idle row has none
            kinds = (int,) if per_step else (int, float)
            assert all(isinstance(r.get("count", 0), kinds) or r.get("count", 0) is None for r in rows), name
        cli_io.write_output("csv", meta, tables, out / "csv", "render")
        cli_io.write_output("md", meta, tables, out / "t.md", "render")
        assert (out / "t.md").read_text().startswith("# tracekit: ")
        cli_io.write_output("parquet", meta, tables, out / "pq", "render")
        for name in tables:
            pd.read_parquet(out / "pq" / f"{name}.parquet")
        cli_io.write_output("html", meta, tables, out / "r.html", "render")
        assert "Inference timeline" not in (out / "r.html").read_text()
    if a.multi_rank:
        assert {"ranks", "rank_summary"} <= set(commands._selected(a, [], False))
