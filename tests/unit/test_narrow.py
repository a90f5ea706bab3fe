"""Tables select rows of the few interval columns they read (``_common.narrow``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracekit.analyses._common import narrow, sums

from tracekit.pipeline.intervals import minus_measure_by


def test_narrow_keeps_the_asked_columns_it_has_on_the_masked_rows():
    iv = pd.DataFrame({"step": [1, 1, 2], "start": [0, 5, 9], "end": [4, 8, 12], "name": ["a", "b", "c"]})
    got = narrow(iv, ["step", "end", "stage"], np.array([True, False, True]))
    assert list(got.columns) == ["step", "end"]  # no stage column: left out
    assert got["end"].tolist() == [4, 12] and got.index.tolist() == [0, 2]


def test_narrow_of_every_row_is_the_table_itself():
    iv = pd.DataFrame({"step": [1, 2], "start": [0, 5]})
    assert narrow(iv, ["step"], np.ones(2, bool)) is iv
    assert narrow(iv, ["step"]) is iv


def test_sums_is_the_named_sum_aggregation():
    f = pd.DataFrame(
        {
            "step": [2, 1, 2, 1],
            "k": pd.Categorical(["b", "a", "b", "c"], categories=["c", "b", "a", "z"]),
            "n": [1, 2, 3, 4],
            "d": [0.1, 0.2, 0.7, 1e-17],
        }
    )
    for kw in ({"observed": True}, {"observed": True, "sort": False}):
        want = f.groupby(["step", "k"], **kw).agg(count=("n", "sum"), time=("d", "sum"))
        pd.testing.assert_frame_equal(sums(f, ["step", "k"], {"count": "n", "time": "d"}, **kw), want)


def test_exposed_part_with_groups_sharing_a_step_and_a_step_without_compute():
    # step 1: comm groups x [0, 10) and y [8, 30); compute [5, 12) hides 5 of x and 4 of y.
    # step 2: comm only, nothing hidden. Compute of step 3 touches no group.
    a = pd.DataFrame({"step": [1, 1, 2], "k": ["x", "y", "x"], "start": [0, 8, 40], "end": [10, 30, 50]})
    b = pd.DataFrame({"step": [1, 3], "start": [5, 0], "end": [12, 100]})
    got = minus_measure_by(a, b, ["step", "k"], ["step"])
    assert got.to_dict() == {(1, "x"): 5, (1, "y"): 18, (2, "x"): 10}
    assert got.dtype == np.int64
