"""Traces that are the bare array of events (issue 28 item 3).

The Chrome trace event format allows a document that is just the event array, and that array
with no closing ``]`` (a writer that stopped before closing it; the earliest Kineto traces). Both
read as the object form does: the same events, by both readers (native and msgspec), plain and
gzip, decoded whole, streamed in slices, and read in parallel; the same tables for a planted
trace. An array cut inside an event is a truncated trace, an error as in the object form.
"""

from __future__ import annotations

import gzip
import json

import pandas as pd
import pytest
from events_equal import assert_events_equal
from shared_traces import SHARED
from test_native_reader import _outcome
from test_testing_builder import check_planted, plant

import tracekit
import tracekit.read.parallel as P
import tracekit.read.reader as R
from tracekit import forked
from tracekit.testing import write_trace

FORMS = ("array", "unterminated")


def _tables(path) -> dict[str, pd.DataFrame]:
    return tracekit.load(path, cache=False, jobs=1).tables(per_step=True)


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("form", FORMS)
def test_planted_tables_are_those_of_the_object_form(tmp_path, form, suffix):
    """The planted step written in each form: its times come back exactly, and every table is
    the object form's."""
    b = plant(old_categories=True)  # the vintage that wrote bare arrays; no header to lose
    obj = b.write(tmp_path / f"object{suffix}")
    bare = b.write(tmp_path / f"{form}{suffix}", form=form)
    text = gzip.decompress(bare.read_bytes()) if suffix.endswith("gz") else bare.read_bytes()
    assert text.lstrip().startswith(b"[") and text.rstrip().endswith(b"]" if form == "array" else b"},")
    check_planted(tracekit.load(bare, cache=False))
    want, got = _tables(obj), _tables(bare)
    assert got.keys() == want.keys()
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], obj=name)


def _forms(doc: dict) -> dict[str, bytes]:
    events = doc["traceEvents"]
    return {
        "array": json.dumps(events).encode(),  # (no indent: shape texts are kept as written)
        "unterminated": ("[\n" + "".join(json.dumps(e) + ",\n" for e in events)).encode(),
        "unterminated-no-comma": (" [" + ", ".join(json.dumps(e) for e in events) + "\n\n").encode(),
        "bom-array": b"\xef\xbb\xbf" + json.dumps(events).encode(),
    }


SOURCES = [
    "hta/trace_filter__sampled_rank-0.json.gz",
    "kineto/tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    "tracelens/perf_model__normalization__normalization_layer_test.json.gz",
]


@pytest.mark.shared
@pytest.mark.parametrize("src", SOURCES)
def test_real_traces_as_arrays_read_as_the_object_form(src, tmp_path):
    """Real traces rewritten in the array forms: the events of the object form, by both
    readers (natively whole and in 64 KiB slices, by msgspec in slices), plain and gzip."""
    path = SHARED / src
    if not path.is_file():
        pytest.skip(f"{path} not found")
    doc = json.loads(gzip.decompress(path.read_bytes()))
    want = _outcome(path, True)
    assert not isinstance(want, str)
    same_meta = ("thread_names", "process_names", "events_in_file")
    files = {f"{name}.json": text for name, text in _forms(doc).items()}
    files["unterminated.json.gz"] = gzip.compress(files["unterminated.json"], compresslevel=1)
    for name, data in files.items():
        p = tmp_path / name
        p.write_bytes(data)
        for native, chunk in ((True, None), (True, 1 << 16), (False, 1 << 16)):
            got = _outcome(p, native, chunk)
            assert not isinstance(got, str), (name, native, chunk, got)
            assert_events_equal(got[0], want[0])
            assert [got[1][k] for k in same_meta] == [want[1][k] for k in same_meta]
            assert got[2] == want[2]


@pytest.mark.parametrize("form", ["array", "unterminated", "unterminated-no-comma"])
def test_arrays_are_streamed_and_read_in_parallel(form, tmp_path, monkeypatch):
    """A bigger array (many slices): streamed (never the whole text at once) and decoded by
    forked children, the events are the object form's."""
    b = plant()
    doc = b.trace()
    doc["traceEvents"] = doc["traceEvents"] * 200  # the same step over and over: many slices
    obj = write_trace(tmp_path / "object.json", doc)
    p = tmp_path / "t.json"
    p.write_bytes(_forms(doc)[form])
    want = _outcome(obj, False, None)
    stats: dict = {}
    real = R.stream_decode
    monkeypatch.setattr(R, "stream_decode", lambda *a, **kw: real(*a, stats, **kw))
    for native in (True, False):
        got = _outcome(p, native, 1 << 14)
        assert_events_equal(got[0], want[0])
        assert stats["slices"] > 10 and stats["peak_buffer"] < 8 * (1 << 14), stats
    monkeypatch.setattr(P, "MIN_BYTES", 0)
    monkeypatch.setattr(forked.threading, "active_count", lambda: 1)
    taken: list = []
    par = R.read_parallel
    monkeypatch.setattr(R, "read_parallel", lambda *a: taken.append(par(*a)) or taken[-1])
    for native in (True, False):
        got = _outcome(p, native, 1 << 14, jobs=3)
        assert_events_equal(got[0], want[0])
    assert len(taken) == 2 and all(t is not None for t in taken)


@pytest.mark.parametrize("native", [True, False], ids=["native", "msgspec"])
@pytest.mark.parametrize("chunk", [None, 1 << 12], ids=["whole", "streamed"])
def test_an_array_cut_inside_an_event_is_truncated(native, chunk, tmp_path):
    """Cut anywhere inside its last event (but right after a whole event), an array is a
    truncated trace, as the object form is; cut after a whole event it reads (unterminated)."""
    doc = plant().trace()
    text = _forms(doc)["unterminated"]
    last = text.rindex(b"{")
    p = tmp_path / "t.json"
    for cut in (last + 1, last + 20, len(text) - 4, len(text) - 3):
        p.write_bytes(text[:cut])
        assert _outcome(p, native, chunk) == f"{p}: truncated JSON (the file ends early)", cut
    p.write_bytes(text[:last])  # after the comma that follows a whole event
    assert not isinstance(_outcome(p, native, chunk), str)
