"""critical_path's sums (a categorical's own codes, one count over a small key space) against
the plain way (a frame of the complete steps' pieces, factorized, ``np.unique``), on random
pieces: labels categorical or not, some missing, steps outside the complete ones."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses import critical_path as cp


def _plain(pieces: pd.DataFrame, done: np.ndarray) -> pd.DataFrame:
    p = pieces[np.isin(pieces["step"].to_numpy(), done)]
    length = (p["end"].to_numpy(np.int64) - p["start"].to_numpy(np.int64)).astype(np.float64)
    codes, labels = zip(*(pd.factorize(p[k]) for k in cp.KEYS))
    key = np.zeros(len(p), np.int64)
    for c, lab in zip(codes, labels):
        key = key * (len(lab) + 1) + c
    uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
    out = pd.DataFrame(
        {k: np.asarray(lab, dtype=object)[c[first]] for k, c, lab in zip(cp.KEYS, codes, labels)}
    )
    out["step"] = out["step"].astype(np.int64)
    out["time_ms"] = np.bincount(inv.ravel(), weights=length, minlength=len(uniq)) / 1e6
    return out.sort_values(cp.KEYS, kind="stable", ignore_index=True)[cp.COLUMNS]


@pytest.mark.parametrize("seed", range(40))
def test_the_sums_are_the_plain_ones(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 3000))
    steps = rng.integers(-2, int(rng.integers(1, 300)), n) * int(rng.choice([1, 1000]))
    start = rng.integers(0, 10**12, n)
    frame = {"step": steps, "start": start, "end": start + rng.integers(0, 10**6, n)}
    for k, many in (("kind", 7), ("phase", 4), ("module", int(rng.integers(1, 50)))):
        vals = np.array([f"{k}{i}" for i in rng.integers(0, many, n)], dtype=object)
        if rng.random() < 0.2 and n:
            vals[rng.integers(0, n, 3)] = None
        frame[k] = pd.Categorical(vals) if rng.random() < 0.7 else vals
    pieces = pd.DataFrame(frame)[["step", "kind", "phase", "module", "start", "end"]]
    done = np.unique(rng.choice(np.unique(steps), int(rng.integers(1, 20)))) if n else np.array([0])
    windows = SimpleNamespace(steps=pd.DataFrame({"step": done}))
    want = _plain(pieces, done)
    if pieces.empty:
        return
    pd.testing.assert_frame_equal(cp.table(pieces, windows), want, check_exact=True)
