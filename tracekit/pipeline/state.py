"""The state the pipeline steps pass along: one trace file's events and the tables built from them.

Every step is a function ``step(t: Trace) -> Trace`` that adds named columns to ``t.acts`` (the
activity table: one row per device activity, or per CPU op piece on CPU-only traces) or adds one
of the side tables (``ranges``, ``modules``, ``step_ranges``, ``steps``, ``windows``). Steps never remove or
rewrite a column an earlier step added; each documents what it needs, adds and guarantees.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd


@dataclass
class Trace:
    """One rank's trace as the pipeline builds it up.

    ``events``: the columns :mod:`tracekit.read` decoded (read-only). ``acts``: the activity
    table. ``ranges``: the CPU ranges (ops, annotations, module frames) the nesting sweep keeps,
    with their enclosing context. ``modules``: one row per module instance (forward call).
    ``step_ranges``: the ProfilerStep ranges (CPU side). ``steps``: each step's device window.
    ``windows``: one row per (step, window) of the time engine.
    """

    path: str
    events: pd.DataFrame
    mode: str = ""
    #: Module ranges come from tracekit's capture annotations (else ``nn.Module`` frames).
    capture_modules: bool = False
    acts: pd.DataFrame = field(default_factory=pd.DataFrame)
    ranges: pd.DataFrame = field(default_factory=pd.DataFrame)
    modules: pd.DataFrame = field(default_factory=pd.DataFrame)
    step_ranges: pd.DataFrame = field(default_factory=pd.DataFrame)
    steps: pd.DataFrame = field(default_factory=pd.DataFrame)
    windows: pd.DataFrame = field(default_factory=pd.DataFrame)
    meta: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)  # TraceWarning (tracekit.checks) or str

    @cached_property
    def names(self) -> np.ndarray:
        """Every event's name as an object array of str (decoded once)."""
        return as_str(self.events["name"])

    @property
    def activities(self) -> pd.DataFrame:
        """The activity table (the name the labelling functions use)."""
        return self.acts


def take(arr: np.ndarray, idx: np.ndarray, default):
    """``arr[idx]`` where ``idx >= 0``, else ``default`` (also when ``arr`` is empty)."""
    idx = np.asarray(idx)
    a = np.asarray(arr)
    dtype = (
        object if isinstance(default, str) or a.dtype == object else np.result_type(a.dtype, type(default))
    )
    out = np.full(idx.shape, default, dtype=dtype)
    ok = idx >= 0
    if ok.any():
        out[ok] = a[idx[ok]]
    return out


def as_str(col: pd.Series) -> np.ndarray:
    """A string column as an object array of str (categoricals: through their codes, fast)."""
    if isinstance(col.dtype, pd.CategoricalDtype) and not col.hasnans:
        cats = np.asarray(col.cat.categories.astype(str), dtype=object)
        return cats[col.cat.codes.to_numpy()] if len(cats) else np.full(len(col), "", object)
    return col.astype(str).to_numpy()


def lookup(index: pd.Series, keys: np.ndarray) -> np.ndarray:
    """``index[key]`` (int64 values) per key, -1 where the key is absent."""
    if len(index) == 0:
        return np.full(len(keys), -1, np.int64)
    v = index.reindex(keys).to_numpy(dtype="float64")
    return np.where(np.isnan(v), -1, v).astype(np.int64)
