"""The fast reader (chunked typed decode, vectorised columns) == the plain reading of the file.

The reference below is the straightforward reader: ``json.load`` into dicts, one Python loop per
event, the same filtering and conversion rules. The fast reader must give the very same columns
on every real trace, whether it decodes the file whole or streams it in many small slices.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from decimal import ROUND_HALF_EVEN, Decimal

import numpy as np
import pandas as pd
import pytest
from events_equal import assert_events_equal
from shared_traces import params

import tracekit.read.files as F
import tracekit.read.reader as R
from tracekit.read.schema import RAW_FIELDS, TraceDoc

pytestmark = pytest.mark.shared

#: The Python frames of a backward() call, kept as phase evidence (docs/metrics.md).
AUTOGRAD_FRAME = re.compile(
    r"torch/(?:_tensor|autograd/__init__)\.py\(\d+\): backward$|torch/autograd/graph\.py\(\d+\): "
    r"_engine_run_backward$|^<built-in method run_backward of torch\._C\._EngineBase"
)


def _text(path) -> bytes:
    raw = open(path, "rb").read()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _load(path):
    return json.loads(_text(path), parse_float=Decimal)  # the decimals exactly as written


def _raw_values(text: str, key: str) -> list[str]:
    """The JSON text of the value of every member named ``key``, in file order: where the
    quoted key is followed by ``:`` (a string with that text inside would hold escaped
    quotes; a string value is never followed by ``:``), to where ``raw_decode`` ends."""
    dec = json.JSONDecoder()
    out = []
    for m in re.finditer(re.escape(json.dumps(key)) + r"\s*:\s*", text):
        _, end = dec.raw_decode(text, m.end())
        out.append(text[m.end() : end])
    return out


def _shape_texts(doc: dict, text: str) -> dict[int, dict[str, str]]:
    """For each event (by its position in ``traceEvents``) with a shape arg, each such arg's
    JSON text as the file writes it; found in file order, and checked to be that value."""
    texts: dict[int, dict[str, str]] = {}
    for col, key in RAW_FIELDS.items():
        raw = iter(_raw_values(text, key))
        for i, ev in enumerate(doc["traceEvents"]):
            a = ev.get("args")
            if isinstance(a, dict) and key in a:
                t = next(raw)
                assert json.loads(t, parse_float=Decimal) == a[key], (key, t)
                texts.setdefault(i, {})[col] = "" if a[key] is None else t
    return texts


def _int(v, none=-1):
    if v is None:
        return none
    if isinstance(v, float):
        v = int(v)
    elif isinstance(v, str):
        try:
            v = int(v)
        except ValueError:
            return none
    return ((v + (1 << 63)) % (1 << 64)) - (1 << 63)


def _first(args: dict, key: str, instead: str):
    """``args[key]``, or where it is absent or null ``args[instead]``."""
    return args.get(instead) if args.get(key) is None else args[key]


def _number(v) -> float:
    return float(v) if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) else math.nan


def _bytes(kind: int, args: dict) -> float:
    """A memory event's ``Bytes``; a copy's ``bytes``, else (not a number: MTIA's DMA requests)
    its ``size``; any other event's ``bytes``."""
    if kind == R.MEMORY:
        return _number(args.get("Bytes"))
    got = _number(args.get("bytes"))
    return _number(args.get("size")) if kind == R.MEMCPY and math.isnan(got) else got


def _times(values):
    """Microseconds as written -> nanoseconds, exactly (the decimal value x 1000, to the ns)."""
    ok = [v is not None and not isinstance(v, str) and -R._MAX_US < v < R._MAX_US for v in values]
    ns = [int((Decimal(v) * 1000).to_integral_value(ROUND_HALF_EVEN)) if k else 0 for v, k in zip(values, ok)]
    return ns, ok


def reference_frame(path) -> pd.DataFrame:
    rows = []
    text = _text(path).decode()
    doc = json.loads(text, parse_float=Decimal)
    shapes = _shape_texts(doc, text)
    for i, ev in enumerate(doc["traceEvents"]):
        ph, cat, name = ev.get("ph"), ev.get("cat"), ev.get("name")
        if ph == "M":
            continue
        if name == "[memory]" and ph in ("i", "I"):  # an allocator event, in any category
            rows.append((R.MEMORY, ev))
            continue
        if cat is None:
            continue
        if cat == "mtia_ccp_events":  # MTIA's device events, by name (docs/metrics.md)
            if ph == "X" and name not in ("event_record", "event_wait"):
                kind = R.MEMCPY if name == "dma_request" else R.KERNEL
                rows.append((kind, ev | {"shape texts": shapes.get(i, {})}))
            continue
        kind = R._CATEGORY_KIND.get(cat, R._CATEGORY_KIND.get(cat.lower()))
        if kind is None:
            continue
        if kind <= R.CPU_OP or kind in (R.ANNOTATION, R.CUDA_SYNC):
            if ph != "X":
                continue
        elif kind == R.PYTHON:
            n = name or ""
            if not (
                n.startswith(R._PYTHON_KEEP_PREFIX)
                or any(s in n for s in R._PYTHON_KEEP_SUBSTR)
                or AUTOGRAD_FRAME.search(n)
            ):
                continue
        elif kind == R.FLOW_LAUNCH or ph not in ("s", "f", "t"):
            continue
        rows.append((kind, ev | {"shape texts": shapes.get(i, {})}))
    for kind, e in rows:
        e.setdefault("shape texts", {})
    ts, ts_ok = _times([e.get("ts") for _, e in rows])
    dur, dur_ok = _times([0 if e.get("dur") is None else e.get("dur") for _, e in rows])
    out = []
    for (kind, e), t, tok, d, dok in zip(rows, ts, ts_ok, dur, dur_ok):
        if not tok:
            continue
        d = max(d, 0)
        if d > (1 << 55) or not dok:
            continue
        a = e.get("args") or {}
        out.append(
            {
                "kind": kind,
                "name": e.get("name") or "",
                "pid": _int(e.get("pid")),
                "tid": _int(e.get("tid")),
                "ts": t,
                "dur": d,
                "flow_id": _int(e.get("id")),
                "flow_ph": ph if (ph := e.get("ph")) in ("s", "f", "t") else "",
                "corr": _int(a.get("correlation")),
                # a cuda_sync event's wait_on_* args, where the cpu_op fields are absent
                "seq": _int(_first(a, "Sequence number", "wait_on_cuda_event_record_corr_id")),
                "fwd_tid": _int(_first(a, "Fwd thread id", "wait_on_stream")),
                "stream": _int(a.get("stream")),
                "collective": a.get("Collective name") or "",
                "bytes": _bytes(kind, a),
                **{c: e["shape texts"].get(c, "") for c in RAW_FIELDS},
                "device_type": v if type(v := a.get("Device Type")) is int else -1,
                "device_id": v if type(v := a.get("Device Id")) is int else -1,
                "total_allocated": _number(a.get("Total Allocated")),
                "total_reserved": _number(a.get("Total Reserved")),
                "addr": _int(a.get("Addr")),
            }
        )
    return pd.DataFrame(out, columns=list(R._COLUMNS))


def _same(fast: pd.DataFrame, ref: pd.DataFrame) -> None:
    assert list(fast.columns) == list(ref.columns)
    assert len(fast) == len(ref)
    for c in fast.columns:
        a = fast[c]
        if isinstance(a.dtype, pd.CategoricalDtype):
            assert a.astype(str).tolist() == ref[c].astype(str).tolist(), c
        else:
            np.testing.assert_array_equal(a.to_numpy(), ref[c].to_numpy().astype(a.dtype), err_msg=c)


@pytest.mark.parametrize("path", params())
def test_fast_reader_equals_reference(path):
    """Both parts of the read: the events, and the [memory] events split off as they are read
    (RawTrace.memory), each equal to the reference's rows of that kind, in file order."""
    raw, ref = R.read_trace(path), reference_frame(path)
    ref_events, ref_memory = R.split_memory(ref)
    _same(raw.events, ref_events)
    _same(raw.memory, ref_memory)


def _whole(path, monkeypatch) -> R.RawTrace:
    monkeypatch.setattr(R, "CHUNK_BYTES", 1 << 40)  # one decode of the whole text
    return R.read_trace(path)


def _streamed(path, monkeypatch, stats: list) -> R.RawTrace:
    """Slices of 16 KiB, the text arriving 4 KiB at a time: the buffer is cut and compacted
    many times, as for a big file."""
    monkeypatch.setattr(R, "CHUNK_BYTES", 1 << 14)
    monkeypatch.setattr(F, "PIECE_BYTES", 1 << 12)
    real = R.stream_decode

    def spy(pieces, builder, chunk_bytes, stats_=None, **kw):
        st: dict = {}
        got = real(pieces, builder, chunk_bytes, st, **kw)
        stats.append((got, st))
        return got

    monkeypatch.setattr(R, "stream_decode", spy)
    return R.read_trace(path)


@pytest.mark.parametrize("gz", [True, False], ids=["gzip", "plain"])
@pytest.mark.parametrize("path", params())
def test_streamed_decode_equals_whole_decode(path, gz, monkeypatch, tmp_path):
    """Every shared trace, gzip and plain: streamed == decoded whole, and never more than a few
    slices of text held at once (a big trace does not fit, in general)."""
    text = gzip.decompress(raw) if (raw := open(path, "rb").read())[:2] == b"\x1f\x8b" else raw
    p = tmp_path / ("t.json.gz" if gz else "t.json")
    p.write_bytes(gzip.compress(text, compresslevel=1) if gz else text)
    whole = _whole(p, monkeypatch)
    stats: list = []
    streamed = _streamed(p, monkeypatch, stats)
    assert_events_equal(whole.events, streamed.events)
    assert whole.meta == streamed.meta
    assert whole.warnings == streamed.warnings
    ((got, st),) = stats
    if len(text) > 4 * (1 << 14):
        assert isinstance(got, TraceDoc) and st["slices"] > 1, st
        biggest_event = max(len(e) for e in re.split(rb"\}\s*,\s*\{", text))
        assert st["peak_buffer"] <= 2 * (1 << 14) + (1 << 12) + 2 * biggest_event, st


def test_an_event_longer_than_the_read_margin_is_read_by_whole_pieces(tmp_path, monkeypatch):
    """A plain file's reads stop just past where the next cut is looked for; when no cut is
    there (an event longer than the margin), the rest comes in whole pieces, not margin-sized
    reads each followed by a search of the whole buffer. The events are those of a whole read."""
    evs = [
        {"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(300)
    ]
    evs[100]["args"] = {"x": "y" * (1 << 20)}
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": evs}))
    reads = []
    real = F.PlainText.readinto

    def spy(self, out):
        got = real(self, out)
        reads.append(got)
        return got

    monkeypatch.setattr(F.PlainText, "readinto", spy)
    stats: list = []
    streamed = _streamed(p, monkeypatch, stats)
    assert len(streamed.events) == 300
    ((_, st),) = stats
    assert st["slices"] > 1
    assert len(reads) <= p.stat().st_size // (1 << 12) + 4 * st["slices"] + 8, (len(reads), st)


def test_streamed_decode_is_used_and_survives_brackets_in_strings(tmp_path, monkeypatch):
    """Names with '}, {' and ']' inside strings, and a log list and metadata after the array."""
    evs = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": f"op}}, {{x]{i}",
            "pid": 1,
            "tid": 1,
            "ts": i * 10.5,
            "dur": 3,
            "args": {"Sequence number": i},
        }
        for i in range(3000)
    ]
    doc = {
        "schemaVersion": 1,
        "traceEvents": evs,
        "logs": ["a] }", "b]"],
        "x": {"y": [1]},
        "distributedInfo": {"rank": 3, "world_size": 8},
        "deviceProperties": [{"name": "GPU X"}],
    }
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=1))
    stats: list = []
    got = _streamed(p, monkeypatch, stats)
    assert isinstance(stats[0][0], TraceDoc) and stats[0][1]["slices"] > 10
    _same(got.events, R.split_memory(reference_frame(p))[0])
    assert got.meta["events_in_file"] == 3000
    assert (got.meta["rank"], got.meta["world_size"], got.meta["devices"]) == (3, 8, ["GPU X"])
