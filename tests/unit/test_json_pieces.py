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


def test_every_kind_of_column_is_json_dumps_text():
    """The column-at-a-time encoder (render/json_rows) against json.dumps of records(), on
    every dtype a table holds, the general path's cells (a list, a timestamp) and odd floats."""
    n = 6
    floats = [2.675, 1e-7, 0.1 + 0.2, -0.0, 1.0000005, 123456789.1234565]
    df = pd.DataFrame(
        {
            "f": floats,
            "f32": np.array(floats, dtype=np.float32),
            "odd": [np.nan, np.inf, -np.inf, 5e-7, 1e300, -2.5],
            "i": np.array([0, -1, 2**62, 3, 4, 5], dtype=np.int64),
            "u": np.array([2**64 - 1, 0, 1, 2, 3, 4], dtype=np.uint64),
            "b": [True, False, True, True, False, False],
            "cat": pd.Categorical(["a", "b", "a", "é", "a", "b"]),
            "s": pd.array(["x", None, 'ü\n"', "", "x", "y"], dtype="str"),
            "I": pd.array([1, None, 3, 4, 5, 6], dtype="Int64"),
            "F": pd.array([1.5, None, 3.25, 4.0, 5.0, 6.0], dtype="Float64"),
            "B": pd.array([True, None, False, True, True, True], dtype="boolean"),
            "obj": [None, 1, 2.5, "t", True, np.int64(7)],
        }
    )
    assert len(df) == n
    meta: dict = {}
    assert "".join(formats.json_pieces(meta, {"t": df})) == _whole(meta, {"t": df})
    general = df.assign(cell=[[1, 2], {"a": 1}, None, pd.Timestamp(0), "x", 1])
    assert "".join(formats.json_pieces(meta, {"t": general})) == _whole(meta, {"t": general})
    named = pd.DataFrame({1: [1.5], "x": ["y"]})
    assert "".join(formats.json_pieces(meta, {"t": named})) == _whole(meta, {"t": named})
