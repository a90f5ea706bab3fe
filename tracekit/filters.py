"""Filters of ``tracekit analyze``: which steps, phase and module category the tables cover.

Filters apply to the labelled intervals before a table is computed (and steps also to the step
windows). A table honours a ``phase`` or ``module`` filter when its spec lists the filter
(it is then computed from the matching intervals only) or has the filtered column as a key (its
rows are then selected); a table that can do neither is left out of a filtered run rather than
shown unfiltered. The output's meta says which filters were applied and which tables were left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

#: Module categories a ``--module`` word stands for, beyond a case-insensitive name match:
#: "attention" is the attention core of Table VIII (naive: Bmm0, Softmax, Bmm1; fused: Attention).
ALIASES = {"attention": {"attention", "bmm0", "softmax", "bmm1"}}


@dataclass(frozen=True)
class Filters:
    steps: tuple[int, ...] | None = None
    phase: str | None = None
    module: str | None = None

    @property
    def active(self) -> bool:
        return self.steps is not None or self.phase is not None or self.module is not None

    def describe(self) -> dict:
        out: dict = {}
        if self.steps is not None:
            out["steps"] = list(self.steps)
        if self.phase is not None:
            out["phase"] = self.phase
        if self.module is not None:
            out["module"] = self.module
        return out

    def supports(self, spec) -> bool:
        """Whether a table with this spec can honour every active phase/module filter."""
        return all(
            f in spec.filters or f in spec.keys for f in ("phase", "module") if getattr(self, f) is not None
        )

    def intervals(self, iv: pd.DataFrame, spec) -> pd.DataFrame:
        """The intervals a table with ``spec`` is computed from."""
        keep = pd.Series(True, index=iv.index)
        if self.steps is not None:
            keep &= iv["step"].isin(self.steps)
        if self.phase == "recompute" and "phase" in spec.filters:  # a part of backward
            keep &= iv["recompute"].to_numpy(bool) if "recompute" in iv else False
        elif self.phase is not None and "phase" in spec.filters:
            keep &= iv["phase"].astype(str).str.lower() == self.phase
        if self.module is not None and "module" in spec.filters:
            keep &= module_matches(iv["module"], self.module)
        return iv if bool(keep.all()) else iv[keep.to_numpy()]

    def windows(self, steps: pd.DataFrame) -> pd.DataFrame:
        return steps if self.steps is None else steps[steps["step"].isin(self.steps).to_numpy()]

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """Rows of a computed table that match the filters on its key columns."""
        keep = pd.Series(True, index=df.index)
        if self.phase is not None and "phase" in df.columns:
            # recompute is a part of backward: its rows are backward's
            want = "backward" if self.phase == "recompute" else self.phase
            keep &= df["phase"].astype(str).str.lower() == want
        if self.module is not None and "module" in df.columns:
            keep &= module_matches(df["module"], self.module)
        return df if bool(keep.all()) else df[keep.to_numpy()].reset_index(drop=True)


def module_matches(values: pd.Series, word: str) -> pd.Series:
    """Case-insensitive: the category's name contains ``word``, or is one of its aliases."""
    v = values.astype(str).str.lower()
    w = word.lower()
    return v.str.contains(w, regex=False) | v.isin(ALIASES.get(w, set()))


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def parse_steps(text: str) -> tuple[int, ...]:
    """``"3-7"``, ``"2,4,9"``, ``"1-3,8"`` -> the step numbers, sorted, each once."""
    out: set[int] = set()
    for part in text.split(","):
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"--steps {text!r}: expected numbers and ranges like 3-7 or 2,4,9")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--steps {text!r}: range {lo}-{hi} runs backwards")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))
