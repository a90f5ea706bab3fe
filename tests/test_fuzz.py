"""Property-based fuzzing of the reader and the whole analysis (issue 6).

Property: for any bytes at all, ``tracekit.load(path).tables()`` either gives tables or raises
:class:`~tracekit.errors.TraceError`; any other exception is a bug. The CLI form: exit 0, or
exit 2 with exactly one ``tracekit: error:`` line, never a traceback.

Inputs: real traces (small ones from ../shared/traces) and a synthetic mini trace, mutated at the
byte level (flips, cuts, splices of hostile tokens such as ``NaN``, ``1e400``, huge ints, NULs,
BOMs, brackets), at the structure level (fields set to values of the wrong type or range, events
duplicated, dropped, re-categorised), through gzip, and random JSON / random trace-shaped
documents.

Examples per test: ``TRACEKIT_FUZZ_EXAMPLES`` (default 100, which CI runs); a long local run is
e.g. ``TRACEKIT_FUZZ_EXAMPLES=3000 pytest tests/test_fuzz.py``.
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import os
import tempfile
from pathlib import Path

import pytest
from bad_inputs import ERROR_PREFIX, analyze, mini_trace
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from shared_traces import SHARED

import tracekit
from tracekit.errors import TraceError
from tracekit.render import formats

pytestmark = pytest.mark.fuzz

EXAMPLES = int(os.environ.get("TRACEKIT_FUZZ_EXAMPLES", "100"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

REAL = [
    "hta/call_stack__backward_thread.json",
    "hta/triton_example__triton_example.json.gz",
    "tracelens/torch_compile_triton__trace.json.gz",
]

_TMP = tempfile.TemporaryDirectory(prefix="tracekit-fuzz-")
_COUNTER = itertools.count()


def _real_bases() -> list[tuple[str, bytes]]:
    out = []
    for rel in REAL:
        p = SHARED / rel
        if p.is_file():
            data = p.read_bytes()
            out.append((rel, gzip.decompress(data) if rel.endswith(".gz") else data))
    return out


MINI = json.dumps(mini_trace()).encode()
MINI_DOC = mini_trace()


def _file(data: bytes, gz: bool = False) -> Path:
    p = Path(_TMP.name) / f"f{next(_COUNTER)}.json{'.gz' if gz else ''}"
    p.write_bytes(data)
    return p


def _event(what: str) -> None:
    try:
        event(what)
    except Exception:  # outside a hypothesis test (the sanity check)
        pass


def check_load(data: bytes, gz: bool = False) -> str:
    """The property: tables, or TraceError, nothing else. Returns 'ok' or 'error'."""
    p = _file(data, gz)
    try:
        try:
            a = tracekit.load(p, cache=False, jobs=1)
            tables = a.tables()
            per_step = a.tables(per_step=True)
            meta = a.meta
        except TraceError as e:
            assert "\n" not in str(e) and str(p) in str(e), str(e)
            _event("clean error: " + e.problem.split(":")[0][:40])
            return "error"
        # Rendering the tables of a hostile trace must not fail either.
        formats.to_json(meta, tables)
        for name, df in per_step.items():
            formats.to_csv(df)
            formats.to_markdown(name, df)
        _event("tables")
        return "ok"
    finally:
        p.unlink()


def check_cli(data: bytes, gz: bool = False) -> None:
    p = _file(data, gz)
    try:
        r = analyze(p, "--format", "json", "--no-cache", "--jobs", "1")
        assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
        assert r.exit_code in (0, 2), (r.exit_code, r.stderr)
        assert "Traceback" not in r.stderr
        if r.exit_code == 2:
            lines = r.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), r.stderr
            assert "could not analyse" not in lines[0], f"an unforeseen exception: {lines[0]}"
            assert r.stdout == ""
        else:
            json.loads(r.stdout)
            assert all(ln.startswith("tracekit: warning: ") for ln in r.stderr.splitlines()), r.stderr
    finally:
        p.unlink()


# ----------------------------------------------------------------------------- strategies

HOSTILE_TOKENS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"99999999999999999999999",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"4e15",
    b"null",
    b"true",
    b"0",
    b"-1",
    b'"',
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"\x00",
    b"\xff\xfe",
    b"\xef\xbb\xbf",
    b"\xc3",
    b'"cat": "kernel", ',
    b'"ph": "X", ',
    b'"dur": -7, ',
    b'"ts": 1e300, ',
    b'"args": {"correlation": 1}, ',
    b'"traceEvents": [], ',
    b'"name": "ProfilerStep#3", ',
    b'"name": "=HYPERLINK(\\"x\\")", ',
    b"[" * 64,
    b'{"a":' * 32,
]

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(
        [
            0,
            -1,
            1,
            2**63 - 1,
            2**63,
            2**64 - 1,
            -(2**63),
            4 * 10**15,
            3.999e15,
            1e300,
            -1e300,
            0.5,
            1e-300,
            "",
            "0",
            "12",
            "-5",
            "1e3",
            "x",
            "ProfilerStep#1",
            "ProfilerStep#",
            "ProfilerStep#-4",
            "ProfilerStep#99999999999999999999",
            "tracekit.phase:forward",
            "tracekit.phase:backward",
            "tracekit.phase:optimizer",
            "tracekit.phase:",
            "tracekit.module:LlamaMLP:model.layers.0.mlp",
            "tracekit.module:",
            "nn.Module: LlamaAttention_0",
            "nn.Module: ",
            "Optimizer.step#FusedAdam.step",
            "autograd::engine::evaluate_function: MmBackward0",
            "nccl:all_reduce",
            "gloo:broadcast",
            "ncclKernel_AllReduce_RING_LL_Sum_bf16",
            "=1+1",
            "@SUM(A1)",
            "<script>alert(1)</script>",
            "| a | b |",
            "../../etc/passwd",
            "kernel",
            "Kernel",
            "cpu_op",
            "cuda_runtime",
            "cuda_driver",
            "gpu_memcpy",
            "gpu_memset",
            "user_annotation",
            "python_function",
            "ac2g",
            "fwdbwd",
            "X",
            "s",
            "f",
            "t",
            "M",
            "i",
            "B",
            "E",
        ]
    ),
)
JSON = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=12,
)

EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "s"]
ARG_KEYS = [
    "correlation",
    "External id",
    "Sequence number",
    "Fwd thread id",
    "stream",
    "device",
    "Python id",
    "Python parent id",
    "Collective name",
    "bytes",
    "name",
    "Input Dims",
]
TOP_KEYS = [
    "distributedInfo",
    "deviceProperties",
    "schemaVersion",
    "baseTimeNanoseconds",
    "traceName",
    "displayTimeUnit",
]


@st.composite
def byte_mutation(draw, data: bytes) -> bytes:
    for op in draw(
        st.lists(st.sampled_from(["flip", "delete", "insert", "dup", "truncate"]), min_size=1, max_size=4)
    ):
        n = len(data)
        if n == 0:
            break
        i = draw(st.integers(0, n - 1))
        j = min(n, i + draw(st.integers(0, 200)))
        if op == "flip":
            data = data[:i] + bytes([draw(st.integers(0, 255))]) + data[i + 1 :]
        elif op == "delete":
            data = data[:i] + data[j:]
        elif op == "insert":
            tok = draw(st.sampled_from(HOSTILE_TOKENS) | st.binary(min_size=1, max_size=8))
            data = data[:i] + tok + data[i:]
        elif op == "dup":
            data = data[:j] + data[i:j] + data[j:]
        else:
            data = data[:i]
    return data


@st.composite
def structural_mutation(draw, doc: dict) -> dict:
    doc = copy.deepcopy(doc)
    events = doc.get("traceEvents")
    for _ in range(draw(st.integers(1, 6))):
        action = draw(
            st.sampled_from(
                [
                    "set",
                    "del",
                    "arg",
                    "dup",
                    "drop",
                    "top",
                    "shift",
                    "typed",
                    "typed",
                    "typed",
                    "insert",
                    "insert",
                ]
            )
        )
        if action == "top":
            doc[draw(st.sampled_from(TOP_KEYS + ["traceEvents"]))] = draw(JSON)
            events = doc.get("traceEvents")
            continue
        if not isinstance(events, list) or not events:
            break
        k = draw(st.integers(0, len(events) - 1))
        if action == "insert":  # a new well-typed event among the real ones
            events.insert(k, draw(TYPED_EVENT))
            continue
        e = events[k]
        if not isinstance(e, dict):
            continue
        if action == "typed":  # fields of the right type but odd values: past the decoder
            new = draw(TYPED_EVENT)
            for key in draw(st.lists(st.sampled_from(sorted(new)), min_size=1, unique=True)):
                e[key] = new[key]
            continue
        if action == "set":
            e[draw(st.sampled_from(EVENT_KEYS))] = draw(SCALARS)
        elif action == "del" and e:
            e.pop(draw(st.sampled_from(sorted(e))))
        elif action == "arg":
            args = e.setdefault("args", {})
            if isinstance(args, dict):
                args[draw(st.sampled_from(ARG_KEYS))] = draw(JSON)
            else:
                e["args"] = draw(JSON)
        elif action == "dup":
            events.insert(draw(st.integers(0, len(events))), copy.deepcopy(e))
        elif action == "drop":
            events.pop(k)
        elif action == "shift" and isinstance(e.get("ts"), (int, float)):
            # move an event in time by a hostile amount
            e["ts"] = e["ts"] + draw(st.sampled_from([-(10**9), -1, 10**6, 2**62, 1e20, 0.0004]))
    return doc


def _dump(doc) -> bytes:
    return json.dumps(doc).encode()


EVENT = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "X", "X", "s", "f", "M", "i"]) | SCALARS,
        "cat": st.sampled_from(
            [
                "kernel",
                "cpu_op",
                "cuda_runtime",
                "user_annotation",
                "gpu_memcpy",
                "python_function",
                "ac2g",
                "fwdbwd",
                "Trace",
            ]
        )
        | SCALARS,
        "name": st.sampled_from(
            [
                "ProfilerStep#1",
                "ProfilerStep#2",
                "aten::mm",
                "cudaLaunchKernel",
                "gemm",
                "nccl:all_reduce",
                "tracekit.phase:backward",
                "nn.Module: LlamaMLP_0",
                "tracekit.module:LlamaMLP:m",
            ]
        )
        | SCALARS,
        "pid": st.sampled_from([0, 1, 2, "1", "Spans"]) | SCALARS,
        "tid": st.sampled_from([0, 1, 7, "stream 7"]) | SCALARS,
        "ts": st.integers(0, 300) | st.floats(0, 300) | SCALARS,
        "dur": st.integers(0, 100) | st.floats(0, 100) | SCALARS,
        "id": st.integers(0, 5) | SCALARS,
        "args": st.fixed_dictionaries(
            {},
            optional={
                "correlation": st.integers(0, 5) | SCALARS,
                "External id": st.integers(0, 5),
                "Sequence number": st.integers(0, 5),
                "Fwd thread id": st.integers(0, 2),
                "stream": st.integers(0, 8) | SCALARS,
                "device": st.integers(0, 1),
                "Collective name": st.sampled_from(["allreduce", ""]) | SCALARS,
                "bytes": st.integers(0, 10**6) | SCALARS,
            },
        )
        | JSON,
    },
)
TRACE = st.fixed_dictionaries(
    {"traceEvents": st.lists(EVENT, max_size=40)},
    optional={
        "distributedInfo": st.fixed_dictionaries({}, optional={"rank": SCALARS, "world_size": SCALARS})
        | JSON,
        "deviceProperties": st.lists(st.fixed_dictionaries({"name": SCALARS}) | JSON, max_size=3) | JSON,
        "schemaVersion": SCALARS,
        "baseTimeNanoseconds": SCALARS,
    },
)


# Well-typed but adversarial: every field has a type the reader accepts, so the examples get
# past the decoder into link, attribute and the tables (odd values, overlaps, extremes).
ID = st.integers(0, 6) | st.sampled_from([-1, 2**63, 2**64 + 3, -(2**70)]) | st.sampled_from(["3", "x", ""])
TIME = (
    st.integers(0, 400)
    | st.floats(0, 400)
    | st.sampled_from([-50, -0.5, 0, 4 * 10**15, 2**63, 2**70, 1e300, 1.7e15 + 0.001])
)
TYPED_EVENT = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "X", "s", "f", "t", "M", "i", "B"]),
        "cat": st.sampled_from(
            [
                "kernel",
                "Kernel",
                "cpu_op",
                "cpu_op",
                "cuda_runtime",
                "Runtime",
                "cuda_driver",
                "user_annotation",
                "gpu_memcpy",
                "gpu_memset",
                "python_function",
                "ac2g",
                "fwdbwd",
                "gpu_user_annotation",
                "odd",
            ]
        ),
        "name": st.sampled_from(
            [
                "ProfilerStep#1",
                "ProfilerStep#2",
                "ProfilerStep#3",
                "aten::mm",
                "cudaLaunchKernel",
                "cuLaunchKernel",
                "gemm_kernel",
                "nccl:all_reduce",
                "ncclKernel_AllReduce_RING_LL_Sum_bf16",
                "tracekit.phase:forward",
                "tracekit.phase:backward",
                "tracekit.phase:optimizer",
                "tracekit.module:LlamaMLP:model.layers.0.mlp",
                "tracekit.module:LlamaAttention:model.layers.0.self_attn",
                "nn.Module: LlamaMLP_0",
                "nn.Module: LlamaRMSNorm_1",
                "Optimizer.step#FusedAdam.step",
                "Memcpy HtoD (Pageable -> Device)",
                "autograd::engine::evaluate_function: MmBackward0",
                "apply_rotary_pos_emb",
                "process_name",
                "thread_name",
            ]
        )
        | st.text(max_size=8),
        "pid": st.sampled_from([0, 1, 1, 2, "1", "Spans"]),
        "tid": st.sampled_from([0, 1, 1, 7, 8, "stream 7"]),
        "ts": TIME,
    },
    optional={
        "dur": TIME,
        "id": ID,
        "args": st.fixed_dictionaries(
            {},
            optional={
                "correlation": ID,
                "External id": ID,
                "Sequence number": ID,
                "Fwd thread id": ID,
                "stream": ID,
                "device": ID,
                "Python id": ID,
                "Python parent id": ID,
                "Collective name": st.sampled_from(["allreduce", "allgather", "", "=x"]),
                "bytes": st.integers(0, 10**6) | st.sampled_from([-1, 2**70, "12"]),
                "name": st.text(max_size=8),
            },
        ),
    },
)
TYPED_TRACE = st.fixed_dictionaries(
    {"traceEvents": st.lists(TYPED_EVENT, min_size=1, max_size=60)},
    optional={
        "distributedInfo": st.fixed_dictionaries({"rank": st.integers(-1, 3) | st.just(2**64)}),
        "deviceProperties": st.lists(st.fixed_dictionaries({"name": st.text(max_size=8)}), max_size=2),
    },
)


# ----------------------------------------------------------------------------------- tests


@FUZZ
@given(st.data())
def test_mutated_mini_trace_bytes(data):
    gz = data.draw(st.booleans())
    raw = data.draw(byte_mutation(MINI))
    if gz and data.draw(st.booleans()):  # mutate the compressed stream itself
        check_load(data.draw(byte_mutation(gzip.compress(raw))), gz=True)
    else:
        check_load(gzip.compress(raw) if gz else raw, gz=gz)


@pytest.mark.parametrize("gz", [False, True])
def test_invalid_utf8_before_trace_events_is_a_clean_result(gz):
    """Found by the fuzz in CI: a byte that is not UTF-8 in a key before ``traceEvents``
    made the streaming reader's head check raise UnicodeDecodeError (a traceback)."""
    raw = _dump(MINI_DOC).replace(b'"rank"', b'"\x80rank"'.decode("unicode_escape").encode("latin-1"), 1)
    assert b"\x80rank" in raw
    data = gzip.compress(raw) if gz else raw
    assert check_load(data, gz=gz) in ("ok", "error")


@FUZZ
@given(st.data())
def test_mutated_mini_trace_structure(data):
    doc = data.draw(structural_mutation(MINI_DOC))
    raw = _dump(doc)
    if data.draw(st.booleans()):
        raw = data.draw(byte_mutation(raw))
    check_load(raw)


@pytest.mark.shared
@pytest.mark.skipif(not _real_bases(), reason=f"shared traces not found at {SHARED}")
@FUZZ
@given(st.data())
def test_mutated_real_traces(data):
    _name, raw = data.draw(st.sampled_from(_real_bases()), label="base")
    how = data.draw(st.sampled_from(["bytes", "structure", "both", "gzip"]))
    if how in ("structure", "both"):
        raw = _dump(data.draw(structural_mutation(json.loads(raw))))
    if how in ("bytes", "both"):
        raw = data.draw(byte_mutation(raw))
    if how == "gzip":
        check_load(data.draw(byte_mutation(gzip.compress(raw, compresslevel=1))), gz=True)
    else:
        check_load(raw)


@FUZZ
@given(TRACE)
def test_random_trace_shaped_documents(doc):
    check_load(_dump(doc))


@FUZZ
@given(TYPED_TRACE)
def test_random_well_typed_traces(doc):
    check_load(_dump(doc))


@FUZZ
@given(JSON | st.binary(max_size=64))
def test_random_json_and_bytes(value):
    check_load(value if isinstance(value, bytes) else _dump(value))


@pytest.mark.shared
@settings(FUZZ, max_examples=max(20, EXAMPLES // 4))
@given(st.data())
def test_cli_contract_on_mutated_traces(data):
    """The CLI on the same kinds of input: exit 0, or 2 with one line; never a traceback."""
    base = data.draw(st.sampled_from([MINI] + [raw for _, raw in _real_bases()]))
    if data.draw(st.booleans()):
        raw = data.draw(byte_mutation(base))
    else:
        raw = _dump(data.draw(structural_mutation(json.loads(base))))
    check_cli(raw)


@pytest.mark.shared
def test_the_valid_bases_analyse():
    """Sanity: the unmutated inputs give tables (so the fuzz explores around working traces)."""
    assert check_load(MINI) == "ok"
    for name, raw in _real_bases():
        assert check_load(raw) == "ok", name
