"""Names tested and taken through their codes equal the per-row string results."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import Trace, as_str, categorical_take, codes_of, take


def _events(names: pd.Series) -> pd.DataFrame:
    return pd.DataFrame({"name": names})


def test_codes_of_categorical() -> None:
    col = pd.Series(pd.Categorical(["b", "", "a", "b"]))
    codes, uniq = codes_of(col)
    assert list(uniq[codes]) == list(as_str(col)) == ["b", "", "a", "b"]
    # a missing name reads "" (the reader stores an event with no name so)
    codes, uniq = codes_of(pd.Series(pd.Categorical(["b", None])))
    assert list(uniq[codes]) == ["b", ""]


def test_codes_of_plain_strings() -> None:
    col = pd.Series(["x", None, "x"], dtype=object)
    codes, uniq = codes_of(col)
    assert list(uniq[codes]) == ["x", "", "x"]


def test_categorical_take_equals_categorical_of_taken_strings() -> None:
    uniq = np.array(["b", "", "a", "zz", "unused"], dtype=object)
    codes = np.array([0, 1, 2, 0, 3, 2])
    for idx, default in (([0, -1, 2, 5, 1], ""), ([-1, -1], "q"), ([4, 4, 0], "b")):
        got = categorical_take(uniq, codes, np.array(idx), default)
        want = pd.Categorical(take(uniq[codes], np.array(idx), default))
        assert list(got) == list(want)
        assert list(got.categories) == list(want.categories)  # only values present, sorted
    assert len(categorical_take(uniq, codes, np.array([], np.int64), "")) == 0


def test_name_test_and_name_categorical() -> None:
    names = pd.Series(pd.Categorical(["ProfilerStep#1", "aten::mm", "ProfilerStep#2", "aten::mm"]))
    t = Trace(path="x", events=_events(names))
    assert list(t.name_test(lambda s: s.str.startswith("ProfilerStep#"))) == [True, False, True, False]
    assert list(t.names) == list(names.astype(str))
    cat = t.name_categorical(np.array([1, -1, 3]))
    assert list(cat) == ["aten::mm", "", "aten::mm"]
    assert list(cat.categories) == ["", "aten::mm"]
