"""Filters of ``tracekit analyze``: which steps, phase and module category the tables cover.

Filters apply to the labelled intervals before a table is computed (and steps also to the step
windows). A table honours a ``phase`` or ``module`` filter when its spec lists the filter
(it is then computed from the matching intervals only) or has the filtered column as a key (its
rows are then selected); a table that can do neither is left out of a filtered run rather than
shown unfiltered. The output's meta says which filters were applied (for ``--module``, the
categories it selected) and which tables were left out.

``--module`` names module categories, never a loose substring: ``attention`` is the Attention
category (fused attention kernels), not "Attention other" nor Bmm0; a unique prefix or
substring also names one (``rms``: RMSNorm); several categories only when listed
(``--module bmm0,softmax,bmm1``). An unknown or ambiguous name is an error naming the choices.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

import pandas as pd

from .pipeline.taxonomy import MODULE_CATEGORIES


class FilterError(ValueError):
    """A filter the run cannot honour (an unknown or ambiguous ``--module``, ``--steps`` that
    name no step of the run): one line. ``option``: the option at fault."""

    def __init__(self, message: str, option: str = "--module") -> None:
        super().__init__(message)
        self.option = option


#: Step ranges as written (``3-7,9`` is ``((3, 7), (9, 9))``): never expanded into numbers,
#: so ``1-99999999999999999999999`` costs nothing; :meth:`Filters.resolved` keeps the steps of
#: the run that they hold.
StepRanges = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Filters:
    """``steps``; ``phase``; ``module``: what the user asked for (``"attention"``, or a comma
    list); ``modules``: the module categories it selects (:meth:`resolved`), exact names;
    ``step_ranges``: ``--steps`` as written, resolved to ``steps`` (those of the run it holds)."""

    steps: tuple[int, ...] | None = None
    phase: str | None = None
    module: str | None = None
    modules: tuple[str, ...] | None = None
    step_ranges: StepRanges | None = None

    @property
    def active(self) -> bool:
        return (
            self.steps is not None
            or self.step_ranges is not None
            or self.phase is not None
            or self.module is not None
        )

    def resolved(self, present: Iterable[str] = (), steps: Iterable[int] = ()) -> Filters:
        """The same filters with ``module`` resolved to categories (:func:`select_modules`)
        among the built-in categories and those ``present`` in the run, and ``step_ranges`` to
        the run's ``steps`` they hold (:class:`FilterError` when they hold none)."""
        out = self
        if self.step_ranges is not None:
            out = replace(out, steps=_steps_in(self.step_ranges, steps), step_ranges=None)
        if self.module is None:
            return out
        return replace(out, modules=select_modules(self.module, known_categories(present)))

    def describe(self) -> dict:
        out: dict = {}
        if self.steps is not None:
            out["steps"] = list(self.steps)
        if self.phase is not None:
            out["phase"] = self.phase
        if self.module is not None:
            out["module"] = list(self._modules(()))
        return out

    def supports(self, spec) -> bool:
        """Whether a table with this spec can honour every active phase/module filter."""
        return all(
            f in spec.filters or f in spec.keys for f in ("phase", "module") if getattr(self, f) is not None
        )

    def intervals(self, iv: pd.DataFrame, spec) -> pd.DataFrame:
        """The intervals a table with ``spec`` is computed from."""
        if self.steps is None and self.phase is None and self.module is None:
            return iv
        keep = pd.Series(True, index=iv.index)
        if self.steps is not None:
            keep &= iv["step"].isin(self.steps)
        if self.phase == "recompute" and "phase" in spec.filters:  # a part of backward
            keep &= iv["recompute"].to_numpy(bool) if "recompute" in iv else False
        elif self.phase is not None and "phase" in spec.filters:
            keep &= iv["phase"].astype(str).str.lower() == self.phase
        if self.module is not None and "module" in spec.filters:
            keep &= iv["module"].astype(str).isin(self._modules(iv["module"]))
        return iv if bool(keep.all()) else iv[keep.to_numpy()]

    def windows(self, steps: pd.DataFrame) -> pd.DataFrame:
        return steps if self.steps is None else steps[steps["step"].isin(self.steps).to_numpy()]

    def rows(self, df: pd.DataFrame) -> pd.DataFrame:
        """Rows of a computed table that match the filters on its key columns."""
        if self.phase is None and self.module is None:
            return df
        keep = pd.Series(True, index=df.index)
        if self.phase is not None and "phase" in df.columns:
            # recompute is a part of backward: its rows are backward's
            want = "backward" if self.phase == "recompute" else self.phase
            keep &= df["phase"].astype(str).str.lower() == want
        if self.module is not None and "module" in df.columns:
            keep &= df["module"].astype(str).isin(self._modules(df["module"]))
        return df if bool(keep.all()) else df[keep.to_numpy()].reset_index(drop=True)

    def _modules(self, present: Iterable[str]) -> tuple[str, ...]:
        if self.modules is not None:
            return self.modules
        return select_modules(self.module or "", known_categories(present))


def known_categories(present: Iterable[str] = ()) -> list[str]:
    """Module categories a ``--module`` word can name: the built-in ones in the paper's order,
    Other, then any other category present in the run (a user's taxonomy)."""
    out = [*MODULE_CATEGORIES, "Other"]
    out += sorted({str(c) for c in present if str(c) and str(c) not in out})
    return out


def select_modules(text: str, known: list[str]) -> tuple[str, ...]:
    """The categories ``text`` names: each comma-separated term is a case-insensitive exact
    category name, else a unique prefix of one, else a unique substring of one. A term matching
    several categories, or none, raises :class:`FilterError` (one line, naming them)."""
    terms = [w.strip() for w in text.split(",") if w.strip()]
    if not terms:
        raise FilterError(f"--module {text!r}: name a module category; known: {', '.join(known)}")
    out: list[str] = []
    for term in terms:
        for c in _matches(term, known):
            if c not in out:
                out.append(c)
    return tuple(out)


def _matches(term: str, known: list[str]) -> list[str]:
    w = term.casefold()
    for test in (str.__eq__, str.startswith, str.__contains__):
        hit = [c for c in known if test(c.casefold(), w)]
        if len(hit) == 1:
            return hit
        if len(hit) > 1:
            raise FilterError(
                f"--module {term!r} matches {', '.join(hit)}: name one, or several separated by commas"
            )
    raise FilterError(f"--module {term!r}: no such module category; known: {', '.join(known)}")


_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")
#: Step numbers are 64-bit at most: longer digit strings are read as this (no 4,300-digit int).
_HUGE = 1 << 64


def parse_steps(text: str) -> StepRanges:
    """``"3-7"``, ``"2,4,9"``, ``"1-3,8"`` -> the ranges, as written (checked, not expanded)."""
    out = []
    for part in text.split(","):
        m = _RANGE.match(part)
        if not m:
            raise ValueError(f"--steps {text!r}: expected numbers and ranges like 3-7 or 2,4,9")
        lo, hi = _number(m.group(1)), _number(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"--steps {text!r}: range {m.group(1)}-{m.group(2)} runs backwards")
        out.append((lo, hi))
    return tuple(out)


def _number(digits: str) -> int:
    return int(digits) if len(digits) <= 20 else _HUGE


def _steps_in(ranges: StepRanges, steps: Iterable[int]) -> tuple[int, ...]:
    """The ``steps`` that ``ranges`` hold, sorted; :class:`FilterError` when none."""
    present = sorted(set(steps))
    kept = tuple(s for s in present if any(lo <= s <= hi for lo, hi in ranges))
    if not kept:
        asked = ",".join(f"{lo}" if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)
        here = ranges_text(present) if present else "none"
        raise FilterError(f"--steps {asked}: no such step; the steps here are {here}", option="--steps")
    return kept


def ranges_text(steps: list[int]) -> str:
    """Sorted step numbers as ranges: ``1-3,7``."""
    runs: list[list[int]] = []
    for s in steps:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
