"""What every human-facing renderer (terminal, HTML, Markdown) shows of a table, from its spec.

Machine formats (JSON, CSV, Parquet) keep every row and full names; people get:

* headers with units (``wall_ms`` -> ``wall (ms)``, ``percent`` -> ``%``);
* numbers by unit: ms with 3 decimals, % with 1; counts and bytes with separators, whole
  numbers without decimals, a mean count with its fraction (:func:`count_text`);
* no all-zero rows (a phase absent from the trace, a category with nothing in it), and a note
  saying how many were hidden; a row with any non-zero value is always shown;
* the top rows of long tables (``spec.top``, largest ``spec.sort_by`` first), with a note;
* long names shortened by the spec's ``shorten`` functions unless ``wide``, and only then
  bounded (:func:`display_name`): shortening reads the whole name, so it is never cut first.
  Every human format shows the same short form; the full name stays in JSON, CSV, Parquet
  and in the HTML report's tooltips (:attr:`Shown.full`).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit.analyses import column_unit, spec_of
from tracekit.analyses._registry import (
    BYTES,
    CALLS,
    COUNT,
    FLOP_PER_BYTE,
    GBPS,
    GBYTE,
    GFLOP,
    INDEX,
    MB,
    MEAN,
    MS,
    PCT,
    PER_S,
    STAGE_MEAN,
    TBPS,
    TFLOPS,
    US,
)

from .safetext import TERMINAL_NAME_CHARS, bounded

#: Units of amounts that span many orders of magnitude (a GEMM of 0.001 or 3,000 GFLOP).
MAGNITUDES = {GFLOP, GBYTE, TFLOPS, TBPS, GBPS, FLOP_PER_BYTE}
#: Longest shortened name shown (the short form of a kernel, with an ellipsis past it).
SHORT_CHARS = 60
#: Longest name ``--wide`` and the HTML tooltips show (real signatures reach ~5,000).
WIDE_CHARS = 8000

#: Titles of tables that are not in the registry (``tracekit compare``).
COMPARE_TITLES = {
    "attention": "Attention time, A vs B (Table VIII)",
    "efficiency_rates": "Efficiency, A vs B: achieved TFLOP/s, % of peak, modelled share",
}


def label(v) -> str:
    """A trace-derived string as a chart label: entity-escaped (shown verbatim by plotly)."""
    return html.escape(str(v), quote=True)


def title(name: str) -> str:
    spec = spec_of(name)
    if spec is not None:
        return spec.heading
    if name.endswith("_delta") and spec_of(name[:-6]) is not None:
        return f"{spec_of(name[:-6]).title.split(':')[0]}: B - A"
    return COMPARE_TITLES.get(name, name)


def for_people(name: str) -> bool:
    """Whether the terminal, Markdown and HTML tables show table ``name`` (a table kept for its
    chart and the files says not: its spec's ``shown``)."""
    spec = spec_of(name)
    return spec is None or spec.shown


def header(name: str, column: str) -> str:
    """``wall_ms`` -> ``wall (ms)``; ``percent`` -> ``%``; ``vs_mean_pct`` -> ``vs mean (%)``;
    ``peak_rss_mb`` -> ``peak rss (MB)``; ``tokens_per_s`` -> ``tokens/s``; a count or bytes of
    a table of steps -> ``count (/step)`` (a mean keeps its fraction)."""
    unit = column_unit(name, column)
    base = column
    for suffix in ("_ms", "_us", "_pct", "_mb"):
        base = base.removesuffix(suffix)
    if unit == PER_S and base.endswith("_per_s"):
        return base.removesuffix("_per_s").replace("_", " ") + "/s"
    if base == "percent":
        return "%" if not column.startswith("paper_") else "paper %"
    base = base.replace("_", " ")
    shown = {MS: "ms", US: "us", PCT: "%", MB: "MB"}.get(unit)
    if unit in (COUNT, BYTES) and _per_step_sums(name):
        shown = "/step"
    return f"{base} ({shown})" if shown else base


def _per_step_sums(name: str) -> bool:
    """A table of the trace's sums per step (counts of activities: per step, and a mean keeps
    their fraction); not a table derived from another or read from the capture manifest."""
    spec = spec_of(name)
    return spec is not None and spec.func is not None and spec.aggregate in (MEAN, STAGE_MEAN)


def count_text(f: float) -> str:
    """A count: whole numbers as integers (``1,234``), a mean's fraction with three significant
    digits at least (``0.5``, ``2.25``, ``0.0167``, ``70.3``), so that it never reads 0 where
    something ran, and count x mean duration reads as the total."""
    if abs(f - round(f)) < 1e-9:
        return f"{round(f):,}"
    digits = min(max(2 - math.floor(math.log10(abs(f))), 1), 6)
    return f"{f:,.{digits}f}".rstrip("0").rstrip(".")


def cell(name: str, column: str, v) -> str:
    """One value as text, by its column's unit, positional (never an exponent) and never ``-0``:
    a value that rounds to zero prints unsigned (docs/cli.md "Numbers")."""
    text = _cell(name, column, v)
    return text[1:] if text.startswith("-") and not text.strip("-0.,") else text


def significant(f: float, digits: int = 3) -> str:
    """``f`` to ``digits`` significant digits, positional: 0.00771, 0.000000028, 2.25."""
    return np.format_float_positional(f, precision=digits, unique=False, fractional=False, trim="-")


def _cell(name: str, column: str, v) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        unit = column_unit(name, column)
        f = float(v)
        if unit in (COUNT, BYTES):
            return count_text(f)
        if unit == INDEX or (isinstance(v, (int, np.integer)) and unit != MS):
            return f"{round(f):,}" if unit != INDEX else str(round(f))
        if unit == PCT:
            return f"{f:,.1f}"
        if unit == CALLS:  # a mean number of calls per step: whole, or to two decimals
            return f"{f:,.2f}".rstrip("0").rstrip(".")
        if unit in MAGNITUDES:
            return f"{f:,.1f}" if abs(f) >= 100 else f"{f:,.3f}" if abs(f) >= 1 or f == 0 else significant(f)
        if unit in (US, MB, PER_S):
            return f"{f:,.1f}"
        return f"{f:,.3f}"
    return str(v)


def numeric(df: pd.DataFrame, column: str) -> bool:
    return pd.api.types.is_numeric_dtype(df[column]) and not pd.api.types.is_bool_dtype(df[column])


def value_columns(name: str, df: pd.DataFrame) -> list[str]:
    spec = spec_of(name)
    if spec is not None and spec.values:
        return [c for c in df.columns if c in spec.values and c != "vs_mean_pct"]
    return [c for c in df.columns if numeric(df, c) and c not in ("rank", "step", "layer")]


def display_name(text, shorten=None, wide: bool = False) -> str:
    """A name as people see it: shortened by ``shorten`` (unless ``wide``), then bounded
    (:data:`SHORT_CHARS` for a short form, :data:`WIDE_CHARS` with ``wide``, else
    :data:`~tracekit.safetext.TERMINAL_NAME_CHARS`), cleaned of unsafe characters."""
    s = str(text)
    if shorten is not None and not wide:
        return bounded(shorten(s), SHORT_CHARS)
    return bounded(s, WIDE_CHARS if wide else TERMINAL_NAME_CHARS)


def _text_columns(df: pd.DataFrame) -> list[str]:
    return [c for c in df.columns if not numeric(df, c) and not pd.api.types.is_bool_dtype(df[c])]


def _displayed(df: pd.DataFrame, shorten: dict, wide: bool, full: bool = False) -> pd.DataFrame:
    """``df`` with its text cells as :func:`display_name` shows them (``full``: not shortened,
    bounded at :data:`WIDE_CHARS`), each distinct value once."""
    out = df.copy()
    for c in _text_columns(df):
        fn = None if full else shorten.get(c)
        seen: dict = {}
        taken: dict[str, int] = {}
        for v in df[c].astype(object):
            if isinstance(v, str) and v not in seen:
                seen[v] = distinct(display_name(v, fn, wide or full), taken)
        out[c] = [seen.get(v, v) if isinstance(v, str) else v for v in df[c].astype(object)]
    return out


def distinct(shown: str, taken: dict[str, int]) -> str:
    """``shown``, or ``shown #2``, ``#3``... when another full name already took that display
    form (two kernels whose full names differ only in a template argument share a short name;
    the charts number their bars the same way)."""
    taken[shown] = taken.get(shown, 0) + 1
    return shown if taken[shown] == 1 else f"{shown} #{taken[shown]}"


@dataclass
class Shown:
    """The rows a person sees, and what was left out of them. ``frame``: their display form
    (short names); ``full``: the same rows with full names (tooltips)."""

    frame: pd.DataFrame
    zero_rows: int = 0
    total_rows: int = 0
    top: int | None = None
    full: pd.DataFrame | None = None

    def notes(self) -> list[str]:
        out = []
        if self.top is not None and self.total_rows > len(self.frame):
            sort_by = spec_of_sort(self)
            out.append(
                f"top {len(self.frame)} of {self.total_rows} rows{sort_by}; "
                "--top N for more, JSON/CSV have all"
            )
        if self.zero_rows:
            out.append(f"{self.zero_rows} all-zero row{'s' if self.zero_rows != 1 else ''} hidden")
        return out


def spec_of_sort(shown: Shown) -> str:
    return f" by {shown.frame.attrs.get('sort_by')}" if shown.frame.attrs.get("sort_by") else ""


def shown_rows(
    name: str, df: pd.DataFrame, *, top: int | None = None, wide: bool = False, skip_zero: bool = True
) -> Shown:
    """The rows of ``df`` to show: no all-zero rows (unless not ``skip_zero``), the top ``top``
    (default: the spec's), names in their display form."""
    values = value_columns(name, df)
    if values and len(df) and skip_zero:
        v = df[values].apply(pd.to_numeric, errors="coerce").fillna(0.0).to_numpy(dtype=float)
        nonzero = (v != 0).any(axis=1)
    else:
        nonzero = np.ones(len(df), dtype=bool)
    kept = df[nonzero]
    out = Shown(kept, zero_rows=int((~nonzero).sum()), total_rows=len(kept))
    spec = spec_of(name)
    limit = top if top is not None else (spec.top if spec is not None else None)
    if limit is not None and spec is not None and spec.sort_by in kept.columns and len(kept) > limit:
        kept = kept.sort_values(spec.sort_by, ascending=False, kind="stable").head(limit)
        kept.attrs["sort_by"] = spec.sort_by
        out.frame, out.top = kept, limit
    shorten = spec.shorten if spec is not None else {}
    out.full = _displayed(out.frame, shorten, wide, full=True)
    out.frame = _displayed(out.frame, shorten, wide)
    return out


def steps_text(steps: list[int]) -> str:
    """Step numbers, shortened when many: ``3,4,5`` / ``1..60 (60)``."""
    return ",".join(map(str, steps)) if len(steps) < 8 else f"{steps[0]}..{steps[-1]} ({len(steps)})"


def filters_text(filters: dict) -> str:
    """The filters of a run, for people: ``steps 3,4, phase backward, module Attention``
    (``--module`` shows the categories it selected, ``+`` between several)."""
    parts = []
    for k, v in filters.items():
        if k in ("tables_left_out", "complete_steps_kept"):
            continue
        if k == "steps":
            v = steps_text(list(v))
        elif isinstance(v, list | tuple):
            v = " + ".join(map(str, v))
        parts.append(f"{k} {v}")
    return ", ".join(parts)


def mode_text(meta: dict) -> str:
    """The header's mode: the device kind (``meta.device_kind``: ``gpu``, ``mtia``, ``cpu``;
    docs/metrics.md), else the mode (a result of an older tracekit has none)."""
    return str(meta.get("device_kind") or meta.get("mode", ""))


def device_lines(meta: dict) -> list[str]:
    """One line per distinct device the ranks were measured against: the trace's device name,
    the row it matched, where the peaks came from and the peak of each dtype that holds FLOPs
    ("device: NVIDIA A100-PG509-200 -> NVIDIA A100 SXM4 40GB (built-in table), bf16 312
    TFLOP/s"); none without the perf model's ``meta.device``."""
    out: list[str] = []
    for d in (meta.get("device") or {}).values():
        name = d.get("device") or "not named in the trace"
        if d.get("matched"):
            line = f"device: {name} -> {d['matched']} ({d.get('origin') or 'built-in table'})"
        elif d.get("peak_tflops") or d.get("peak_tbps"):
            line = f"device: {name}, peaks from {d.get('origin') or 'the command line'}"
        else:
            line = f"device: {name} -> no peak known"
        measured = (d.get("measured") or {}).items()
        peaks = [f"{k} {v:g}" if v else f"{k} no peak" for k, v in measured]
        if any(v for _, v in measured):
            line += ", " + ", ".join(peaks) + " TFLOP/s"
        if d.get("peak_tbps"):
            line += f", {d['peak_tbps']:g} TB/s"
        if line not in out:
            out.append(line)
    return out
