"""JSON output written in pieces (render/formats.json_pieces) is json.dumps' text, character for
character: indentation, separators, empty tables and meta, chunk boundaries, odd names."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tracekit.render import formats


def _whole(meta, tables) -> str:
    doc = {"meta": meta, "tables": {k: formats.records(v) for k, v in tables.items()}}
    return json.dumps(doc, indent=2, default=str, allow_nan=False)


@pytest.mark.parametrize("chunk", [1, 2, 3, 4096])
def test_pieces_are_the_whole_text(monkeypatch, chunk):
    monkeypatch.setattr(formats, "CHUNK_ROWS", chunk)
    n = 7
    tables = {
        "a": pd.DataFrame(
            {"step": np.arange(n), "name": [f'k"{i}\\n\u00e9' for i in range(n)], "ms": np.linspace(0, 1, n)}
        ),
        "empty": pd.DataFrame(columns=["x", "y"]),
        'we"ird\nname': pd.DataFrame({"v": [1.5, np.nan]}),
        "no columns": pd.DataFrame(index=range(2)),
    }
    meta = {"warnings": [], "nested": {"list": [1, {"x": None}], "empty": {}, "e": []}, "s": "a\nb"}
    assert "".join(formats.json_pieces(meta, tables)) == _whole(meta, tables)
    assert formats.to_json(meta, tables) == _whole(meta, tables)


def test_no_tables_and_empty_meta():
    for meta, tables in (({}, {}), ({"a": 1}, {})):
        assert "".join(formats.json_pieces(meta, tables)) == _whole(meta, tables)


def test_a_piece_holds_at_most_a_chunk_of_rows(monkeypatch):
    monkeypatch.setattr(formats, "CHUNK_ROWS", 10)
    df = pd.DataFrame({"i": np.arange(95)})
    pieces = list(formats.json_pieces({}, {"t": df}))
    assert max(p.count('"i"') for p in pieces) == 10
    assert json.loads("".join(pieces))["tables"]["t"] == [{"i": i} for i in range(95)]
