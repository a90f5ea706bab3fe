"""Steps ``assign_phases`` and ``assign_stages``: training phase and inference stage of each activity."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import annotations as ann
from ..read.reader import ANNOTATION
from . import stages as _stages
from .evidence import EV, EVIDENCE, NO_EVIDENCE, PH, PHASES, autograd_call, optimizer_ops, step_tail
from .intervals import containing
from .nesting import F_BWD, F_EVAL, F_OPT, MOD_IN_BWD
from .state import (
    Coded,
    Trace,
    add_columns,
    as_str,
    categorical,
    categorical_take,
    distinct_rows,
    row_codes,
    take,
)

#: The annotated stages, in the order of their codes ("": none).
STAGES = np.array(["", "prefill", "decode"], dtype=object)


def assign_phases(t: Trace) -> Trace:
    """Give each activity a phase by its launching CPU context, and say what showed it.

    Needs: ``acts.launch_pid``, ``launch_tid``, ``launch_ts``, ``ctx_bits``, ``bwd_r``;
    ``t.step_ranges.pid``/``tid`` (the threads that run ProfilerSteps).
    Adds: ``acts.phase`` (forward / backward / unattributed / optimizer),
    ``acts.phase_evidence`` (the strongest evidence that decided it, weakest first: ``default``
    (none: forward, launched before the step's last backward activity), ``evaluate_function``
    (under autograd's evaluate_function), ``backward_node`` (inside an op of a backward node),
    ``autograd_thread`` (launched from an autograd engine thread), ``backward_name`` (inside a
    backward node known by its name alone, ``AddmmBackward``: traces before torch 1.9),
    ``optimizer_range`` (inside
    ``Optimizer.step#``), ``optimizer_op`` / ``zero_grad`` (optimizer ops outside that range),
    ``autograd_call`` (backward: inside a ``backward()`` call's Python frame on its thread,
    outside any node), ``annotation`` (tracekit's phase range), then for the step's tail
    ``gradient_reduction``
    (backward), ``grad_norm`` (optimizer) or ``none`` (unattributed); see
    :mod:`tracekit.pipeline.evidence`), ``acts.recompute`` (a backward activity launched inside
    a forward module range that runs inside a backward node: activation checkpointing's
    recomputation, reentrant or not, DeepSpeed's included) and ``acts.annotated_stage``
    (prefill/decode from tracekit's phase ranges, else "").
    Guarantees: later evidence in that order overrides earlier; tracekit's own phase ranges
    apply by time to every thread of their process; no activity is optimizer without evidence.
    """
    a = t.acts
    n = len(a)
    bits = a["ctx_bits"].to_numpy()
    # Codes into PHASES and EVIDENCE (tracekit.pipeline.evidence), labelled once at the end.
    evidence = np.full(n, EV[NO_EVIDENCE], dtype=np.int64)
    phase = np.full(n, PH["forward"], dtype=np.int64)
    node, named_only = _backward_nodes(t)
    rules = [
        ((bits & F_EVAL) != 0, "backward", "evaluate_function"),
        (node & ~named_only, "backward", "backward_node"),
        (named_only & ((bits & F_EVAL) == 0), "backward", "backward_name"),
        (_on_autograd_thread(t), "backward", "autograd_thread"),
        ((bits & F_OPT) != 0, "optimizer", "optimizer_range"),
    ]
    for mask, ph, why in rules:
        phase[mask], evidence[mask] = PH[ph], EV[why]
    optimizer_ops(t, phase, evidence)
    autograd_call(t, phase, evidence)
    annotated = _annotated_phase(t)
    for p in ann.TRAIN_PHASES:
        m = annotated.is_(p)
        phase[m], evidence[m] = PH[p], EV["annotation"]
    stage = np.zeros(n, dtype=np.intp)  # codes into STAGES
    for k, p in enumerate(STAGES[1:], 1):
        m = annotated.is_(p)
        phase[m], evidence[m], stage[m] = PH["forward"], EV["annotation"], k
    step_tail(t, phase, evidence)
    # Activation recomputation: a forward module range running again inside a backward node.
    t.acts = add_columns(
        a,
        {
            "recompute": (phase == PH["backward"]) & ((bits & MOD_IN_BWD) != 0),
            "phase": pd.Categorical.from_codes(phase, categories=pd.Index(PHASES)),
            "phase_evidence": categorical_take(np.array(EVIDENCE, dtype=object), evidence, np.arange(n), ""),
            "annotated_stage": Coded(stage, STAGES).categorical(),
        },
    )
    return t


def _backward_nodes(t: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Per activity: launched inside a backward node; and inside one known by its name alone
    (no Sequence number and no forward-thread id: the legacy profiler, Kineto before 1.9)."""
    bwd = t.acts["bwd_r"].to_numpy()
    r = t.ranges
    seq = take(r["seq"].to_numpy(), bwd, -1)
    fwd_tid = take(r["fwd_tid"].to_numpy(), bwd, 0)
    node = bwd >= 0
    return node, node & (seq < 0) & (fwd_tid <= 0)


def _annotated_phase(t: Trace) -> Coded:
    """Phase named by the ``tracekit.phase:`` range around each launch (by time), "" none (as
    codes: the rows are tested per phase, most traces have no such range)."""
    ev, a = t.events, t.acts
    idx, names = t.once("phase_ranges", ev, lambda: _phase_ranges(t))
    ts = ev["ts"].to_numpy()[idx]
    of = containing(
        a["launch_pid"].to_numpy(),
        a["launch_ts"].to_numpy(),
        ev["pid"].to_numpy()[idx],
        ts,
        ts + ev["dur"].to_numpy()[idx],
    )
    return Coded(np.where(of >= 0, of, len(names)), np.append(names, ""))


def _phase_ranges(t: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The event rows of tracekit's phase ranges and the phase or stage each names."""
    kind = t.events["kind"].to_numpy()
    idx = np.flatnonzero((kind == ANNOTATION) & t.name_test(lambda s: s.str.startswith(ann.PHASE_PREFIX)))
    return idx, np.array([ann.parse_phase_range(x) or "" for x in t.names_of(idx)], dtype=object)


def _on_autograd_thread(t: Trace) -> np.ndarray:
    """Launched from a thread that runs autograd's engine and never a ProfilerStep: a thread
    running backward nodes (``evaluate_function``, or ops with a forward thread id, as traces
    older than ``evaluate_function`` (torch 1.9) record them), so work the engine runs outside
    any node's op there (``AccumulateGrad``, gradient hooks) is backward too."""
    a = t.acts
    threads = t.once("autograd_threads", (t.ranges, t.step_ranges), lambda: _autograd_threads(t))
    if not threads:
        return np.zeros(len(a), bool)
    pid, tid = (np.array(v, np.int64) for v in zip(*threads))
    # The threads' codes come first: those below their number are theirs (they are distinct).
    code = row_codes(np.append(pid, a["launch_pid"].to_numpy()), np.append(tid, a["launch_tid"].to_numpy()))
    return code[len(threads) :] < len(threads)


def _autograd_threads(t: Trace) -> list[tuple[int, int]]:
    """The (pid, tid) of threads that run backward nodes and never a ProfilerStep."""
    r = t.ranges
    m = (r["flags"].to_numpy() & F_BWD) != 0
    if not m.any():
        return []
    pid, tid = r["pid"].to_numpy()[m], r["tid"].to_numpy()[m]
    first = distinct_rows(pid, tid)[1]
    main = set(zip(t.step_ranges["pid"].tolist(), t.step_ranges["tid"].tolist()))
    return sorted(set(zip(pid[first].tolist(), tid[first].tolist())) - main)


def assign_stages(t: Trace) -> Trace:
    """Give each activity its inference stage (see :mod:`tracekit.pipeline.stages`).

    Needs: ``acts.annotated_stage``, ``launch_pid``, ``launch_ts``, ``step``, ``phase``;
    ``t.modules``.
    Adds: ``acts.stage``: prefill / decode / mixed, or "" (not inference, or no way to tell).
    Guarantees: evidence in order: tracekit's phase ranges, serving step ranges, HF generate's
    model passes; the first that marks any activity decides for the whole trace.
    """
    ev, a = t.events, t.acts
    stage = as_str(a["annotated_stage"])
    if not (stage != "").any():
        kind = ev["kind"].to_numpy()
        srv = (kind == ANNOTATION) & ~t.name_test(
            lambda s: s.str.startswith(("ProfilerStep#", ann.PHASE_PREFIX))
        )
        ts = ev["ts"].to_numpy()[srv]
        stage = _stages.from_ranges(
            t.names_of(srv),
            ev["pid"].to_numpy()[srv],
            ts,
            ts + ev["dur"].to_numpy()[srv],
            a["launch_pid"].to_numpy(),
            a["launch_ts"].to_numpy(),
        )
        if not (stage != "").any():
            stage = _stages.from_passes(
                t.modules, a["launch_ts"].to_numpy(), a["step"].to_numpy(), as_str(a["phase"])
            )
    # No stage anywhere (training, most traces): one category "", as categorical(stage) gives.
    a["stage"] = (
        categorical(stage)
        if (stage != "").any()
        else Coded(np.zeros(len(a), np.intp), STAGES[:1]).categorical()
    )
    return t
