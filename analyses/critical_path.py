"""The critical path of each step, per kind, phase and module (issue 35.3).

The path (:mod:`tracekit.pipeline.critical`): CPU work on each thread in order, launch to
device activity by correlation id, device activities in stream order, blocking synchronisations
and event waits, walked backward from the end of the step's device window (the ``idle`` table's
window), at each activity taking the dependency that gated it. Per step, per ``kind`` (``cpu``,
``launch``, ``kernel``, ``memcpy``, ``sync``, ``comm``, ``idle``), ``phase`` and ``module``:
``time_ms`` on the path. A step's rows sum to its window (``idle``: where the path waits with
nothing of its own running). A trace with no launching runtime call (CPU-only, or device
activity without launches) has no rows (the launch tables' notice says so).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._registry import CRITICAL_PIECES, INDEX, MS, PCT, STEP_WINDOW, Ratio, register

KEYS = ["step", "kind", "phase", "module"]
COLUMNS = [*KEYS, "time_ms"]


@register(
    "critical_path",
    title="Critical path per step",
    keys=("kind", "phase", "module"),
    values={"time_ms": MS, "percent": PCT, "waited_on_rank": INDEX},
    ratios={"percent": Ratio("time_ms", STEP_WINDOW)},
    reads=CRITICAL_PIECES,
    filters=frozenset({"phase", "module"}),
    sort_by="time_ms",
    top=20,
    chart="stacked",
)
def table(pieces: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    done = windows.steps["step"].to_numpy()
    if pieces is None or pieces.empty or not len(done):
        return pd.DataFrame(columns=COLUMNS)
    keep, steps = _steps(pieces["step"].to_numpy(), done)
    length = (pieces["end"].to_numpy(np.int64) - pieces["start"].to_numpy(np.int64))[keep].astype(np.float64)
    # integer keys: the group-by of the pieces is cheap, the labels go on its few rows; each
    # column's codes of the kept pieces (not a frame of them: its copy cost as much again)
    codes, labels = zip(steps, *(_factorized(pieces[k], keep) for k in KEYS[1:]))
    out = pd.DataFrame(_sums(codes, labels, length))
    out["step"] = out["step"].astype(np.int64)
    return out.sort_values(KEYS, kind="stable", ignore_index=True)[COLUMNS]


def _steps(step: np.ndarray, done: np.ndarray):
    """The pieces of complete steps (``np.isin(step, done)``) and their steps' codes and
    labels (the complete steps, sorted): one search of the few steps, no factorizing."""
    done = np.unique(done)
    at = np.minimum(np.searchsorted(done, step), len(done) - 1)
    keep = done[at] == step
    return keep, (at[keep], done)


def _factorized(col: pd.Series, keep: np.ndarray):
    """``pd.factorize(col[keep])``'s codes and labels, up to numbering: a categorical column
    without missing values by its own codes and categories (the pieces' labels are;
    factorizing them again is a third of the table's time on 523k pieces)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = col.cat.codes.to_numpy()[keep]
        if codes.min(initial=0) >= 0:
            return codes.astype(np.int64), col.cat.categories
    return pd.factorize(col[keep])


def _sums(codes, labels, length: np.ndarray) -> dict[str, np.ndarray]:
    """Per key (of ``KEYS``' codes and labels) that occurs, in key order: its labels and
    ``time_ms``, the sum of ``length`` (ns). One count over the key space where it is small
    (no sort of the pieces), else ``np.unique`` (and where a label is missing, code -1)."""
    radix = [len(lab) + 1 for lab in labels]
    key = np.zeros(len(length), np.int64)
    for c, r in zip(codes, radix):
        key = key * r + c
    space = float(np.prod(np.array(radix, dtype=float)))
    if space <= 4 * len(key) + 4096 and all(c.min(initial=0) >= 0 for c in codes):
        seen = np.flatnonzero(np.bincount(key, minlength=int(space)))
        time = np.bincount(key, weights=length, minlength=int(space))[seen]
        at = _digits(seen, radix)
    else:
        uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
        time = np.bincount(inv.ravel(), weights=length, minlength=len(uniq))
        at = [c[first] for c in codes]
    out = {k: np.asarray(lab, dtype=object)[c] for k, c, lab in zip(KEYS, at, labels)}
    return {**out, "time_ms": time / 1e6}


def _digits(key: np.ndarray, radix: list[int]) -> list[np.ndarray]:
    """The per-column codes a mixed-radix key was built from (first column most significant)."""
    out = []
    for r in reversed(radix):
        out.append(key % r)
        key = key // r
    return out[::-1]
