"""Tables select rows of the few interval columns they read (``_common.narrow``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tracekit.analyses._common import narrow


def test_narrow_keeps_the_asked_columns_it_has_on_the_masked_rows():
    iv = pd.DataFrame({"step": [1, 1, 2], "start": [0, 5, 9], "end": [4, 8, 12], "name": ["a", "b", "c"]})
    got = narrow(iv, ["step", "end", "stage"], np.array([True, False, True]))
    assert list(got.columns) == ["step", "end"]  # no stage column: left out
    assert got["end"].tolist() == [4, 12] and got.index.tolist() == [0, 2]


def test_narrow_of_every_row_is_the_table_itself():
    iv = pd.DataFrame({"step": [1, 2], "start": [0, 5]})
    assert narrow(iv, ["step"], np.ones(2, bool)) is iv
    assert narrow(iv, ["step"]) is iv
