"""Top kernels: the device activities that take the most time, by kernel name.

Per step and (name, category, module, phase) of the complete steps' device activities:

* ``count``: how many ran; ``total_ms``: sum of their durations (overlap included);
* ``mean_us``: total_ms / count, in microseconds (a ratio of the step means);
* ``percent``: total_ms / the total of all rows x 100: the row's share of the device time
  (sum of durations) of the activities the table covers; the rows add up to 100.

``category`` is the kernel category (Table X), ``module`` the module category of the launching
op (Table VI), ``phase`` the launching op's phase. Each step keeps its :data:`KEEP` largest rows
and one ``(other kernels)`` row for the rest, so the rows still add up to all device time.
Rows are sorted by ``total_ms``; files keep full names, the terminal shows the top 20 with names
shortened by :func:`tracekit.pipeline.names.short_name` (``--wide``: full names).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline import names
from tracekit.pipeline.windows import Windows

from ._common import as_text, largest_first, narrow, sums, text
from ._groups import flat_sums
from ._registry import COUNT, MS, PCT, US, Ratio, register

#: Rows kept per step; the rest are summed into one "(other kernels)" row.
KEEP = 50
OTHER = "(other kernels)"
#: The display form of a kernel name (tracekit.pipeline.names; files keep the full name).
short_name = names.short_name


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """Largest total first."""
    return largest_first(df, "total_ms", groups=("rank", "step", "stage"))


def _keep_top(rows: pd.DataFrame) -> pd.DataFrame:
    """Each step's :data:`KEEP` largest rows, and the rest summed into one row."""
    rank = _rank_in_step(rows["step"].to_numpy(), rows["total_ms"].to_numpy(dtype=float))
    top, rest = rows[rank <= KEEP], rows[rank > KEEP]
    if rest.empty:
        return top
    other = sums(rest, "step", {"count": "count", "total_ms": "total_ms"}, sort=False)
    other = other.reset_index().assign(name=OTHER, category="", module="", phase="")
    return pd.concat([top, other[top.columns]], ignore_index=True)


def _rank_in_step(step: np.ndarray, total: np.ndarray) -> np.ndarray:
    """Per row, its rank in its step by ``total``, largest first, ties in row order (1, 2, ...;
    NaN for a NaN total): ``groupby("step")["total"].rank(method="first", ascending=False)``
    by one stable sort."""
    n = len(step)
    order = np.lexsort((np.arange(n), -total, step))  # NaN sorts last in its step
    s = step[order]
    head = np.ones(n, bool)
    head[1:] = s[1:] != s[:-1]
    first = np.maximum.accumulate(np.where(head, np.arange(n), 0))
    rank = np.empty(n)
    rank[order] = np.arange(n) - first + 1.0
    rank[np.isnan(total)] = np.nan
    return rank


COLUMNS = ["step", "name", "category", "module", "phase", "count", "total_ms"]


@register(
    "top_kernels",
    title="Top kernels",
    keys=("name", "category", "module", "phase"),
    values={"count": COUNT, "total_ms": MS, "mean_us": US, "percent": PCT},
    ratios={
        "mean_us": Ratio("total_ms", "count", scale=1000.0),
        "percent": Ratio("total_ms", "total_ms", within=()),
    },
    finish=_finish,
    filters=frozenset({"phase", "module"}),
    top=20,
    sort_by="total_ms",
    shorten={"name": short_name},
    chart="bar",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    used = ["step", "name", "kernel_category", "module", "phase", "start", "end", "count"]
    iv = narrow(intervals, used, intervals["step"].isin(windows.steps["step"]).to_numpy())
    if iv.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.DataFrame(
        {
            "step": iv["step"].to_numpy(),
            "name": text(iv["name"]),
            "category": text(iv["kernel_category"]),
            "module": text(iv["module"], {"": "Other"}),
            "phase": text(iv["phase"], {"": "unattributed"}),
            "dur": (iv["end"] - iv["start"]).to_numpy() / 1e6,
            "count": iv["count"].to_numpy(),
        }
    )
    keys = ["step", "name", "category", "module", "phase"]
    out = flat_sums(frame, keys, {"count": "count", "total_ms": "dur"}, sort=False)
    out = as_text(out, ["name", "category", "module", "phase"])
    out = _keep_top(out)
    out["count"] = out["count"].astype("int64")
    return _finish(out)[COLUMNS]
