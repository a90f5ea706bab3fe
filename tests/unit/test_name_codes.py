"""Names tested and taken through their codes equal the per-row string results."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import (
    Coded,
    Trace,
    as_str,
    categorical_take,
    codes_of,
    distinct_rows,
    str_column,
    str_test,
    take,
)


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


def test_str_test_equals_the_test_of_as_str() -> None:
    cols = [
        pd.Series(pd.Categorical(["time", "none", "launch", "time"])),
        pd.Series(pd.Categorical(["time", None, "nan"])),  # missing: as_str reads "nan"
        pd.Series(pd.Categorical([None, None])),
        pd.Series(["a", "time", None], dtype=object),
        pd.Series(pd.Categorical([], categories=["x"])),
    ]
    for col in cols:
        for test in (lambda s: s == "time", lambda s: s.isin(("nan", "none")), lambda s: s != ""):
            want = np.asarray(test(pd.Series(as_str(col), dtype=object)), bool)
            got = str_test(col, test)
            assert got.dtype == bool and got.tolist() == want.tolist()


def test_distinct_rows_numbers_combinations_by_first_appearance() -> None:
    a = np.array([3, 1, 3, 1, 3, -7])
    b = np.array(["x", "y", "x", "x", "x", "y"], dtype=object)
    key, first = distinct_rows(a, b)
    assert key.tolist() == [0, 1, 0, 2, 0, 3]
    assert first.tolist() == [0, 1, 3, 5]
    key, first = distinct_rows(np.zeros(0, np.int64))
    assert key.size == 0 and first.size == 0


def _in_runs(rng: np.random.Generator, values: np.ndarray, n: int) -> np.ndarray:
    picked = rng.choice(values, size=max(n // 20, 1))
    return np.resize(np.repeat(picked, rng.integers(1, 60, len(picked))), n)


def test_distinct_rows_over_runs_equal_the_every_row_numbering() -> None:
    """Rows in runs are numbered from each run's first row (:func:`distinct_rows`): the same
    keys, first rows and dtypes as numbering every row, for ints, floats with NaN and -0.0,
    strings with None, bools, and columns with no runs at all."""
    from tracekit.pipeline.state import _distinct_rows

    rng = np.random.default_rng(7)
    kinds = [
        np.array([3, 7, 10**12, -5]),
        np.array([0.0, -0.0, np.nan, 2.5]),
        np.array(["a", "b", None, "c"], dtype=object),
        np.array([True, False]),
        np.array([0, 1, 2, 3]),
    ]
    ran = 0
    for n in (4096, 5000, 30_000):
        for _ in range(40):
            cols = [_in_runs(rng, kinds[i], n) for i in rng.integers(0, len(kinds), rng.integers(1, 4))]
            if rng.random() < 0.2:
                cols.append(rng.integers(0, 50, n))  # no runs: every row is numbered
            key, first = distinct_rows(*cols)
            want_key, want_first = _distinct_rows(cols)
            assert key.dtype == want_key.dtype and first.dtype == want_first.dtype
            assert np.array_equal(key, want_key) and np.array_equal(first, want_first)
            ran += 1
    assert ran == 120


def test_coded_labels_equal_their_object_array_forms() -> None:
    col = pd.Series(pd.Categorical(["Other", "MLP", None, "Other"]))
    idx = np.array([0, 3, -1, 1, 2])
    coded = Coded.taken(col, idx, "none")
    strings = take(codes_of(col)[1][codes_of(col)[0]], idx, "none")
    assert list(coded.values[coded.codes]) == list(strings) == ["Other", "Other", "none", "MLP", ""]
    assert coded.is_("Other").tolist() == (strings == "Other").tolist()
    mask = np.array([True, False, False, True, False])
    moved = coded.where(mask, "RoPE")  # a value may now appear twice in values
    moved = moved.where(~mask, "Other")
    want = pd.Categorical(np.where(mask, "RoPE", "Other"))
    got = moved.categorical()
    assert list(got) == list(want) and list(got.categories) == list(want.categories) == ["Other", "RoPE"]


def test_str_column_equals_the_column_of_the_strings() -> None:
    values = np.array(["b", "", "a", "b"], dtype=object)  # a value may repeat
    codes = np.array([0, 2, 1, 3, 3, 0])
    got = pd.Series(str_column(values, codes))
    want = pd.Series(values[codes].tolist())
    assert got.dtype == want.dtype and got.equals(want)
    assert pd.Series(str_column(values, np.zeros(0, np.intp))).equals(pd.Series([], dtype=want.dtype))


def test_codes_of_a_str_column() -> None:
    col = pd.Series(["x", None, "y", "x"], dtype="str")
    codes, uniq = codes_of(col)
    assert list(uniq[codes]) == ["x", "", "y", "x"]


def test_as_categories_drops_unused_categories_only() -> None:
    from tracekit.pipeline.categories import as_categories

    full = pd.Categorical(["b", "a", None, "b"])
    part = pd.Categorical(["b", "b"], categories=["a", "b", "c"])
    frame = as_categories(pd.DataFrame({"group": full, "module": ["x", "y"] * 2, "block": list(part) * 2}))
    frame2 = as_categories(pd.DataFrame({"rule": part}))
    assert list(frame["group"].cat.categories) == ["a", "b"] and frame["group"].isna().sum() == 1
    assert list(frame["module"].cat.categories) == ["x", "y"]
    assert list(frame2["rule"].cat.categories) == ["b"] and list(frame2["rule"]) == ["b", "b"]
