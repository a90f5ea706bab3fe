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


def test_cached_dtypes_follow_the_storage():
    """The reader's categorical dtypes (cached per set of categories) and state's str dtype are
    made in the storage in force: a dtype cached under the other storage made the API's and
    the reader's frames differ in one process (test_charts then test_native_reader)."""
    import numpy as np

    from tracekit.pipeline.state import str_column
    from tracekit.read.categoricals import _categorical_codes

    codes = np.array([1, 2, 1])
    for storage in ("pyarrow", "python", "pyarrow"):
        with pd.option_context(OPTION, storage):
            made = _categorical_codes(codes, lambda c: "ab"[c - 1])
            assert made.categories.dtype == pd.Series(["x"]).dtype
            assert made.categories.dtype.storage == storage
            col = pd.Series(str_column(np.array(["a", "b"], dtype=object), np.array([0, 1])))
            assert col.dtype == pd.Series(["x"]).dtype


@pytest.mark.parametrize("how", ["intervals", "filtered"])
def test_a_lazy_rank_analysed_again_runs_in_the_setting(tmp_path, monkeypatch, how):
    """A rank whose intervals were not sent back (a pool, ``keep_intervals=False``) is
    analysed again when they are read: through ``Analysis.ranks[r].intervals`` or
    ``Analysis.filtered``, neither of which is an API method wrapped in the setting, so
    ``analyse_parts`` itself keeps it (its ``@with_python_strings`` is not redundant)."""
    from tracekit.filters import Filters
    from tracekit.ranks import analyse

    src = Path(__file__).resolve().parents[2] / "sample_traces" / "tiny-zero2-2ranks"
    d = shutil.copytree(src, tmp_path / "two")
    a = analysis.load(d, cache=False, jobs=2, keep_intervals=False)
    seen, real = [], analyse.run

    def spy(*args, **kw):
        seen.append(pd.get_option(OPTION))
        return real(*args, **kw)

    monkeypatch.setattr(analyse, "run", spy)
    with pd.option_context(OPTION, "pyarrow"):  # the caller's own setting
        if how == "intervals":
            assert len(next(iter(a.ranks.values())).intervals)
        else:
            a.filtered(Filters(phase="forward"))
    assert seen and set(seen) == {"python"}
