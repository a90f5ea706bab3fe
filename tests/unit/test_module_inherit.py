"""modules.inherit equals the loop it replaces: rows visited by start, parents first; and the
sibling position is the groupby cumcount it replaces."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.modules import _rank_in_group, inherit


def _loop(parent, start, own, outermost):
    val = np.full(len(own), -1, np.int64)
    for i in np.argsort(start, kind="stable"):
        p = parent[i]
        up = val[p] if p >= 0 else -1
        if outermost:
            val[i] = up if up >= 0 else own[i]
        else:
            val[i] = own[i] if own[i] >= 0 else up
    return val


def test_inherit_matches_the_loop_on_random_trees() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        parent = np.array([int(rng.integers(-1, i)) if i else -1 for i in range(n)])
        start = rng.integers(0, 6, n)  # ties: a parent may be visited after its child
        own = np.where(rng.random(n) < 0.3, np.arange(n), -1)
        for outermost in (False, True):
            assert np.array_equal(
                inherit(parent, start, own, outermost), _loop(parent, start, own, outermost)
            )


def test_rank_in_group_is_cumcount_in_start_order():
    rng = np.random.default_rng(3)
    for _ in range(30):
        n = int(rng.integers(0, 200))
        key = rng.integers(0, 7, n)
        start = rng.integers(0, 20, n)  # many ties: broken by row
        df = pd.DataFrame({"key": key, "start": start}).sort_values("start", kind="stable")
        want = df.groupby("key").cumcount().sort_index().to_numpy()
        assert _rank_in_group(key, start).tolist() == want.tolist()
