"""Inference stages in tables: split a step's activities by ``stage`` when the trace has them.

See :mod:`tracekit.pipeline.stages` for how activities get a stage (prefill / decode / mixed). Tables
that support stages (kernels, timeline) add a ``stage`` column right after ``step`` when at
least one activity has a stage; activities of such a trace without one go to ``other``.
Training traces keep their columns unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd

ORDER = ["prefill", "mixed", "decode", "other"]


def has_stages(intervals: pd.DataFrame) -> bool:
    return "stage" in intervals and bool((intervals["stage"] != "").any())


def split(iv: pd.DataFrame, staged: bool) -> Iterator[tuple[str | None, pd.DataFrame]]:
    """``(stage, rows)`` for each stage present in ``iv`` (one ``(None, iv)`` when unstaged)."""
    if not staged:
        yield None, iv
        return
    st = iv["stage"].astype(str).replace({"": "other"})
    for s in ORDER:
        part = iv[(st == s).to_numpy()]
        if len(part):
            yield s, part
