"""memory.window_stats (no copy of the events when every row has a device and a window; the
labels of the few result rows only) against the plain way (the rows with both, copied), on
random events with some labels missing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses import memory


def _plain(m: pd.DataFrame, lvl: np.ndarray, window: pd.Categorical) -> pd.DataFrame:
    """One row per (step, device, ``window``) of the events ``m`` (with their levels ``lvl``),
    in order of first appearance; sums and maxima by integer group key (numpy, no group-by of
    object columns), a maximum over recorded values only (NaN where none is)."""
    device = pd.Categorical(m["device"])
    ok = np.flatnonzero((device.codes >= 0) & (window.codes >= 0))
    m, lvl = m.iloc[ok], lvl[ok]
    key, first = memory.distinct_rows(m["step"].to_numpy(), device.codes[ok], window.codes[ok])
    n = len(first)
    nbytes = m["bytes"].to_numpy(np.float64)
    order = np.argsort(key, kind="stable")
    starts = np.searchsorted(key[order], np.arange(n))

    def most(values: np.ndarray) -> np.ndarray:
        return np.fmax.reduceat(values[order], starts) if n else np.empty(0)

    alloc = np.bincount(key, np.where(nbytes > 0, nbytes, 0.0), n) / memory.MB_BYTES
    free = np.bincount(key, np.where(nbytes < 0, -nbytes, 0.0), n) / memory.MB_BYTES
    base = (lvl - nbytes)[first]
    return pd.DataFrame(
        {
            "step": m["step"].to_numpy()[first],
            "device": np.asarray(device[ok][first], dtype=object),
            "phase": np.asarray(window[ok][first], dtype=object),
            "events": np.bincount(key, minlength=n),
            "allocated_mb": alloc,
            "freed_mb": free,
            "net_mb": alloc - free,
            "peak_allocated_mb": most(m["total_allocated"].to_numpy(np.float64)) / memory.MB_BYTES,
            "peak_reserved_mb": most(m["total_reserved"].to_numpy(np.float64)) / memory.MB_BYTES,
            "peak_growth_mb": np.maximum(most(lvl) - base, 0.0) / memory.MB_BYTES,
        }
    )


@pytest.mark.parametrize("seed", range(30))
def test_window_stats_are_the_plain_ones(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 2000))
    missing = rng.random() < 0.5
    device = np.array([f"cuda:{i}" for i in rng.integers(0, 3, n)], dtype=object)
    phase = np.array(["forward", "backward", "optimizer"], dtype=object)[rng.integers(0, 3, n)]
    if missing:
        device[rng.random(n) < 0.1] = None
        phase[rng.random(n) < 0.1] = None
    total = rng.integers(0, 10**9, n).astype(float)
    total[rng.random(n) < 0.2] = np.nan
    m = pd.DataFrame(
        {
            "step": np.sort(rng.integers(0, 20, n)),
            "device": pd.Categorical(device),
            "phase": phase,
            "bytes": rng.integers(-(10**6), 10**6, n).astype(float),
            "total_allocated": total,
            "total_reserved": total * 2,
        }
    )
    lvl = rng.integers(0, 10**9, n).astype(float)
    window = pd.Categorical(m["phase"])
    got = memory.window_stats(m, lvl, window)
    pd.testing.assert_frame_equal(got, _plain(m, lvl, window), check_exact=True)
