"""Times in nanoseconds, exactly as written: epoch clocks keep their nanosecond decimals.

Kineto writes ``ts`` as float microseconds with three decimals; at the epoch (~1.7e15 us) a
float64 is 0.25 us coarse, so the reader converts the text of such numbers itself.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tracekit.read.reader as R
from tracekit.errors import TraceError
from tracekit.read.timetext import number_times, text_times

# (JSON text, exact ns or None when not a valid time): forms that real files hold.
CASES = [
    (b"1712195495519689.047", 1712195495519689047),  # hta ns_resolution_trace
    (b"1712195495519695.812", 1712195495519695812),
    (b"4203669604595.407", 4203669604595407),  # a clock since boot (ROCm)
    (b"1695835542514261", 1695835542514261000),  # integer microseconds
    (b"-12.5", -12500),  # negative (events before the clock's zero)
    (b"-1712195495519689.999", -1712195495519689999),
    (b"0", 0),
    (b"-0.0", 0),
    (b"6.765", 6765),
    (b"1.7121954955196891e15", 1712195495519689100),  # exponent forms
    (b"1E3", 1000000),
    (b"2.5e-3", 2),  # 2.5 ns: ties to even
    (b"0.0035", 4),  # 3.5 ns: ties to even
    (b"0.00350001", 4),
    (b"0.0034999", 3),
    (b"3999999999999999.999", 3999999999999999999),  # just below the refused range
    (b"4000000000000000", None),  # ~126 years: refused
    (b"-4000000000000000.5", None),
    (b"123456789012345678901234567890.5", None),
    (b"null", None),
    (b"", None),  # absent
]


def test_text_times_are_exact():
    ns, ok = text_times([t for t, _ in CASES])
    for (text, want), got, valid in zip(CASES, ns.tolist(), ok.tolist()):
        assert valid == (want is not None), text
        if want is not None:
            assert got == want, text


def test_an_absent_or_null_duration_is_zero():
    ns, ok = text_times([b"", b"null", b"2.5"], none_is_zero=True)
    assert ns.tolist() == [0, 0, 2500] and ok.all()


@pytest.mark.parametrize("text", [b'"12"', b"true", b"{}", b"[1]", b"1e400"])
def test_text_that_is_no_time_is_left_to_the_typed_decoder(text):
    assert text_times([b"1.5", text]) is None


def test_numbers_convert_only_where_float64_is_exact():
    ns, ok = number_times([4203669604595.407, 12, None, -3.5, 8.5e12])
    assert ns.tolist() == [4203669604595407, 12000, 0, -3500, 8500000000000000]
    assert ok.tolist() == [True, True, False, True, True]
    assert number_times([1.5, 1712195495519689.0]) is None  # float64 lost the decimals
    assert number_times([1712195495519689, 1]) is not None  # integers are exact


def _doc(times: list) -> str:
    evs = [
        f'{{"ph": "X", "cat": "kernel", "name": "k{i}", "pid": 0, "tid": 7, "ts": {t}, "dur": {d}}}'
        for i, (t, d) in enumerate(times)
    ]
    return '{"traceEvents": [' + ", ".join(evs) + "]}"


def test_reader_keeps_epoch_nanoseconds(tmp_path):
    times = [("1712195495519689.047", "3.5"), ("-5.25", "1"), ("1.7121954955196891e15", "null")]
    p = tmp_path / "t.json"
    p.write_text(_doc(times))
    ev = R.read_trace(p).events
    assert ev["ts"].tolist() == [1712195495519689047, -5250, 1712195495519689100]
    assert ev["dur"].tolist() == [3500, 1000, 0]


def test_sliced_reader_switches_to_text_times_mid_file(tmp_path, monkeypatch):
    """Early slices with small times decode as numbers, the epoch ones as text: same columns."""
    small = [(f"{i}.125", "2.001") for i in range(2000)]
    epoch = [(f"{1712195495519000 + i}.047", "0.999") for i in range(2000)]
    p = tmp_path / "t.json"
    p.write_text(_doc(small + epoch))
    monkeypatch.setattr(R, "CHUNK_BYTES", 1 << 14)
    sliced = R.read_trace(p).events
    monkeypatch.setattr(R, "CHUNK_BYTES", 1 << 40)
    whole = R.read_trace(p).events
    want = [i * 1000 + 125 for i in range(2000)] + [(1712195495519000 + i) * 1000 + 47 for i in range(2000)]
    assert sliced["ts"].tolist() == whole["ts"].tolist() == want
    assert (sliced["dur"].to_numpy() == np.array([2001] * 2000 + [999] * 2000)).all()


def test_a_string_time_in_an_epoch_file_is_still_the_typed_error(tmp_path, monkeypatch):
    doc = json.loads(_doc([("1712195495519689.047", "1")] * 3000))
    doc["traceEvents"][2500]["ts"] = "12"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    monkeypatch.setattr(R, "CHUNK_BYTES", 1 << 14)
    with pytest.raises(
        TraceError, match=r"Expected `int \| float \| null`, got `str` - at `\$.traceEvents\[2500\].ts`"
    ):
        R.read_trace(p)
