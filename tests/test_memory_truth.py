"""Planted truth for the memory tables: every number per step, phase and module, exactly.

``TraceBuilder.memory`` plants allocator events where a real step makes them (inside the ops of
a Llama decoder layer's modules, in the backward nodes that free the saved activations, in the
optimizer), with the allocator's running totals and paired addresses. The truth is computed
here from what was planted (the events' step, phase, device, totals, addresses, and the module
category each was planted in) by the definitions of docs/metrics.md ("Memory"), with no
tracekit code; tracekit's per-step ``memory`` and ``memory_modules`` tables must equal it.
Variants: CUDA and ROCm (HIP) device types, torch 1.9's legacy form (no totals, no address),
two micro-batches in a step, a trace without markers, and an inference step (no backward).
"""

from __future__ import annotations

import math
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import replace

import pytest

import tracekit
from tracekit.filters import Filters
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

MB = float(1 << 20)
PHASES = ["step", "forward", "backward", "unattributed", "optimizer"]


class Plant:
    """A TraceBuilder whose memory events remember the module category they were planted in."""

    def __init__(self, device_type: int = 1, legacy: bool = False, markers: bool = True):
        self.b = TraceBuilder()
        self.kw = {"device": 0, "device_type": device_type, "legacy": legacy}
        self.markers = markers
        self.category: list[str] = []

    def mem(self, nbytes: int, category: str, cpu: bool = False, addr: int | None = None, **at):
        kw = dict(self.kw, device=None, device_type=0, **at) if cpu else dict(self.kw, **at)
        if addr is not None and not self.kw["legacy"]:
            kw["addr"] = addr
        ev = self.b.memory(nbytes, **kw)
        self.category.append(category)
        return ev

    def forward_pass(self, scale: int) -> dict:
        """One decoder layer and a loss; returns the forward ops and their saved activations."""
        b, saved = self.b, {}
        with b.module("LlamaDecoderLayer", "model.layers.0"):
            with b.module("LlamaRMSNorm", "model.layers.0.input_layernorm"):
                with b.op("aten::mul") as op:
                    saved["RMSNorm"] = (op, self.mem(1 * scale << 20, "RMSNorm"))
                    b.kernel(K_MUL, 2)
            with b.module("LlamaAttention", "model.layers.0.self_attn"):
                for proj in ("q_proj", "k_proj", "v_proj"):  # four Linear children: Q, K, V, O
                    with b.module("Linear", f"model.layers.0.self_attn.{proj}"):
                        with b.op("aten::mm") as op:
                            saved[proj] = (op, self.mem(2 * scale << 20, "QKV"))
                            b.kernel(GEMM_A, 5)
                with b.op("aten::bmm") as op:
                    saved["Bmm0"] = (op, self.mem(3 * scale << 20, "Bmm0"))
                    b.kernel(GEMM_A, 5)
                with b.op("aten::softmax") as op:
                    tmp = self.mem(5 << 20, "Softmax")  # a temporary, freed at once
                    self.mem(-(5 << 20), "Softmax", addr=tmp.addr)
                    saved["Softmax"] = (op, self.mem(4 * scale << 20, "Softmax"))
                    b.kernel(K_MUL, 2)
                with b.op("aten::bmm") as op:
                    saved["Bmm1"] = (op, self.mem(1 * scale << 20, "Bmm1"))
                    b.kernel(GEMM_A, 5)
                with b.module("Linear", "model.layers.0.self_attn.o_proj"):
                    with b.op("aten::mm") as op:
                        saved["Output"] = (op, self.mem(1 * scale << 20, "Output"))
                        b.kernel(GEMM_A, 5)
            with b.module("LlamaMLP", "model.layers.0.mlp"):
                with b.op("aten::mm") as op:
                    saved["MLP"] = (op, self.mem(6 * scale << 20, "MLP"))
                    self.mem(4096, "MLP", cpu=True)  # a CPU allocation, never freed
                    b.kernel(GEMM_A, 5)
        with b.op("aten::mse_loss") as op:
            saved["Other"] = (op, self.mem(1 << 20, "Other"))
            b.kernel(K_MUL, 2)
        return saved

    def backward_pass(self, saved: dict) -> None:
        """Each forward op's node: a gradient (kept), a temporary, its saved activation freed."""
        b = self.b
        with b.backward():
            for op, act in reversed(saved.values()):
                cat = self.category[self.b.memory_events.index(act)]
                with b.backward_node(op):
                    self.mem(512 << 10, cat)  # the input's gradient, kept
                    tmp = self.mem(256 << 10, cat)
                    b.kernel(GEMM_NN, 5)
                    self.mem(-(256 << 10), cat, addr=tmp.addr)
                    self.mem(-act.bytes, cat, addr=act.addr)

    def optimizer(self) -> None:
        with self.b.optimizer():
            with self.b.op("aten::_fused_adam_"):
                self.mem(3 << 20, "Other")
                self.b.kernel(K_ADAM, 5)

    def train_step(self, micro_batches: int = 1) -> None:
        for m in range(micro_batches):
            self.backward_pass(self.forward_pass(scale=m + 1))
        self.optimizer()

    def build(self, steps: int, micro_batches: int = 1, inference: bool = False):
        self.mem(64 << 20, "Other", at_us=-50)  # before the first step: the base allocation
        for _ in range(steps):
            with self.b.step() if self.markers else nullcontext():
                if inference:
                    self.forward_pass(scale=1)
                else:
                    self.train_step(micro_batches)
        return self


def _device(e) -> str:
    return "cpu" if e.device_type == 0 else f"gpu:{e.device_id}"


def truth(p: Plant) -> tuple[dict, dict]:
    """The per-step memory and memory_modules rows by the definitions, from the planted events."""
    events = [(e, c) for e, c in zip(p.b.memory_events, p.category) if e.step is not None or not p.markers]
    order = sorted(range(len(events)), key=lambda i: (events[i][0].ts, i))
    # Without a step the builder plants no phase: forward, the phase nothing marks otherwise.
    events = [
        (replace(e, phase=e.phase or "forward"), c, e.step if p.markers else 0)
        for e, c in (events[i] for i in order)
    ]
    return _windows(events), _modules(events)


def _windows(events: list) -> dict:
    out: dict = {}
    curves: dict = defaultdict(list)
    for e, _, step in events:
        curves[(step, _device(e))].append(e)
    for (step, dev), evs in curves.items():
        totals = all(e.total_allocated is not None for e in evs)
        level, running = [], 0
        for e in evs:
            running += e.bytes
            level.append(e.total_allocated if totals else running)
        for ph in PHASES:
            idx = [i for i, e in enumerate(evs) if ph in ("step", e.phase)]
            if not idx:
                continue
            chosen = [evs[i] for i in idx]
            base = level[idx[0]] - evs[idx[0]].bytes
            out[(step, dev, ph)] = {
                "events": len(idx),
                "allocated_mb": sum(e.bytes for e in chosen if e.bytes > 0) / MB,
                "freed_mb": -sum(e.bytes for e in chosen if e.bytes < 0) / MB,
                "peak_allocated_mb": max(e.total_allocated for e in chosen) / MB if totals else math.nan,
                "peak_growth_mb": max(0, max(level[i] for i in idx) - base) / MB,
            }
    return out


def _modules(events: list) -> dict:
    out: dict = defaultdict(lambda: defaultdict(float))
    addressed: dict = defaultdict(bool)
    for k, (e, cat, step) in enumerate(events):
        row = out[(step, _device(e), cat)]
        if e.phase == "forward" and e.bytes > 0:
            row["forward_allocated_mb"] += e.bytes / MB
            if e.addr is not None:
                addressed[(step, _device(e), cat)] = True
                row["held_mb"] += e.bytes / MB if _held(events, k) else 0.0
        elif e.phase == "backward":
            row["backward_allocated_mb" if e.bytes > 0 else "backward_freed_mb"] += abs(e.bytes) / MB
    for key, row in out.items():
        if row["forward_allocated_mb"] and not addressed[key]:
            row["held_mb"] = math.nan
    return out


def _held(events: list, k: int) -> bool:
    """Still allocated when its forward pass ended: the step's next non-forward event."""
    e, _, step = events[k]
    later = [(j, x) for j, (x, _, s) in enumerate(events) if j > k and s == step]
    end = next((j for j, x in later if x.phase != "forward"), math.inf)
    freed = next(
        (j for j, (x, _, _) in enumerate(events) if j > k and x.addr == e.addr and _device(x) == _device(e)),
        math.inf,
    )
    return freed >= end


def _check(p: Plant, tmp_path) -> tracekit.Analysis:
    want_windows, want_modules = truth(p)
    a = tracekit.load(p.b.write(tmp_path / "t.json"), cache=False, jobs=1)
    got = a.table("memory", per_step=True)
    assert {(int(r.step), r.device, r.phase) for r in got.itertuples()} == set(want_windows)
    for r in got.itertuples():
        want = want_windows[(int(r.step), r.device, r.phase)]
        for col, v in want.items():
            assert _same(getattr(r, col), v), (r.step, r.device, r.phase, col, getattr(r, col), v)
    mods = a.table("memory_modules", per_step=True)
    assert {(int(r.step), r.device, r.module) for r in mods.itertuples()} == set(want_modules)
    for r in mods.itertuples():
        want = want_modules[(int(r.step), r.device, r.module)]
        for col in ("forward_allocated_mb", "held_mb", "backward_allocated_mb", "backward_freed_mb"):
            assert _same(getattr(r, col), want[col]), (
                r.step,
                r.device,
                r.module,
                col,
                getattr(r, col),
                want[col],
            )
    return a


def _same(got: float, want: float) -> bool:
    return (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("device_type", [1, 6], ids=["cuda", "rocm"])
def test_training_steps(tmp_path, device_type):
    _check(Plant(device_type=device_type).build(steps=3), tmp_path)


def test_torch_1_9_form_has_growth_from_bytes_and_no_peak_or_held(tmp_path):
    _check(Plant(legacy=True).build(steps=3), tmp_path)


def test_each_micro_batch_holds_its_activations_until_its_own_backward(tmp_path):
    mods = _check(Plant().build(steps=3, micro_batches=2), tmp_path).table("memory_modules")
    mods = mods.set_index(["device", "module"])
    assert mods.loc[("gpu:0", "MLP"), "held_mb"] == 6 + 12  # both passes' saved outputs


def test_one_window_without_markers(tmp_path):
    _check(Plant(markers=False).build(steps=1), tmp_path)


def test_inference_holds_what_the_step_keeps(tmp_path):
    mem = _check(Plant().build(steps=3, inference=True), tmp_path).table("memory", per_step=True)
    assert set(mem["phase"]) == {"step", "forward"}


def test_without_memory_events_no_memory_table_and_one_notice(tmp_path):
    b = TraceBuilder()
    with b.step():
        b.kernel(GEMM_A, 10, op="aten::mm")
    a = tracekit.load(b.write(tmp_path / "t.json"), cache=False, jobs=1)
    memory_tables = {"memory", "memory_modules", "memory_timeline"}
    assert not memory_tables & set(a.tables())
    notes = [n for n in a.meta["notices"] if "memory" in n]
    assert len(notes) == 1 and "profile_memory=True" in notes[0]
    left_out = a.filtered(Filters(phase="backward")).meta["filters"]["tables_left_out"]
    assert not memory_tables & set(left_out)  # not a filter's doing: the run has none
    with_memory = _check(Plant().build(steps=3), tmp_path)
    assert memory_tables <= set(with_memory.tables())
    assert not any("memory" in n for n in with_memory.meta["notices"])
