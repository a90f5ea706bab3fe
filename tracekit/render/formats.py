"""Render tables to JSON, CSV, Markdown and Parquet. Same DataFrames, every format.

JSON is the public interface: ``{"meta": {...}, "tables": {name: [records]}}`` (docs/cli.md).
CSV cells that a spreadsheet would run as a formula (leading ``=``, ``+``, ``-``, ``@``) are
prefixed with ``'``; Markdown cells are escaped so trace names cannot change the table.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from ..pipeline.checks import warning_lines
from .json_rows import clean, rows_text

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def records(df: pd.DataFrame) -> list[dict]:
    out = []
    cols = list(df.columns)
    for row in df.itertuples(index=False, name=None):
        out.append({c: clean(v) for c, v in zip(cols, row)})
    return out


def to_json(meta: dict, tables: dict[str, pd.DataFrame]) -> str:
    """``{"meta": meta, "tables": {name: records}}``, indented (:func:`json_pieces`, whole)."""
    return "".join(json_pieces(meta, tables))


#: Rows encoded at once by :func:`json_pieces`.
CHUNK_ROWS = 2048


def _dumps(obj) -> str:
    return json.dumps(obj, indent=2, default=str, allow_nan=False)


def _nested(text: str, level: int) -> str:
    """JSON ``text`` (indented from level 0) as a value at ``level`` (JSON text has no raw
    line break inside a string, so every line break is the indentation's)."""
    return text.replace("\n", "\n" + "  " * level)


def _rows(df: pd.DataFrame) -> str:
    """The rows of ``df`` in the document (the first one's ``{`` unindented): a column at a
    time (:func:`tracekit.render.json_rows.rows_text`), else a dict per row as ``json.dumps``
    writes it (a frame with a cell that is not a scalar)."""
    fast = rows_text(df)
    if fast is not None:
        return fast
    return _nested(_dumps(records(df))[4:-2], 2)  # "{...},\n  {...}" of "[\n  {...}\n]"


def json_pieces(meta: dict, tables: Mapping[str, pd.DataFrame]) -> Iterator[str]:
    """The text of ``json.dumps({"meta": meta, "tables": {name: records(df)}}, indent=2)``,
    character for character, in pieces of at most :data:`CHUNK_ROWS` rows: a run of a
    thousand ranks has hundreds of thousands of rows, and the whole document as Python dicts
    and one string held several times its size (docs/performance.md)."""
    yield '{\n  "meta": ' + _nested(_dumps(meta), 1) + ',\n  "tables": '
    if not tables:
        yield "{}\n}"
        return
    yield "{"
    for i, (name, df) in enumerate(tables.items()):
        yield ("," if i else "") + "\n    " + _dumps(name) + ": "
        if not len(df):
            yield "[]"
            continue
        yield "["
        for start in range(0, len(df), CHUNK_ROWS):
            yield ("," if start else "") + "\n      " + _rows(df.iloc[start : start + CHUNK_ROWS])
        yield "\n    ]"
    yield "\n  }\n}"


#: Line breaks become spaces: the CSV writer does not even quote a cell for a bare "\r", so a
#: reader would start a new row there whose first cell could be a formula; with no breaks at all
#: every row is one line for any reader (names from traces never need one).
_BREAKS = str.maketrans(dict.fromkeys("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029", " "))


def safe_csv_cell(v):
    if isinstance(v, str):
        if v.startswith(_FORMULA_START):
            v = "'" + v
        v = v.translate(_BREAKS)
    return v


def csv_float(f: float) -> str:
    """A float in CSV: the shortest text that reads back as the same float (as JSON has it),
    positional (``102441234.5``, ``0.000000028``, never ``1.02441e+08``) below 10^16 (past that,
    an exponent: no 300-digit cells), ``-0`` as ``0``."""
    if abs(f) >= 1e16:
        return repr(f)
    return np.format_float_positional(f + 0.0, unique=True, trim="-")


def to_csv(df: pd.DataFrame) -> str:
    safe = df.copy()
    for c in safe.columns:
        # Every column that is not numbers (object, category, pandas' string dtype, ...).
        if not (pd.api.types.is_numeric_dtype(safe[c]) or pd.api.types.is_bool_dtype(safe[c])):
            safe[c] = safe[c].astype(object).map(safe_csv_cell)
    safe.columns = [safe_csv_cell(str(c)) for c in safe.columns]
    buf = io.StringIO()
    safe.to_csv(buf, index=False, float_format=csv_float)
    return buf.getvalue()


#: What an autolink extension (GFM's, markdown-it's linkify) would make a link of: a scheme's
#: ``:`` before ``//``, a dot between two word characters (``www.x``, ``evil.com``), an ``@``.
#: Each is backslash-escaped: it renders as itself, and the escape splits the text a linkifier
#: scans, so a name cannot add a link (tests/test_hostile_round4.py renders with markdown-it).
_LINKISH = re.compile(r":(?=//)|(?<=\w)\.(?=[^\W\d_])|@")


def md_escape(v) -> str:
    s = str(v)
    for ch in ("\\", "|", "`", "*", "_", "<", ">", "[", "]"):
        s = s.replace(ch, "\\" + ch)
    s = _LINKISH.sub(lambda m: "\\" + m.group(0), s)
    return s.replace("\n", " ").replace("\r", " ")


def to_markdown(title: str, df: pd.DataFrame) -> str:
    lines = [f"### {md_escape(title)}", ""]
    if df.empty:
        return "\n".join(lines + ["(no rows)", ""])
    cols = list(df.columns)
    lines.append("| " + " | ".join(md_escape(c) for c in cols) + " |")
    lines.append(
        "|" + "|".join("---:" if pd.api.types.is_numeric_dtype(df[c]) else "---" for c in cols) + "|"
    )
    for row in df.itertuples(index=False, name=None):
        cells = []
        for v in row:
            if isinstance(v, (float, np.floating)):
                cells.append(f"{v:.3f}")
            else:
                cells.append(md_escape(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines + [""])


def _meta_lines(meta: dict) -> list[str]:
    """The meta as a short Markdown list."""
    steps = meta.get("complete_steps") or {}
    counts = {len(v) for v in steps.values()}
    per_rank = (
        f"{counts.pop()} per rank"
        if len(counts) == 1 and len(steps) > 1
        else "; ".join(f"rank {r}: {len(v)}" for r, v in steps.items())
    )
    from .common import device_lines, mode_text

    devices = device_lines(meta)
    lines = [
        f"- **trace**: {md_escape(meta.get('path', ''))}",
        f"- **mode**: {md_escape(mode_text(meta))}"
        + (
            f"; **devices**: {md_escape(', '.join(map(str, meta['devices'])))}"
            if meta.get("devices") and not devices
            else ""
        ),
        *(f"- **device**: {md_escape(d.removeprefix('device: '))}" for d in devices),
        f"- **times**: ms, {md_escape(meta.get('aggregation', ''))}",
        f"- **ranks**: {len(steps)}; **steps analysed**: {md_escape(per_rank)}",
    ]
    if meta.get("filters"):
        from .common import filters_text

        lines.append("- **filters**: " + md_escape(filters_text(meta["filters"])))
    lines += [f"- **note**: {md_escape(n)}" for n in meta.get("notices", [])]
    lines += [f"- **warning**: {md_escape(line)}" for line in warning_lines(meta.get("warnings", []))]
    return lines


def markdown_table(name: str, df: pd.DataFrame, top: int | None = None) -> str:
    """One table for people: units in headers, no all-zero rows, the top rows of long tables."""
    from .common import cell, header, numeric, shown_rows, title

    lines = [f"### {md_escape(title(name))}", ""]
    shown = shown_rows(name, df, top=top)
    if shown.frame.empty:
        return "\n".join(lines + ["(no rows)", ""])
    cols = list(df.columns)
    lines.append("| " + " | ".join(md_escape(header(name, c)) for c in cols) + " |")
    lines.append("|" + "|".join("---:" if numeric(df, c) else "---" for c in cols) + "|")
    for row in shown.frame[cols].itertuples(index=False, name=None):
        lines.append("| " + " | ".join(md_escape(cell(name, c, v)) for c, v in zip(cols, row)) + " |")
    notes = shown.notes()
    return "\n".join(lines + ([""] + [f"_{md_escape(n)}_" for n in notes] if notes else []) + [""])


def markdown_report(meta: dict, tables: dict[str, pd.DataFrame], top: int | None = None) -> str:
    """A whole run as Markdown: a title, the meta as a list, each table with units."""
    if "a" in meta and "b" in meta:
        head = ["# tracekit comparison", ""]
        for k in ("a", "b"):
            head += [f"**{k.upper()}**", ""] + _meta_lines(meta[k]) + [""]
    else:
        head = (
            [f"# tracekit: {md_escape(Path(str(meta.get('path', ''))).name)}", ""] + _meta_lines(meta) + [""]
        )
    from .common import for_people

    shown = {k: v for k, v in tables.items() if for_people(k)}
    return "\n".join(head) + "\n" + "\n".join(markdown_table(k, v, top) for k, v in shown.items())


def write_parquet(tables: dict[str, pd.DataFrame], out_dir: Path) -> list[Path]:
    """One ``<table>.parquet`` per table in ``out_dir``, written by :mod:`tracekit.safewrite`."""
    from ..safewrite import write_members

    def member(df: pd.DataFrame):
        df2 = df.copy()
        for c in df2.columns:
            if isinstance(df2[c].dtype, pd.CategoricalDtype):
                df2[c] = df2[c].astype(str)
        return lambda f: df2.to_parquet(f, index=False)

    return write_members(out_dir, {f"{name}.parquet": member(df) for name, df in tables.items()})
