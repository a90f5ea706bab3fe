"""The findings as a person reads them first: a numbered list at the top of the terminal report.

Each finding is one line (what, how much per step and of the step, where) and, indented, its
evidence, its usual fix and the ``tracekit explain`` query that shows its rows. Text from the
trace (op and module names in the evidence) is cleaned of control and bidi characters.
"""

from __future__ import annotations

import shlex
import textwrap

import pandas as pd

from .safetext import clean

#: Findings listed in the terminal (the files keep them all).
SHOWN = 8


def lines(
    df: pd.DataFrame,
    path: str,
    width: int,
    shown: int = SHOWN,
    more: str = "table findings in --format json/csv",
) -> list[str]:
    """The first ``shown`` findings of ``df`` (the ``findings`` table) as terminal lines of at
    most ``width``, and a line counting the rest (``more``: where they are)."""
    width = max(40, width)
    out = ["Findings: the largest avoidable costs, largest first"]

    def wrapped(label: str, text: str) -> list[str]:
        return textwrap.wrap(
            f"{label}{clean(text)}", width, initial_indent="    ", subsequent_indent="      "
        )

    for i, r in enumerate(df.head(shown).to_dict("records"), 1):
        where = f"rank {r['rank']}" + (f", step {r['step']}" if "step" in r else "")
        size = (
            f"{r['ms']:.3f} ms per step ({r['share_pct']:.1f}% of the step)"
            if r["ms"] > 0 and pd.notna(r["share_pct"])
            else f"{r['ms']:.3f} ms per step"
            if r["ms"] > 0
            else "memory"
        )
        out += textwrap.wrap(f"{i:2d}. {r['category'].replace('_', ' ')}: {size}, {where}", width)
        out += wrapped("", r["evidence"]) + wrapped("fix: ", r["fix"])
        if r.get("explain"):
            out += wrapped("see: ", f"tracekit explain {shlex.quote(path)} {r['explain']}")
    if len(df) > shown:
        out.append(f"    ... and {len(df) - shown} more ({more})")
    return out
