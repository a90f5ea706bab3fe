"""The fuzz targets of issue 39's surfaces: the shapes reader, memory events, merged-file
splitting and the renderers (the three older targets reach none of them).

Each takes one input (bytes), is deterministic in it, and raises when tracekit breaks a promise
of docs/security.md:

* :func:`shapes`: the input is an op name (picked from the modelled ops by its first byte) and
  the texts of ``Input Dims``, ``Input type`` and ``Concrete Inputs`` (split at NUL bytes). The
  model is None, or finite, non-negative numbers within ``MAX_MODELLED`` (no exception).
* :func:`memory`: the input is the ``args`` of ``[memory]`` events (a JSON list, or anything)
  put into a small trace with steps; read by both readers (native and msgspec: the same events,
  memory events, meta and warnings, and no memory event kept whose numbers reach
  ``MAX_MEMORY_BYTES``), analysed (the memory tables) and written in every format: exit 0 or a
  one-line ``TraceError``; strict JSON; no ``inf`` shown; at most ``MAX_DEVICES`` devices.
* :func:`merged`: the input is a trace file; read, then split into ranks: None, or at most
  ``rank_cap`` ranks with every device event in one rank only, or a one-line ``TraceError``.
* :func:`render`: the input is a table of hostile names and numbers (any text and floats,
  infinities and NaN included), written through the output boundary in every format: JSON
  strict, CSV one line per row, Markdown with no link, image or HTML once rendered by a
  CommonMark renderer (markdown-it, with linkify when installed), no raw control character in
  the terminal or Markdown, no ``inf`` text.
"""

from __future__ import annotations

import io
import json
import math
import re
import struct
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.errors import TraceError

_TMP = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-surfaces-"))
_RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_INF = re.compile(r"(?i)(?<![a-z])-?inf(inity)?(?![a-z])|(?<![a-z])nan(?![a-z])")


_NOT_NUMBER = re.compile(r"(?i)inf|nan")


class Broken(AssertionError):
    """tracekit broke a promise on this input."""


def _one_line(e: TraceError) -> None:
    text = str(e)
    if "\n" in text or "could not analyse" in text:
        raise Broken(f"not a clean one-line error: {text[:300]!r}")


def _strict(text: str) -> object:
    def refuse(c):
        raise Broken(f"not strict JSON: {c}")

    return json.loads(text, parse_constant=refuse)


# The shapes reader ---------------------------------------------------------------------------


def shapes(data: bytes) -> None:
    from tracekit.perf import ops

    names = sorted(ops.READERS)
    name = names[data[0] % len(names)] if data else names[0]
    parts = data[1:].split(b"\x00")
    texts = [p.decode("utf-8", "replace") if p else None for p in (parts + [b"", b"", b""])[:3]]
    ops.model.cache_clear()
    got = ops.model(name, *texts)
    if got is None:
        return
    if not ops.sane(got) or not (math.isfinite(got.flops) and math.isfinite(got.bytes)):
        raise Broken(f"{name}: model out of bounds: {got.flops!r} FLOPs, {got.bytes!r} bytes")


# Memory events -------------------------------------------------------------------------------


def _memory_trace(data: bytes) -> dict:
    """A two-step trace whose memory events are the input's: a JSON list of args objects (each
    one event, times spread over step 1), or else the bytes read as (device, bytes) pairs."""
    doc = _mini()
    try:
        args = json.loads(data)
    except (ValueError, RecursionError):
        args = None
    if not isinstance(args, list):
        pairs = struct.iter_unpack("<bd", data[: len(data) // 9 * 9])
        args = [{"Device Type": 1, "Device Id": d, "Bytes": b, "Addr": i} for i, (d, b) in enumerate(pairs)]
    for i, a in enumerate(args[:4096]):
        ev = {"ph": "i", "s": "t", "cat": "[memory]", "name": "[memory]", "pid": 1, "tid": 1}
        doc["traceEvents"].append({**ev, "ts": 1000 + i % 90, "args": a})
    return doc


def _mini() -> dict:
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]
    for s in range(2):
        t = 1000 + 100 * s
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s + 1}", "pid": 1, "tid": 1})
        ev[-1].update(ts=t, dur=95)
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 5, "dur": 30}
        )
        ev[-1]["args"] = {"External id": s + 1}
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1})
        ev[-1].update(ts=t + 7, dur=5, args={"correlation": s + 1})
        ev.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": t + 15, "dur": 10})
        ev[-1]["args"] = {"correlation": s + 1, "device": 0, "stream": 7}
    return {"traceEvents": ev}


def memory(data: bytes) -> None:
    import tracekit
    from tracekit.pipeline.memory import MAX_DEVICES

    path = _TMP / "memory.json"
    try:
        text = json.dumps(_memory_trace(data), allow_nan=False)
    except (ValueError, TypeError, RecursionError):
        return  # not a JSON document: the reader's targets cover that
    path.write_text(text)
    from tracekit_fuzz import _read, _same

    theirs = _read(path, False, None)  # msgspec, then the native reader (left on): the same,
    _same(_read(path, True, None), theirs)  # and the memory bound holds
    try:
        a = tracekit.load(path, cache=False, jobs=1, tables=["memory", "memory_timeline", "memory_modules"])
        tables = a.tables(per_step=False)
    except TraceError as e:
        _one_line(e)
        return
    for name, df in tables.items():
        if "device" in df and df["device"].nunique() > MAX_DEVICES:
            raise Broken(f"{name}: {df['device'].nunique()} devices")
    _write_all(a.meta, tables, terminal=False)


# Merged-file splitting -----------------------------------------------------------------------


def merged(data: bytes) -> None:
    from tracekit.ranks.merged import rank_cap, split_ranks
    from tracekit.read.reader import KERNEL, MEMCPY, MEMSET, read_trace

    path = _TMP / "merged.json"
    path.write_bytes(data)
    try:
        raw = read_trace(path)
        parts = split_ranks(raw)
    except TraceError as e:
        _one_line(e)
        return
    if parts is None:
        return
    n = len(raw.events) + (0 if raw.memory is None else len(raw.memory))
    if not 2 <= len(parts) <= rank_cap(n):
        raise Broken(f"{len(parts)} ranks from {n} events")
    seen: set = set()
    for p in parts:
        dev = p.events[np.isin(p.events["kind"].to_numpy(), (KERNEL, MEMCPY, MEMSET))]
        pids = set(dev["pid"].tolist())
        if pids & seen:
            raise Broken(f"device(s) {sorted(pids & seen)[:5]} in two ranks")
        seen |= pids


# Renderers -----------------------------------------------------------------------------------


def _cells(data: bytes) -> pd.DataFrame:
    """A table from the input: text cells (UTF-8 pieces split at NUL) and float cells (8-byte
    doubles, infinities and NaN included), one row per text piece."""
    pieces = data.split(b"\x00")
    # names never spell inf or nan (a name may; the check is that no number is shown so)
    names = [_NOT_NUMBER.sub("x", p.decode("utf-8", "replace")[:400]) for p in pieces[:64]] or [""]
    raw = zlib.crc32(data).to_bytes(4, "little") + data
    floats = [v for (v,) in struct.iter_unpack("<d", raw[: len(raw) // 8 * 8])] or [0.0]
    n = len(names)
    return pd.DataFrame(
        {
            "name": names,
            "op": [names[(i + 1) % n] for i in range(n)],
            "step": np.arange(n, dtype=np.int64),
            "time_ms": [floats[i % len(floats)] for i in range(n)],
            "peak_pct": [floats[(i + 1) % len(floats)] for i in range(n)],
        }
    )


def render(data: bytes) -> None:
    df = _cells(data)
    meta = {
        "path": df["name"].iloc[0],
        "mode": "gpu",
        "devices": list(df["op"][:3]),
        "warnings": [{"code": "x", "message": df["name"].iloc[-1], "rank": 0, "step": None}],
        "notices": [df["op"].iloc[-1]],
        "mfu": {"0": {"mean_pct": float(df["time_ms"].iloc[0])}},
    }
    _write_all(meta, {"kernels": df})


def _write_all(meta: dict, tables: dict, terminal: bool = True) -> None:
    """Every format through the CLI's output boundary (:func:`tracekit.cli.io.write_output`);
    the terminal only with ``terminal`` (the memory target leaves it to the render target: a
    rich table of thousands of rows costs seconds under the sanitizers)."""
    from tracekit.render import formats
    from tracekit.render.finite import finite_output
    from tracekit.render.html import render_report
    from tracekit.render.safetext import clean_obj, clean_tables

    meta, tables = finite_output(meta, tables)
    _strict(formats.to_json(meta, tables))
    shown_meta, shown = clean_obj(meta), clean_tables(tables)
    md = formats.markdown_report(shown_meta, shown)
    _check_text("markdown", md)
    _check_markdown(md)
    for name, df in shown.items():
        csv = formats.to_csv(df)
        if csv.count("\n") != len(df) + 1:
            raise Broken(f"CSV of {name}: {csv.count(chr(10))} lines for {len(df)} rows")
        _check_text("csv", csv)
    if terminal:
        _check_text("terminal", _terminal(shown_meta, shown))
    html = render_report(shown_meta, shown)
    cells = re.findall(r">([^<]*)<", html.split("<script", 1)[0])
    if any(_INF.search(c) for c in cells):
        raise Broken("inf in the HTML")


def _terminal(meta: dict, tables: dict) -> str:
    from rich.console import Console

    from tracekit.render import terminal

    out = io.StringIO()
    terminal.render(meta, tables, Console(file=out, width=140, highlight=False, no_color=True))
    return out.getvalue()


def _check_text(fmt: str, text: str) -> None:
    if fmt != "csv" and _RAW.search(text):
        raise Broken(f"raw control or bidi character in {fmt}")
    for token in re.findall(r"[^\s|,]+", text):
        if _INF.fullmatch(token.strip("'\"*")):
            raise Broken(f"{token!r} in {fmt}")


_TAGS = re.compile(r"<(?!/?(table|thead|tbody|tr|th|td|h\d|p|ul|li|strong|em|code|br|hr)\b)")


def _check_markdown(md: str) -> None:
    html = _MD.render(md)
    if "<a " in html or "<img" in html or _TAGS.search(html):
        raise Broken(f"markdown makes a link, image or HTML: {html[:300]!r}")


def _markdown_renderer():
    from markdown_it import MarkdownIt

    try:
        import linkify_it  # noqa: F401

        return MarkdownIt("gfm-like", {"linkify": True}).enable("linkify")
    except ImportError:
        return MarkdownIt("gfm-like")


_MD = _markdown_renderer()


def warm_up(target: str) -> None:
    """Run ``target`` once on a small valid input, so that no fuzzed input pays the imports."""
    mini = json.dumps(_mini()).encode()
    inputs = {
        "shapes": b'\x00[[2, 3], [3, 4]]\x00["float", "float"]',
        "memory": json.dumps([{"Device Type": 1, "Device Id": 0, "Bytes": 1024, "Addr": 1}]).encode(),
        "merged": mini,
        "render": b"warm\x00up",
    }
    globals()[target](inputs[target])
