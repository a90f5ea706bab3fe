"""The native reader (tracekit/read/_kineto.c through tracekit/read/native.py) == the msgspec reader.

Whatever the input -- every shared real trace, the sample traces, synthetic and builder traces,
the broken inputs of test_bad_input, and hypothesis-generated and mutated event texts (escapes,
unicode, huge ints, odd floats, missing fields, wrong types, truncations, deep nesting) --
reading it with the native fast path gives exactly what ``TRACEKIT_NATIVE=0`` (msgspec) gives:
the same columns, metadata and warnings, or the same one-line error; decoded whole and in small
slices. Where the scanner declines a run of events it must be because msgspec would fail on it
or because it is odd; it must never accept what msgspec refuses, nor differ from it.

Under AddressSanitizer and UndefinedBehaviorSanitizer (not in CI), from a copy of the tree:

    gcc -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined -std=c11 -fPIC \
        -shared -I$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
        tracekit/read/_kineto.c -o tracekit/read/_kineto$(python3-config --extension-suffix)
    TRACEKIT_TEST_INSTALLED=1 ASAN_OPTIONS=detect_leaks=0 TRACEKIT_FUZZ_EXAMPLES=1500 \
        LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)" \
        python -m pytest tests/test_native_reader.py
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest
from bad_inputs import mini_trace
from events_equal import assert_events_equal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_traces import params
from test_bad_input import BROKEN

import tracekit.read.files as F
import tracekit.read.native as N
import tracekit.read.reader as R
from tracekit.errors import TraceError
from tracekit.read.columns import _FrameBuilder
from tracekit.read.streaming import _EVENTS_DECODER, _TEXT_EVENTS_DECODER
from tracekit.testing import llama_training
from tracekit.testing.strategies import planted_traces

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
EXAMPLES = int(os.environ.get("TRACEKIT_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)


@pytest.fixture
def scans(monkeypatch):
    """How often the scanner took a run of events, and how often it declined."""
    seen = {"took": 0, "declined": 0}
    real = N.scan

    def spy(*args):
        got = real(*args)
        if N.enabled():
            seen["took" if got is not None else "declined"] += 1
        return got

    monkeypatch.setattr(N, "scan", spy)
    return seen


def _outcome(path, native: bool, chunk: int | None = None, jobs: int = 1):
    """What reading ``path`` gives: (events, meta, warnings), or the error line."""
    env = os.environ.get("TRACEKIT_NATIVE")
    os.environ["TRACEKIT_NATIVE"] = "1" if native else "0"
    saved = R.CHUNK_BYTES, F.PIECE_BYTES
    if chunk is not None:
        R.CHUNK_BYTES, F.PIECE_BYTES = chunk, max(64, chunk // 4)
    try:
        got = R.read_trace(path, jobs=jobs)
        mem = got.memory  # the memory events, split off at read: compared as well
        ev = got.events if mem is None or mem.empty else pd.concat([got.events, mem], ignore_index=True)
        return ev, got.meta, got.warnings
    except TraceError as e:
        return str(e)
    finally:
        R.CHUNK_BYTES, F.PIECE_BYTES = saved
        if env is None:
            del os.environ["TRACEKIT_NATIVE"]
        else:
            os.environ["TRACEKIT_NATIVE"] = env


def _same_outcome(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert_events_equal(a[0], b[0])
    assert a[1] == b[1]
    assert list(a[1].get("thread_names", {}).items()) == list(b[1].get("thread_names", {}).items())
    assert a[2] == b[2]


def _check_file(path, chunks=(None, 1 << 14)) -> None:
    for chunk in chunks:
        _same_outcome(_outcome(path, True, chunk), _outcome(path, False, chunk))


def test_the_extension_is_built():
    """``pip install -e .`` compiles tracekit/read/_kineto.c; without it every other test here would
    only compare msgspec with itself."""
    assert N._kineto is not None, "tracekit.read._kineto is not compiled: pip install -e ."
    assert N.enabled()


def test_the_scanner_keeps_what_its_classifier_keeps():
    """The scanner asks ``classify`` per distinct triple and keeps the events it gives a class
    >= 0; its metadata class is tracekit.read.schema's; a classifier's error propagates (it is not
    a quiet decline), as does a class outside int8."""
    from tracekit.read.schema import MEMCPY, MEMORY, METADATA

    assert N._kineto.METADATA == METADATA
    assert N._kineto.MEMORY == MEMORY
    assert N._kineto.MEMCPY == MEMCPY
    text = (
        b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}, {"ph": "X", "cat": "x", "name": "k"}'
    )
    asked: list = []
    got = N._kineto.scan(
        text, 0, len(text), False, lambda *t: asked.append(t) or (4 if t[1] == "kernel" else -3)
    )
    assert asked == [("X", "kernel", "k"), ("X", "x", "k")]
    assert (got["n"], got["kept"], bytes(got["kind"]), bytes(got["classes"])) == (2, 1, b"\x04", b"\x04\xfd")
    assert np.frombuffer(got["counts"], np.int64).tolist() == [1, 1]

    def boom(ph, cat, name):
        raise KeyError(name)

    with pytest.raises(KeyError):
        N._kineto.scan(text, 0, len(text), False, boom)
    with pytest.raises(ValueError):
        N._kineto.scan(text, 0, len(text), False, lambda *t: 300)


@pytest.mark.shared
@pytest.mark.parametrize("path", params())
def test_shared_traces_read_the_same(path, scans):
    _check_file(path, chunks=(None, 1 << 16))
    assert scans["took"] > 0 and scans["declined"] <= scans["took"] // 4, scans  # cuts in strings


@pytest.mark.shared
@pytest.mark.parametrize("path", params())
def test_shared_traces_read_the_same_in_parallel(path, tmp_path, monkeypatch, scans):
    """Forked children and the parent scan their ranges natively: == msgspec's serial read."""
    import tracekit.read.parallel as P
    from tracekit import forked

    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    if len(raw) < 1 << 20:
        pytest.skip("small: one range")
    p = tmp_path / "t.json"
    p.write_bytes(raw)
    monkeypatch.setattr(P, "MIN_BYTES", 0)
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)
    taken: list = []
    real = R.read_parallel
    monkeypatch.setattr(R, "read_parallel", lambda *a: taken.append(real(*a)) or taken[-1])
    _same_outcome(_outcome(p, True, 1 << 17, jobs=3), _outcome(p, False, None))
    assert taken and taken[-1] is not None


def test_sample_traces_read_the_same(scans):
    paths = sorted(p for p in SAMPLES.glob("*/*.json*") if "manifest" not in p.name)
    assert paths
    for p in paths:
        _check_file(p)
    assert scans["took"] >= len(paths) and scans["declined"] == 0


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"ts_format": "int"},
        {"big_ids": True, "old_categories": True, "shuffle": True},
        {"modules": "both", "autograd_thread": False, "fwd_thread_id": "tid"},
    ],
    ids=["float", "int", "big-ids-old-cats", "both-modules"],
)
def test_synthetic_traces_read_the_same(options, tmp_path, scans):
    trace, _ = llama_training(**options)
    p = tmp_path / "t.json"
    p.write_text(json.dumps(trace))
    _check_file(p, chunks=(None, 1 << 12))
    assert scans["took"] > 0 and scans["declined"] == 0


@pytest.mark.fuzz
@FUZZ
@given(planted_traces(max_steps=2, max_units=4))
def test_planted_traces_read_the_same(tmp_path_factory, built):
    p = built.write(tmp_path_factory.mktemp("planted") / "t.json")
    _check_file(p, chunks=(None, 1 << 11))


@pytest.mark.parametrize("name,data,needles", [pytest.param(n, d, k, id=i) for i, n, d, k in BROKEN])
def test_broken_inputs_fail_the_same(tmp_path, name, data, needles):
    p = tmp_path / name
    p.write_bytes(data)
    _check_file(p, chunks=(None, 256))


def _mini_with(events: list, **extra) -> bytes:
    doc = mini_trace()
    doc["traceEvents"] = events + doc["traceEvents"]
    doc.update(extra)
    return json.dumps(doc, ensure_ascii=False).encode()


# Odd but valid traces, each with the mini trace's valid kernels (so the columns are compared,
# not just a "nothing to analyse" error).
ODD = {
    "epoch-floats": _mini_with([{"ph": "X", "cat": "kernel", "name": "k", "ts": 1.7e15 + 0.123, "dur": 1.5}]),
    "epoch-ints-and-a-float": _mini_with(
        [
            {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 2**44, "dur": 1},
            {"ph": "X", "cat": "kernel", "ts": 0.5},
        ]
    ),
    "float-ties": _mini_with(
        [{"ph": "X", "cat": "kernel", "name": "t", "ts": 1.0005, "dur": 2.0015}]
        + [{"ph": "X", "cat": "kernel", "name": "e", "ts": 1.7e15, "dur": 0.0025}]
    ),
    "big-and-string-ids": _mini_with(
        [
            {"ph": "X", "cat": "kernel", "name": "k", "pid": "7", "tid": "x", "ts": 1, "id": 2**64 + 5},
            {"ph": "f", "cat": "fwdbwd", "id": -(2**70), "ts": 2, "pid": " 12 ", "tid": "1_0"},
            {
                "ph": "X",
                "cat": "cpu_op",
                "ts": 3,
                "args": {"correlation": "99", "stream": 2**63, "bytes": "9"},
            },
        ]
    ),
    "names-and-escapes": _mini_with(
        [
            {"ph": "M", "name": "thread_name", "pid": "1", "tid": 2, "args": {"name": "caf\u00e9 \u2028"}},
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "\U0001f600"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": None}},
            {"ph": "X", "cat": "Kernel", "name": 'a"b\\c\n\t\u0001\u00e9\U0001f600', "ts": 1, "dur": 2},
            {"ph": "X", "cat": "KERNEL", "name": "", "ts": 1},
        ]
    ).replace(b'"cat": "KERNEL"', b'"cat": "KER\\u004eEL"'),
    "unknown-and-odd-categories": _mini_with(
        [
            {"ph": "X", "cat": "Odd", "ts": 1},
            {"ph": "X", "cat": "odd", "ts": 1},
            {"ph": "i", "cat": "Trace", "ts": 1},
            {"ph": "X", "cat": None, "ts": 1},
            {"ph": None, "cat": "kernel", "ts": 1},
            {"ph": "X", "cat": "python_function", "name": "nn.Module: X", "ts": 1, "dur": 1},
            {
                "ph": "X",
                "cat": "python_function",
                "name": "deepspeed/runtime/engine.py(1): backward",
                "ts": 1,
            },
            {"ph": "X", "cat": "python_function", "name": "f.py(1): g", "ts": 1},
            {"ph": "s", "cat": "ac2g", "id": 3, "ts": 1},
            {"ph": "t", "cat": "fwdbwd", "id": 3, "ts": 1},
        ]
    ),
    "odd-times": _mini_with(
        [
            {"ph": "X", "cat": "kernel", "ts": None, "dur": None},
            {"ph": "X", "cat": "kernel", "dur": -5},
            {"ph": "X", "cat": "kernel", "ts": 4 * 10**15, "dur": 2**60},
            {"ph": "X", "cat": "kernel", "ts": -1.5, "dur": 1e-300},
            {"ph": "X", "cat": "kernel", "ts": 3999999999999999.9, "dur": 1e300},
        ]
    ).replace(b'"ts": -1.5', b'"ts": -15e-1'),
    "bytes-and-collectives": _mini_with(
        [
            {"ph": "X", "cat": "kernel", "ts": 1, "args": {"bytes": 1.5, "Collective name": "allreduce"}},
            {
                "ph": "X",
                "cat": "kernel",
                "ts": 1,
                "args": {"bytes": 123456789012345678, "Collective name": None},
            },
            {"ph": "X", "cat": "kernel", "ts": 1, "args": {"bytes": None, "Input Dims": [[[1, [2]]]]}},
        ]
    ),
    "copy-sizes": _mini_with(
        [
            {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "ts": 1, "args": {"size": 1024}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "ts": 2, "args": {"size": 2.5e3}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "ts": 3, "args": {"size": "9"}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "ts": 4, "args": {"size": None}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "ts": 5, "args": {"size": 7, "bytes": 8}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "ts": 6, "args": {"bytes": None, "size": 7}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "ts": 7, "args": {"bytes": "x", "size": 6}},
            {"ph": "X", "cat": "mtia_ccp_events", "name": "merge", "ts": 8, "args": {"size": 5}},
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 9, "args": {"size": 5}},
            {"ph": "X", "cat": "gpu_memset", "name": "Memset", "ts": 10, "args": {"size": 5}},
        ]
    ),
    "shapes": _mini_with(
        [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "ts": 1,
                "dur": 2,
                "args": {
                    "Input Dims": [[8, 4096], [4096, 11008]],
                    "Input type": ["c10::BFloat16", "c10::BFloat16"],
                    "Input Strides": [[4096, 1], [1, 4096]],
                    "Concrete Inputs": ["", "", "1.5e3", 'caf\u00e9 "q" \\'],
                },
            },
            {"ph": "X", "cat": "cpu_op", "ts": 3, "args": {"Input Dims": None, "Input type": "scalar"}},
            {"ph": "X", "cat": "user_annotation", "ts": 3, "args": {"Input Dims": 7, "Concrete Inputs": {}}},
            {"ph": "X", "cat": "cpu_op", "ts": 4, "args": {"Input Dims": [[8, 4096], [4096, 11008]]}},
            {"ph": "X", "cat": "python_function", "name": "x", "ts": 4, "args": {"Input Dims": [[1]]}},
        ]
    )
    .replace(b"[[8, 4096], [4096, 11008]]}}", b"[ [8,4096] ,\n [4096, 11008]\t]}}")
    .replace(b'"Input type": "scalar"', b'"Input type": "scal\\u0061r", "Input Strides": true')
    .replace(b'"Input Dims": 7', b'"Input Dims": -7.50e+1, "Input Dims": [1]'),
    "memory": _mini_with(
        [
            {
                "ph": "i",
                "cat": "cpu_instant_event",
                "s": "t",
                "name": "[memory]",
                "pid": 1,
                "tid": 2,
                "ts": 5.5,
                "args": {
                    "Ev Idx": 1,
                    "Device Type": 1,
                    "Device Id": 0,
                    "Addr": 2**64 + 5,
                    "Bytes": 512,
                    "Total Allocated": 2**49 + 1,  # under the memory bound (2^50)
                    "Total Reserved": 1.5e10,
                },
            },
            {
                "ph": "i",
                "s": "t",
                "name": "[memory]",
                "pid": 1,
                "tid": 2,
                "ts": 6,
                "args": {"Device Type": 0, "Device Id": -1, "Bytes": -512},
            },
            {
                "ph": "I",
                "cat": "x",
                "name": "[memory]",
                "ts": 7,
                "args": {
                    "Device Type": 1.0,
                    "Device Id": "0",
                    "Bytes": "9",
                    "Addr": "0x1f",
                    "Total Allocated": None,
                    "Total Reserved": "1",
                },
            },
            {"ph": "i", "name": "[memory]", "ts": 8, "args": {"Device Type": 2**70, "bytes": 4}},
            {
                "ph": "X",
                "cat": "kernel",
                "name": "[memory]",
                "ts": 9,
                "dur": 1,
                "args": {"Bytes": 3, "bytes": 4, "Device Id": 3, "Total Allocated": 7},
            },
            {"ph": "i", "cat": "cpu_op", "name": "[memorY]", "ts": 9},
        ]
    ),
    # The document as the bare event array, closed or not (with and without a comma after the
    # last event), a byte order mark and blanks before it.
    "bare-array": json.dumps(mini_trace()["traceEvents"], indent=1).encode(),
    "unterminated-array": b"\xef\xbb\xbf \n"
    + json.dumps(mini_trace()["traceEvents"]).encode()[:-1]
    + b",\n\n",
    "unterminated-array-no-comma": json.dumps(mini_trace()["traceEvents"]).encode()[:-1] + b"\t",
    "two-traceEvents": b'{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1}], "traceEvents": []}',
    "two-traceEvents-last-wins": b'{"traceEvents": [], "traceEvents": [{"ph": "X", "cat": "kernel", "ts": 1}]}',
    "bom": b"\xef\xbb\xbf" + _mini_with([]),
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_traces_read_the_same(name, tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(ODD[name])
    _check_file(p, chunks=(None, 128))
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(gzip.compress(ODD[name]))
    _check_file(gz, chunks=(None, 128))


@pytest.mark.parametrize("native", [True, False], ids=["native", "msgspec"])
def test_shape_args_are_kept_as_their_exact_text(native, tmp_path):
    """The four shape args of every kept event: the value's JSON text byte for byte (spacing,
    escapes, scalars), "" when absent or null; a duplicate key's last value (as msgspec keeps
    it); the same text in two events is one category."""
    p = tmp_path / "t.json"
    p.write_bytes(ODD["shapes"])
    ev = _outcome(p, native, chunk=128)[0]
    shaped = ev[ev["ts"] <= 4000].sort_values("ts", kind="stable")
    got = shaped[["input_dims", "input_types", "input_strides", "concrete_inputs"]].astype(str)
    assert got.values.tolist() == [
        ["[[8, 4096], [4096, 11008]]", '["c10::BFloat16", "c10::BFloat16"]', "[[4096, 1], [1, 4096]]",
         '["", "", "1.5e3", "caf\u00e9 \\"q\\" \\\\"]'],
        ["", '"scal\\u0061r"', "true", ""],
        ["[1]", "", "", "{}"],
        ["[ [8,4096] ,\n [4096, 11008]\t]", "", "", ""],
    ]  # fmt: skip
    assert isinstance(ev["input_dims"].dtype, pd.CategoricalDtype)


@pytest.mark.parametrize("native", [True, False], ids=["native", "msgspec"])
def test_memory_events_are_kept_with_their_columns(native, tmp_path):
    """``[memory]`` instants of any category (modern, torch 1.9's with no category, ``I``) are
    kind MEMORY: ``bytes`` is their signed ``Bytes``; device type and id are ints or -1,
    totals numbers or NaN, ``Addr`` an id (wrapped, -1 unless an int). Those columns are the
    memory events' alone: another event that carries such args has none of them (NaN in the
    union of both frames), and its ``bytes`` stays ``args.bytes``."""
    from tracekit.read.schema import KERNEL, MEMORY

    p = tmp_path / "t.json"
    p.write_bytes(ODD["memory"])
    ev = _outcome(p, native, chunk=128)[0]
    got = ev[(ev["kind"] == MEMORY) | (ev["name"] == "[memory]")].sort_values("ts", kind="stable")
    cols = ["kind", "ts", "bytes", "device_type", "device_id", "total_allocated", "total_reserved", "addr"]
    nan = float("nan")
    want = [
        [MEMORY, 5500, 512.0, 1, 0, float(2**49 + 1), 1.5e10, 5],
        [MEMORY, 6000, -512.0, 0, -1, nan, nan, -1],
        [MEMORY, 7000, nan, -1, -1, nan, nan, -1],
        [MEMORY, 8000, nan, -1, -1, nan, nan, -1],
        [KERNEL, 9000, 4.0, nan, nan, nan, nan, nan],
    ]
    pd.testing.assert_frame_equal(
        got[cols].reset_index(drop=True),
        pd.DataFrame(want, columns=cols).astype(got[cols].dtypes.to_dict()),
    )


@pytest.mark.parametrize("native", [True, False], ids=["native", "msgspec"])
def test_a_copy_with_no_bytes_arg_has_its_size_arg(native, tmp_path):
    """A copy's ``bytes`` is ``args.bytes``, else (absent, null or a string: MTIA's DMA
    requests) ``args.size`` when a number; any other event's ``size`` is not read."""
    p = tmp_path / "t.json"
    p.write_bytes(ODD["copy-sizes"])
    ev = _outcome(p, native, chunk=128)[0]
    got = ev[ev["ts"].between(1000, 10_000)].sort_values("ts", kind="stable")
    nan = float("nan")
    want = [1024.0, 2500.0, nan, nan, 8.0, 7.0, 6.0, nan, nan, nan]
    np.testing.assert_array_equal(got["bytes"].to_numpy(), want)


# ----------------------------------------------------------------------------- the scan alone


def _msgspec_builder(text: bytes) -> _FrameBuilder | None:
    """A builder fed the events of ``text`` (a run of events) by msgspec, None if that fails."""
    b = _FrameBuilder()
    try:
        if not b.add(_EVENTS_DECODER.decode(b"[" + text + b"]")):
            b.add(_TEXT_EVENTS_DECODER.decode(b"[" + text + b"]"))
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, OverflowError, RecursionError):
        return None
    return b


def _same_builders(a: _FrameBuilder, b: _FrameBuilder) -> None:
    assert a.n_events == b.n_events
    assert a.unknown == b.unknown
    assert list(a.thread_names.items()) == list(b.thread_names.items())
    assert list(a.process_names.items()) == list(b.process_names.items())
    assert len(a.parts) == len(b.parts)
    for pa, pb in zip(a.parts, b.parts):
        assert pa.keys() == pb.keys()
        for k in pa:
            x, y = pa[k], pb[k]
            if isinstance(x, pd.Categorical):
                assert list(x.categories) == list(y.categories), k
                np.testing.assert_array_equal(x.codes, y.codes, err_msg=k)
            else:
                assert x.dtype == y.dtype, k
                np.testing.assert_array_equal(x, y, err_msg=k)


def check_scan(text: bytes) -> str:
    """The scanner on a run of events: it declines, or it gives msgspec's builder exactly; and
    it never accepts what msgspec refuses. Returns what happened."""
    want = _msgspec_builder(text)
    got = N.scan(text, 0, len(text), False)
    if got is None:
        return "declined"
    assert want is not None, "the scanner accepted text msgspec refuses"
    b = _FrameBuilder()
    got.add_to(b)
    _same_builders(b, want)
    return "took"


NUMBER_TEXTS = st.sampled_from(
    [
        "0", "-0", "-0.0", "1e3", "1.5E+2", "15e-1", "0.0005", "1.0005", "2.0015", "-2.0025", "1700000000000000.123",
        "1.7e15", "8796093022208.5", "8796093022207.9995", "123456789012345678", "1234567890123456789",
        "123456789012345678901", "18446744073709551616", "-9223372036854775809", "1e400", "-1e400", "1e-400",
        "4e15", "3999999999999999.9995", "4000000000000000", "-3999999999999999", "0.1234567890123456789012345",
        "12345.678901234567890123456789012345", "01", "1.", ".5", "-", "1e", "NaN", "Infinity", "-Infinity", "0x10",
    ]
)  # fmt: skip
FLOAT_TEXTS = st.floats(allow_nan=False, allow_infinity=False).map(repr) | st.floats(
    allow_nan=False, allow_infinity=False
).map(lambda f: f"{f:.6e}")
NUMBERS = NUMBER_TEXTS | st.integers(-(2**70), 2**70).map(str) | FLOAT_TEXTS
STRINGS = st.builds(
    json.dumps,
    st.text(max_size=12) | st.sampled_from(["X", "s", "f", "t", "M", "i", "[memory]", "kernel", "Kernel", "cpu_op", "python_function", "nn.Module: A", "thread_name", "process_name", "12", " 7", "x", "gpu_memcpy", "mtia_ccp_events", "dma_request"]),
    ensure_ascii=st.booleans(),
)  # fmt: skip
RAW_STRINGS = st.sampled_from(
    [
        r'"\ud800"',
        r'"\udc00x"',
        r'"\ud800\u0041"',
        '"\\q"',
        '"a\x01"',
        '"\xff"',
        r'"\u00e9\u004b"',
        r'"\/\b\f"',
    ]
)
SCALARS = NUMBERS | STRINGS | RAW_STRINGS | st.sampled_from(["null", "true", "false"])


@st.composite
def values(draw, depth: int = 0) -> str:
    if depth > 3 or draw(st.integers(0, 3)):
        return draw(SCALARS)
    items = draw(st.lists(values(depth + 1), max_size=3))
    if draw(st.booleans()):
        return "[" + ",".join(items) + "]"
    keys = draw(st.lists(STRINGS, min_size=len(items), max_size=len(items)))
    return "{" + ", ".join(f"{k}: {v}" for k, v in zip(keys, items)) + "}"


EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args", "bp", "p\\u0068"]
ARG_KEYS = [
    "correlation",
    "Sequence number",
    "Fwd thread id",
    "stream",
    "Collective name",
    "bytes",
    "size",
    "name",
    "x",
    "Bytes",
    "Device Type",
    "Device Id",
    "Addr",
    "Total Allocated",
    "Total Reserved",
    "Input Dims",
    "Input type",
    "Input Strides",
    "Concrete Inputs",
]


_SPACES = ["", " ", "\n"]


@st.composite
def objects(draw, keys: list[str], inner=None) -> str:
    members = []
    for key in draw(st.lists(st.sampled_from(keys), max_size=8)):
        v = draw(inner) if inner is not None and key == "args" and draw(st.booleans()) else draw(values())
        members.append(f'"{key}"{draw(st.sampled_from(_SPACES))}:{v}')
    return "{" + draw(st.sampled_from([",", ", "])).join(members) + "}"


EVENTS = st.lists(objects(EVENT_KEYS, objects(ARG_KEYS)), min_size=1, max_size=6).map(", ".join)


@pytest.mark.fuzz
@FUZZ
@given(EVENTS)
def test_scanned_events_equal_msgspec_or_are_declined(text):
    check_scan(text.encode())


@pytest.mark.fuzz
@FUZZ
@given(EVENTS, st.data())
def test_mutated_event_text_equal_msgspec_or_declined(text, data):
    raw = bytearray(text.encode())
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, max(0, len(raw) - 1)))
        what = data.draw(st.sampled_from(["flip", "delete", "insert", "truncate", "deep"]))
        if what == "flip" and raw:
            raw[i] = data.draw(st.integers(0, 255))
        elif what == "delete":
            del raw[i : i + data.draw(st.integers(1, 8))]
        elif what == "insert":
            raw[i:i] = data.draw(
                st.sampled_from([b"[", b"{", b'"', b"\\", b",", b"}", b"]", b"\xc3", b"\x00", b"1e9"])
            )
        elif what == "truncate":
            del raw[i:]
        else:
            raw[i:i] = b"[" * 70 + b"]" * 70
    check_scan(bytes(raw))


def test_the_scan_takes_valid_text_and_declines_the_rest():
    """Plain anchors for the properties above (so they cannot pass by declining everything)."""
    ok = b'{"ph": "X", "cat": "kernel", "name": "k\\u00e9", "pid": 1, "tid": "7", "ts": 1.5, "dur": 2}'
    assert check_scan(ok) == "took"
    assert (
        check_scan(ok + b', {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "m"}}')
        == "took"
    )
    for bad in [
        ok[:-1],  # truncated
        ok.replace(b'"ts": 1.5', b'"ts": NaN'),
        ok.replace(b'"pid": 1', b'"pid": 1.0'),  # msgspec: a float is not an int | str
        ok.replace(b'"ph": "X"', b'"ph": "X", "ph": "X"'),  # duplicate key
        ok.replace(b"k\\u00e9", b"k\\ud800"),  # lone surrogate
        ok.replace(b"k\\u00e9", b"k\xff"),  # invalid UTF-8
        ok.replace(b'"dur": 2', b'"dur": 2, "x": ' + b"[" * 100 + b"]" * 100),  # deep
    ]:
        assert check_scan(bad) == "declined", bad


def test_huge_runs_and_hash_collisions_stay_linear():
    """Many distinct strings (each interned once) and a long run scan to the same builder."""
    evs = [
        {"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": f"p{i % 7}", "ts": i, "dur": 1}
        for i in range(20000)
    ]
    text = json.dumps(evs)[1:-1].encode()
    assert check_scan(text) == "took"
