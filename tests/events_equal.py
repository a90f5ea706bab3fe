"""A fast exact comparison of two event frames (``RawTrace.events``).

``pandas.testing.assert_frame_equal`` compares a categorical column value by value (seconds for
a real trace's string columns, and the reader has eight of them); the same check is the
categoricals' dtypes (their categories, in order), then their codes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def assert_events_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """``pd.testing.assert_frame_equal(a, b)``, categorical columns compared by dtype and codes."""
    assert list(a.columns) == list(b.columns)
    cats = [c for c in a.columns if isinstance(a[c].dtype, pd.CategoricalDtype)]
    for c in cats:
        assert a[c].dtype == b[c].dtype, c  # the same categories, in the same order
        np.testing.assert_array_equal(a[c].cat.codes.to_numpy(), b[c].cat.codes.to_numpy(), err_msg=c)
    pd.testing.assert_frame_equal(a.drop(columns=cats), b.drop(columns=cats))
