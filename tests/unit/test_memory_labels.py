"""Unit tests of label_memory: memory events labelled like a launch at their place."""

from __future__ import annotations

import numpy as np
import pandas as pd
from frames import ANNOTATION, CPU_OP, KERNEL, MEMORY, PYTHON, RUNTIME, ev, trace

from tracekit.pipeline.backward import link_backward
from tracekit.pipeline.categories import assign_categories
from tracekit.pipeline.launches import join_launches
from tracekit.pipeline.memory import ROW_COLUMNS, held_at_pass_end, label_memory, memory_rows
from tracekit.pipeline.modules import assign_modules
from tracekit.pipeline.nest import nest_cpu_ops
from tracekit.pipeline.phases import assign_phases
from tracekit.pipeline.state import categorical
from tracekit.pipeline.steps import find_steps
from tracekit.pipeline.taxonomy import kernel_rules, module_taxonomy

FWD, BWD = 1, 2  # forward (main) and autograd threads
GPU = {"device_type": 1, "device_id": 0}


def _mem(ts: int, nbytes: int, addr: int, total: float, tid: int = FWD, **kw) -> dict:
    return ev(
        MEMORY, "[memory]", ts, 0, tid=tid, bytes=nbytes, addr=addr, total_allocated=total, **{**GPU, **kw}
    )


def _rows() -> list[dict]:
    return [
        ev(ANNOTATION, "ProfilerStep#1", 0, 1000, tid=FWD),
        ev(PYTHON, "nn.Module: LlamaMLP_0", 10, 200, tid=FWD),
        ev(CPU_OP, "aten::linear", 20, 100, tid=FWD, seq=5, fwd_tid=0),
        ev(CPU_OP, "aten::mm", 30, 50, tid=FWD, seq=6, fwd_tid=0),
        ev(RUNTIME, "cudaLaunchKernel", 40, 5, tid=FWD, corr=1),
        ev(CPU_OP, "autograd::engine::evaluate_function: MmBackward0", 400, 100, tid=BWD),
        ev(CPU_OP, "MmBackward0", 410, 80, tid=BWD, seq=6, fwd_tid=FWD),
        ev(CPU_OP, "aten::mm", 420, 50, tid=BWD),
        ev(RUNTIME, "cudaLaunchKernel", 430, 5, tid=BWD, corr=2),
        ev(CPU_OP, "Optimizer.step#Adam.step", 700, 100, tid=FWD),
        ev(RUNTIME, "cudaLaunchKernel", 710, 5, tid=FWD, corr=3),
        ev(KERNEL, "gemm_fwd", 60, 30, pid=0, tid=7, corr=1, stream=7),
        ev(KERNEL, "gemm_bwd", 450, 30, pid=0, tid=7, corr=2, stream=7),
        ev(KERNEL, "adam", 720, 30, pid=0, tid=7, corr=3, stream=7),
        # memory, out of time order on purpose (the step sorts them)
        _mem(760, -10, 3, 1230),  # optimizer frees the loss's input
        _mem(35, 100, 1, 1100),  # the mm output: saved for backward
        _mem(90, 50, 2, 1150),  # a temporary of aten::linear ...
        _mem(150, -50, 2, 1100),  # ... freed inside the module
        ev(MEMORY, "[memory]", 50, 0, tid=FWD, bytes=8, addr=9, total_allocated=8, device_type=0),
        _mem(300, 10, 3, 1110),  # outside every module
        _mem(425, 200, 4, 1310, tid=BWD),  # the gradient
        _mem(480, -100, 1, 1210, tid=BWD),  # backward frees the saved output
        _mem(720, 30, 5, 1240),  # optimizer state
    ]


def _labelled(rows: list[dict]):
    tax = module_taxonomy(None)
    t = find_steps(join_launches(trace(*rows)))
    t = assign_phases(assign_modules(link_backward(nest_cpu_ops(t)), tax))
    return label_memory(assign_categories(t, tax, kernel_rules(None)), tax)


def test_memory_events_take_step_phase_and_module_of_a_launch_at_their_place():
    t = _labelled(_rows())
    m = t.memory.sort_values("ts")
    assert m["ts"].tolist() == [35, 50, 90, 150, 300, 425, 480, 720, 760]
    assert (m["step"] == 1).all()
    assert m["phase"].astype(str).tolist() == ["forward"] * 5 + ["backward"] * 2 + ["optimizer"] * 2
    assert m["module"].astype(str).tolist() == ["MLP"] * 4 + ["Other"] + ["MLP"] * 2 + ["Other"] * 2
    assert m["device"].astype(str).tolist() == ["gpu:0", "cpu"] + ["gpu:0"] * 7
    assert m["held"].tolist() == [True, True, False, False, True, False, False, False, False]
    assert m["t_ns"].tolist() == m["ts"].tolist()  # the step began at 0
    assert t.meta["memory_events"] == 9


def test_a_trace_without_memory_events_has_an_empty_memory_table():
    t = _labelled([r for r in _rows() if r["kind"] != MEMORY])
    assert t.memory.empty and t.meta["memory_events"] == 0
    assert memory_rows(t.memory, pd.Series([1])).columns.tolist() == ROW_COLUMNS


def test_memory_rows_are_the_complete_steps_events_in_time_order():
    t = _labelled(_rows())
    rows = memory_rows(t.memory, pd.Series([1]))
    assert rows.columns.tolist() == ROW_COLUMNS
    assert rows["t_ns"].tolist() == [35, 50, 90, 150, 300, 425, 480, 720, 760]
    assert memory_rows(t.memory, pd.Series([2])).empty


def test_held_ends_each_forward_pass_where_its_backward_starts():
    # two micro-batches: fwd (0, 1), bwd (2, 3), fwd (4, 5), bwd (6); one step, one device
    phase = np.array(["f", "f", "b", "b", "f", "f", "b"])
    addr = np.array([1, 2, 3, 1, 1, 4, 2])
    nbytes = np.array([8, 8, 8, -8, 8, 8, -8], dtype=float)
    device = categorical(np.full(7, "gpu:0", object))
    held = held_at_pass_end(np.zeros(7, np.int64), phase == "f", device, addr, nbytes)
    # 0: freed at 3, after its pass ended at 2; 1: freed at 6; 4: never freed; 5: never
    assert held.tolist() == [True, True, False, False, True, True, False]
    # a free inside the pass: not held; without an address: never held
    held = held_at_pass_end(
        np.zeros(3, np.int64),
        np.array([True, True, False]),
        device[:3],
        np.array([7, 7, -1]),
        np.array([8.0, -8.0, 8.0]),
    )
    assert held.tolist() == [False, False, False]
