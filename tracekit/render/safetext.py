"""Text from traces and file names, made safe once, at the output boundary.

File names and trace names are attacker-controlled. Before they reach a terminal, an HTML page,
Markdown or CSV, :func:`clean` replaces with U+FFFD:

* C0 and C1 control characters (newline, ESC, DEL, ...): they split lines or drive the terminal;
* bidirectional marks and overrides (U+200E/F, U+061C, U+202A-202E, U+2066-2069): they reorder
  what the reader sees;
* line and paragraph separators (U+2028/9);
* lone surrogates (the bytes of a non-UTF-8 file name, as Python decodes them): they cannot be
  encoded and would end a write half-way.

:func:`bounded` also shortens a name to a length a terminal can render in linear time.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported by the one function that needs it: the CLI imports this
    import pandas as pd

_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
#: Longest name shown in a terminal table or message (the rest is replaced by an ellipsis).
TERMINAL_NAME_CHARS = 300


def clean(text: Any) -> str:
    """``text`` as a string with no control, bidi or unencodable characters."""
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    return _UNSAFE.sub("\ufffd", str(text))


def cut(text: Any, limit: int = TERMINAL_NAME_CHARS) -> str:
    """``text`` as a string of at most ``limit`` characters (an ellipsis marks a cut)."""
    s = str(text)
    return s[: limit - 1] + "\u2026" if len(s) > limit else s


def bounded(text: Any, limit: int = TERMINAL_NAME_CHARS) -> str:
    """:func:`clean`, and at most ``limit`` characters (an ellipsis marks a cut)."""
    return clean(cut(text, limit))


def clean_obj(obj: Any) -> Any:
    """Every string inside dicts, lists and tuples cleaned (keys too); other values kept."""
    if isinstance(obj, str):
        return clean(obj)
    if isinstance(obj, dict):
        return {clean_obj(k): clean_obj(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(clean_obj(v) for v in obj)
    return obj


def clean_frame(df: pd.DataFrame, limit: int | None = None) -> pd.DataFrame:
    """A copy of ``df`` whose text columns (and column names) are cleaned (and bounded)."""
    import pandas as pd

    fix = clean if limit is None else (lambda v: bounded(v, limit))
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            cats = col.cat.categories
            if cats.dtype == object:
                new = [fix(v) for v in cats]
                if len(set(new)) == len(new):
                    out[c] = col.cat.rename_categories(new)
                else:  # two names differed only in unsafe characters: plain strings instead
                    out[c] = col.astype(object).map(lambda v: v if not isinstance(v, str) else fix(v))
        elif col.dtype == object or pd.api.types.is_string_dtype(col.dtype):
            out[c] = col.map(lambda v: fix(v) if isinstance(v, str) else v)
    out.columns = [fix(c) if isinstance(c, str) else c for c in out.columns]
    return out


def clean_tables(tables: dict[str, pd.DataFrame], limit: int | None = None) -> dict[str, pd.DataFrame]:
    return {clean(k): clean_frame(v, limit) for k, v in tables.items()}
