"""tracekit's pandas setting (tracekit/strings.py): ``str`` columns in Python storage while
tracekit runs, the caller's setting untouched, and the same tables either way."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from tracekit import analysis, strings
from tracekit.strings import OPTION, python_strings


@pytest.fixture
def sample(tmp_path):
    src = Path(__file__).resolve().parents[2] / "sample_traces" / "tiny-train-1rank"
    dst = tmp_path / "tiny"
    shutil.copytree(src, dst)
    return dst


def test_the_callers_option_is_left_as_it_was(sample):
    before = pd.get_option(OPTION)
    a = analysis.load(sample, cache=False)
    a.tables()
    assert pd.get_option(OPTION) == before
    with python_strings():
        assert pd.get_option(OPTION) == "python"
        with python_strings():  # re-entrant
            assert pd.get_option(OPTION) == "python"
        assert pd.get_option(OPTION) == "python"
    assert pd.get_option(OPTION) == before


def test_tables_are_the_same_with_either_storage(sample, monkeypatch):
    ours = analysis.load(sample, cache=False).tables()
    monkeypatch.setattr(strings, "STORAGE", "pyarrow")  # pandas 3's default, throughout
    theirs = analysis.load(sample, cache=False).tables()
    assert set(ours) == set(theirs)
    for name, df in ours.items():
        other = theirs[name]
        for col in df.columns:
            assert (df[col].dtype == "str") == (other[col].dtype == "str"), (name, col)
        pd.testing.assert_frame_equal(_plain(df), _plain(other), obj=name)


def _plain(df: pd.DataFrame) -> pd.DataFrame:
    """Text and categorical columns as Python objects (the storage aside, the same values)."""
    out = df.copy()
    out.columns = list(out.columns)
    for col in out.columns:
        if out[col].dtype == "str" or isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object)
    return out
