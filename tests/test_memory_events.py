"""``[memory]`` events (``profile_memory=True``): the reader keeps them as kind MEMORY with their
columns, in both of Kineto's forms; every existing table ignores them.

The truth is planted with ``TraceBuilder.memory`` (modern and torch 1.9 form); "ignores" is
checked against the same trace with its memory events taken out of the file.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import tracekit
from tracekit.errors import TraceError
from tracekit.explain import run as explain
from tracekit.read.columns import MEMORY_COLUMNS, MEMORY_ONLY
from tracekit.read.reader import DEFAULT_MAX_BYTES, MEMORY, read_trace
from tracekit.testing import TraceBuilder, write_trace
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL


def _training(b: TraceBuilder, legacy: bool) -> None:
    """A training step whose ops allocate and free (GPU 0, and the CPU), with allocator
    events before and after everything else in the file."""
    b.memory(4096, device=0, at_us=-50, legacy=legacy)  # before every other event
    with b.step():
        with b.module("LlamaMLP", "model.layers.0.mlp"):
            with b.op("aten::empty"):
                act = b.memory(1 << 20, device=0, legacy=legacy)
            mm = b.kernel(GEMM_A, 10, op="aten::mm", at_us=10)
            b.memory(64, legacy=legacy)  # CPU
            mul = b.kernel(K_MUL, 2, op="aten::mul", at_us=25)
        with b.backward():
            b.kernel(K_MUL, 3, op="aten::mul", creator=mul, at_us=40)
            b.memory(-(1 << 20), device=0, legacy=legacy)
            assert legacy or b.memory_events[-1].addr == act.addr  # the free pairs with it
            b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, at_us=45)
        with b.optimizer():
            b.kernel(K_ADAM, 5, op="aten::_fused_adam_", at_us=70)
    b.memory(-4096, device=0, at_us=5000, legacy=legacy)  # after every other event


def _cpu_only(b: TraceBuilder, legacy: bool) -> None:
    """CPU ops only (no device activity), allocating on the CPU."""
    b.memory(128, at_us=-5, legacy=legacy)
    for _ in range(2):
        with b.step():
            with b.op("aten::linear"):
                b.memory(256, legacy=legacy)
                b.cpu(5)
                b.memory(-256, legacy=legacy)
            with b.op("aten::relu"):
                b.cpu(2)


def _with_and_without(tmp_path, plant, legacy: bool):
    b = TraceBuilder()
    plant(b, legacy)
    doc = b.trace()
    (tmp_path / "with").mkdir()
    (tmp_path / "without").mkdir()
    with_mem = write_trace(tmp_path / "with" / "t.json", doc)
    bare = {**doc, "traceEvents": [e for e in doc["traceEvents"] if e.get("name") != "[memory]"]}
    assert len(bare["traceEvents"]) == len(doc["traceEvents"]) - len(b.memory_events)
    return b, with_mem, write_trace(tmp_path / "without" / "t.json", bare)


def _analysis(path):
    a = tracekit.load(path, cache=False, jobs=1)
    meta = {k: v for k, v in a.meta.items() if k not in ("path", "files")}
    return a.tables(per_step=True), json.loads(json.dumps(meta, default=str).replace(str(path), "<p>"))


@pytest.mark.parametrize("legacy", [False, True], ids=["kineto", "torch-1.9"])
@pytest.mark.parametrize("plant", [_training, _cpu_only], ids=["training", "cpu-only"])
def test_every_table_ignores_memory_events(tmp_path, plant, legacy):
    """The tables, meta and explain output of a trace are those of the same trace without its
    memory events (some of which come before and after everything else), but for the memory
    tables they add and the notice saying how to record memory that they take away."""
    _, with_mem, without = _with_and_without(tmp_path, plant, legacy)
    (tables, meta), (bare_tables, bare_meta) = _analysis(with_mem), _analysis(without)
    assert set(tables) == set(bare_tables) | {"memory", "memory_modules", "memory_timeline"}
    for name in bare_tables:
        pd.testing.assert_frame_equal(tables[name], bare_tables[name], obj=name)
    notice = [n for n in bare_meta["notices"] if "profile_memory=True" in n]
    assert len(notice) == 1 and not any("profile_memory=True" in n for n in meta["notices"])
    bare_meta["notices"].remove(notice[0])
    assert {k: v for k, v in meta.items() if k != "events_in_file"} == {
        k: v for k, v in bare_meta.items() if k != "events_in_file"
    }
    pattern = "gemm|mul|adam" if plant is _training else "linear|relu"
    said, bare_said = explain(with_mem, pattern), explain(without, pattern)
    assert said["meta"].pop("path") == str(with_mem) and bare_said["meta"].pop("path") == str(without)
    assert said == bare_said


@pytest.mark.parametrize("legacy", [False, True], ids=["kineto", "torch-1.9"])
def test_planted_memory_events_read_back(tmp_path, legacy):
    """Each planted allocation and free is one MEMORY row: time, signed bytes, device, address
    and the allocator's totals (absent in the legacy form: -1 / NaN)."""
    b, path, _ = _with_and_without(tmp_path, _training, legacy)
    raw = read_trace(path)
    assert not (raw.events["kind"].to_numpy() == MEMORY).any()  # split off as they are read
    got = raw.memory.sort_values("ts", kind="stable")
    want = sorted(b.memory_events, key=lambda m: m.ts)
    assert got["ts"].tolist() == [m.ts for m in want]
    assert got["bytes"].tolist() == [float(m.bytes) for m in want]
    assert got["device_type"].tolist() == [m.device_type for m in want] == [1, 1, 0, 1, 1]
    assert got["device_id"].tolist() == [m.device_id for m in want] == [0, 0, -1, 0, 0]
    assert set(got["name"].astype(str)) == {"[memory]"}
    if legacy:
        assert (got["addr"] == -1).all()
        assert got[["total_allocated", "total_reserved"]].isna().all().all()
    else:
        assert got["addr"].tolist() == [m.addr for m in want]
        assert got["total_allocated"].tolist() == [4096, 4096 + (1 << 20), 64, 4096, 0]
        assert got["total_reserved"].tolist() == [4096, 4096 + (1 << 20), 64, 4096 + (1 << 20)] * 1 + [
            4096 + (1 << 20)
        ]
    # The allocator's columns are the memory events' alone; the other events carry none of them.
    assert not set(MEMORY_ONLY) & set(raw.events.columns)
    assert list(raw.memory.columns) == list(MEMORY_COLUMNS)


def test_memory_events_alone_are_nothing_to_analyse(tmp_path):
    """A file of allocator events only is still "nothing to analyse" (they are not activity)."""
    b = TraceBuilder()
    b.memory(10, device=0)
    doc = b.trace()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("name") == "[memory]"]
    with pytest.raises(TraceError, match="nothing to analyse"):
        read_trace(write_trace(tmp_path / "t.json", doc))


def test_the_pipeline_keeps_memory_events_apart(tmp_path, monkeypatch):
    """The pipeline's ``events`` hold no MEMORY row; ``memory`` holds them all, read's columns."""
    from tracekit.pipeline import link
    from tracekit.pipeline.taxonomy import module_taxonomy

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    _, path, _ = _with_and_without(tmp_path, _training, False)
    raw = read_trace(path)
    t = link(raw, module_taxonomy())
    assert not (t.events["kind"].to_numpy() == MEMORY).any()
    assert len(t.memory) == 5 and list(t.memory.columns) == list(MEMORY_COLUMNS)
    assert np.array_equal(t.memory["ts"].to_numpy(), raw.memory["ts"].to_numpy())
    # A RawTrace whose memory events are still among its events (a cache entry) splits alike.
    from tracekit.read import cache

    key = cache.file_key(path, DEFAULT_MAX_BYTES)
    assert cache.store(raw, path, DEFAULT_MAX_BYTES, key) is not None
    whole = cache.load(path, DEFAULT_MAX_BYTES)
    assert whole is not None and whole.memory is None and (whole.events["kind"] == MEMORY).sum() == 5
    again = link(whole, module_taxonomy())
    assert np.array_equal(again.memory["ts"].to_numpy(), raw.memory["ts"].to_numpy())
    assert len(again.events) == len(t.events)
