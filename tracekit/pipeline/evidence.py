"""Phase evidence beyond the launching op's ranges: optimizer ops, and the step's tail.

A phase needs evidence (docs/metrics.md, "Phase of an activity"). :func:`assign_phases` first
applies the range evidence (autograd engine thread / ``evaluate_function`` / backward node ->
backward; ``Optimizer.step#`` -> optimizer; tracekit's phase annotation overrides). This module
adds the evidence that is not a range around the launch:

* optimizer ops launched outside an ``Optimizer.step#`` range: the fused and foreach optimizer
  kernels' ops (``aten::_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``,
  ``_foreach_addcdiv_``/``_foreach_addcmul_``/``_foreach_lerp_``, apex/DeepSpeed
  ``multi_tensor_adam``), and ``Optimizer.zero_grad#`` when it runs after the step's backward
  (before it, zeroing gradients prepares the step: forward);
* the autograd call (traces with Python stacks): work with no other evidence inside the
  ``backward()`` call on its thread (``torch/_tensor.py(N): backward``,
  ``torch/autograd/__init__.py(N): backward``, ``_engine_run_backward``, the engine's
  ``run_backward``) is backward: the gradient seed (``ones_like``) and the engine's start
  before its first node, and what runs after the last node before the call returns (DDP's
  reducer finishing its buckets, ``copy_bucket_to_grad``; FSDP's post-backward callback);
* DeepSpeed's engine frames (traces with Python stacks): work with no other evidence inside
  ``engine.backward`` is backward (loss scaling, the gradient-reduction epilogue), inside
  ``engine.step`` optimizer (grad norm, the parameter all-gather);
* the step's *tail*: work with no evidence launched after the step's last backward activity.
  Between the end of autograd and the optimizer it is, by the step's structure:

  - gradient reduction (the tail up to its last collective before any gradient-norm op:
    the collectives and the bucket copies/averaging around them): DDP's final bucket,
    DeepSpeed ``engine.backward``'s
    ``allreduce_gradients`` / reduce-scatter epilogue -> **backward**;
  - gradient norm and clipping (from the first norm op on, before the optimizer starts):
    DeepSpeed ``engine.step``'s grad-norm all-reduce before ``Optimizer.step#``,
    ``clip_grad_norm_`` -> **optimizer**;
  - anything else before the optimizer starts (or to the step's end when it has no
    optimizer work) -> **unattributed** (never optimizer by default).

After the optimizer has started, the work up to the last all-gather launched there is the
optimizer's (ZeRO's all-gather of the updated parameter partitions, and the copies before it).

Work with no evidence before the step's last backward activity is forward (the loss, and the
forward passes of further micro-batches), and so is other work with no evidence launched once
the optimizer has started (the next iteration's input preparation): the forward default.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..read.reader import PYTHON
from .intervals import containing
from .state import Trace, codes_of, row_codes, spread, str_in, take

ZERO_GRAD_PREFIX = "Optimizer.zero_grad#"
#: Ops only an optimizer's update runs (fused / foreach / multi-tensor implementations).
OPTIMIZER_OPS = re.compile(
    r"(?:^|::)(?:_fused_(?:adam|adamw|sgd|adagrad)_?|_foreach_(?:addcdiv|addcmul|lerp)_"
    r"|multi_tensor_(?:adam|lamb|sgd)\w*)$|^(?:FusedAdam|DeepSpeedCPUAdam|cpu_adam)\b",
    re.IGNORECASE,
)
#: Ops that compute a gradient norm (clipping, DeepSpeed's global grad norm).
NORM_OPS = re.compile(r"(?:^|::)(?:linalg_vector_norm|norm|_foreach_norm|frobenius_norm)$")
#: A collective that gathers (ZeRO rebuilds updated parameters with all-gather).
ALL_GATHER = re.compile(r"all_?gather", re.IGNORECASE)
NO_EVIDENCE = "default"
#: Phase labels, in the order their wall windows run in a step; ``phase`` arrays hold their codes.
PHASES = ["forward", "backward", "unattributed", "optimizer"]
PH = {p: i for i, p in enumerate(PHASES)}
#: Every evidence label; ``evidence`` arrays hold their codes (weakest first, as applied).
EVIDENCE = [
    NO_EVIDENCE,
    "evaluate_function",
    "backward_node",
    "backward_name",
    "autograd_thread",
    "optimizer_range",
    "optimizer_op",
    "zero_grad",
    "annotation",
    "engine_backward",
    "engine_step",
    "gradient_reduction",
    "grad_norm",
    "none",
    "param_gather",
    "autograd_call",
]
EV = {e: i for i, e in enumerate(EVIDENCE)}
#: What each evidence label means (``tracekit explain`` shows it beside the label).
EVIDENCE_TEXT = {
    NO_EVIDENCE: "no evidence: forward, the phase of work nothing marks as backward or optimizer",
    "evaluate_function": "launched inside autograd::engine::evaluate_function (the autograd engine)",
    "backward_node": "launched inside a backward node (an op with a forward-thread id)",
    "autograd_thread": "launched from an autograd engine thread (a thread that runs backward nodes "
    "and no ProfilerStep)",
    "backward_name": "launched inside a backward node known by its name alone (AddmmBackward: "
    "legacy profiler and Kineto before torch 1.9 record no sequence number or evaluate_function)",
    "optimizer_range": "launched inside an Optimizer.step# range",
    "optimizer_op": "launched by an optimizer-only op (fused/foreach/multi-tensor update)",
    "zero_grad": "launched inside Optimizer.zero_grad# after the step's backward",
    "annotation": "inside tracekit's phase annotation",
    "engine_backward": "inside DeepSpeed's engine.backward frame",
    "engine_step": "inside DeepSpeed's engine.step frame",
    "gradient_reduction": "the step's tail after autograd, up to its last collective: gradient reduction",
    "grad_norm": "the step's tail from the first gradient-norm op: gradient clipping",
    "none": "the step's tail with no evidence for any phase: unattributed",
    "param_gather": "after the optimizer, up to its last all-gather: ZeRO's parameter gather",
    "autograd_call": "inside a backward() call's Python frame on its thread, outside any node "
    "(autograd's start, or its end: DDP's reducer, FSDP's post-backward callback)",
}
#: DeepSpeed's engine.backward / engine.step frames (``with_stack`` traces).
ENGINE_FRAME = r"^deepspeed/runtime/engine\.py\(\d+\): (backward|step)$"
#: The Python frames of a ``backward()`` call (``with_stack`` traces): ``loss.backward()``,
#: ``torch.autograd.backward``, and the engine call inside them.
AUTOGRAD_CALL = re.compile(
    r"(?:^|/)torch/_tensor\.py\(\d+\): backward$|(?:^|/)torch/autograd/__init__\.py\(\d+\): backward$"
    r"|(?:^|/)torch/autograd/graph\.py\(\d+\): _engine_run_backward$"
    r"|^<built-in method run_backward of torch\._C\._EngineBase object"
)


def _matches(names: tuple[np.ndarray, np.ndarray], rx: re.Pattern) -> np.ndarray:
    """``rx.search`` per row of ``(codes, distinct)`` names, run once per distinct name that
    some row has (a code past the names reads False)."""
    codes, uniq = names
    used = np.flatnonzero(np.bincount(codes, minlength=len(uniq) + 1)[: len(uniq)])
    hit = np.zeros(len(uniq) + 1, bool)
    hit[used] = [bool(rx.search(str(n))) for n in uniq[used].tolist()]
    return spread(hit, codes)


def _op_names(t: Trace) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(innermost op, outermost op) name of each activity's launch ("" none), each as
    ``(codes, distinct names)``."""
    a, r = t.acts, t.ranges
    codes, uniq = t.name_codes
    top_ev = take(r["ev"].to_numpy(), a["top_r"].to_numpy(), -1)
    return codes_of(a["op"]), (take(codes, top_ev, len(uniq)), np.append(uniq, ""))


def optimizer_ops(t: Trace, phase: np.ndarray, evidence: np.ndarray) -> None:
    """Optimizer ops and post-backward ``zero_grad`` launched outside ``Optimizer.step#``."""
    free = evidence == EV[NO_EVIDENCE]
    if not free.any():
        return
    op, top = _op_names(t)
    hit = free & (_matches(op, OPTIMIZER_OPS) | _matches(top, OPTIMIZER_OPS))
    phase[hit], evidence[hit] = PH["optimizer"], EV["optimizer_op"]
    ev = t.events
    idx = t.once("zero_grad", ev, lambda: np.flatnonzero(t.name_test(_is_zero_grad)))
    if idx.size == 0:
        return
    a = t.acts
    ts = ev["ts"].to_numpy()[idx]
    inside = (
        containing(
            a["launch_pid"].to_numpy(),
            a["launch_ts"].to_numpy(),
            ev["pid"].to_numpy()[idx],
            ts,
            ts + ev["dur"].to_numpy()[idx],
        )
        >= 0
    )
    after = a["launch_ts"].to_numpy() > _per_step(a, phase == PH["backward"], "min")
    hit = (evidence == EV[NO_EVIDENCE]) & inside & after
    phase[hit], evidence[hit] = PH["optimizer"], EV["zero_grad"]


def _is_zero_grad(names: pd.Series) -> pd.Series:
    return names.str.startswith(ZERO_GRAD_PREFIX)


_NEVER = np.iinfo(np.int64).max
_BEFORE_ALL = np.iinfo(np.int64).min


def _per_step(a: pd.DataFrame, mask: np.ndarray, how: str, missing: int = _NEVER) -> np.ndarray:
    """Per activity, the min/max launch time (int64 ns) of its step's ``mask`` activities;
    ``missing`` where its step has none."""
    step = a["step"].to_numpy()
    if not mask.any():
        return np.full(len(step), missing, np.int64)
    ts = a["launch_ts"].to_numpy(np.int64)
    lo, hi = int(step.min()), int(step.max())
    if hi - lo > 4 * len(step):  # sparse step numbers: by sorting the activities
        return _per_step_sorted(step, ts, mask, how, missing)
    # a slot per step number (and one for the rows not in ``mask``), aggregated in place
    size = hi - lo + 1
    slot = np.where(mask, step - lo, size)
    ufunc, init = (np.maximum, np.iinfo(np.int64).min) if how == "max" else (np.minimum, _NEVER)
    agg = np.full(size + 1, init, np.int64)
    ufunc.at(agg, slot, ts)
    seen = np.bincount(slot, minlength=size + 1)[:size] > 0
    return np.where(seen, agg[:size], missing)[step - lo]


def _per_step_sorted(step, ts, mask, how: str, missing: int) -> np.ndarray:
    """:func:`_per_step` with the ``mask`` activities sorted by step."""
    order = np.argsort(step[mask], kind="stable")
    s, ts = step[mask][order], ts[mask][order]
    heads = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
    agg = {"max": np.maximum, "min": np.minimum}[how].reduceat(ts, heads)
    pos = np.minimum(np.searchsorted(s[heads], step), len(heads) - 1)
    return np.where(s[heads][pos] == step, agg[pos], missing).astype(np.int64)


def step_tail(t: Trace, phase: np.ndarray, evidence: np.ndarray) -> None:
    """Work with no evidence after the step's last backward activity (see the module doc)."""
    a = t.acts
    free = (evidence == EV[NO_EVIDENCE]) & (a["step"].to_numpy() >= 0) & a["launched"].to_numpy(bool)
    _engine_frames(t, free, phase, evidence)
    lts = a["launch_ts"].to_numpy(np.int64)
    last_bwd = _per_step(a, phase == PH["backward"], "max")  # no backward: no tail
    # Only launches the file records: a device activity placed by time has no launch to order.
    tail = (
        (evidence == EV[NO_EVIDENCE])
        & (a["step"].to_numpy() >= 0)
        & (lts > last_bwd)
        & a["launched"].to_numpy(bool)
    )
    if not tail.any():
        return
    tail &= evidence == EV[NO_EVIDENCE]
    first_opt = _per_step(a, phase == PH["optimizer"], "min")
    before_opt = lts < first_opt
    op, top = _op_names(t)
    norm = tail & before_opt & (_matches(op, NORM_OPS) | _matches(top, NORM_OPS))
    t_norm = _per_step(a, norm, "min")
    before_norm = lts < t_norm
    comm = tail & before_opt & before_norm & ~str_in(a["comm_text"], ("",))
    hi = _per_step(a, comm, "max", _BEFORE_ALL)
    reduction = tail & before_opt & before_norm & (lts <= hi)
    phase[reduction], evidence[reduction] = PH["backward"], EV["gradient_reduction"]
    grad_norm = tail & before_opt & ~before_norm
    phase[grad_norm], evidence[grad_norm] = PH["optimizer"], EV["grad_norm"]
    rest = tail & before_opt & ~reduction & ~grad_norm
    phase[rest], evidence[rest] = PH["unattributed"], EV["none"]
    # After the optimizer's update: ZeRO gathers the updated parameter partitions.
    after = tail & ~before_opt
    comm_after = after & _matches(codes_of(a["comm_text"]), ALL_GATHER)
    gather = after & (lts <= _per_step(a, comm_after, "max", _BEFORE_ALL))
    phase[gather], evidence[gather] = PH["optimizer"], EV["param_gather"]


def _engine_frames(t: Trace, free: np.ndarray, phase: np.ndarray, evidence: np.ndarray) -> None:
    """Work with no evidence inside DeepSpeed's ``engine.backward`` frame is backward (loss
    scaling, the gradient-reduction epilogue), inside ``engine.step`` optimizer (grad norm, the
    parameter all-gather): traces recorded with Python stacks."""
    ev = t.events
    idx, frames = t.once("engine_frames", ev, lambda: _engine_frame_rows(t))
    if idx.size == 0 or not free.any():
        return
    a = t.acts
    ts = ev["ts"].to_numpy()[idx]
    of = containing(
        a["launch_pid"].to_numpy(),
        a["launch_ts"].to_numpy(),
        ev["pid"].to_numpy()[idx],
        ts,
        ts + ev["dur"].to_numpy()[idx],
    )
    frame = take(frames, of, "")
    for name, ph in (("backward", "backward"), ("step", "optimizer")):
        hit = free & (frame == name)
        phase[hit], evidence[hit] = PH[ph], EV[f"engine_{name}"]


def _engine_frame_rows(t: Trace) -> tuple[np.ndarray, np.ndarray]:
    """The event rows of DeepSpeed's engine frames and which each is ("backward", "step")."""
    codes, uniq = t.name_codes  # each distinct name once
    which_name = pd.Series(uniq, dtype=object).str.extract(ENGINE_FRAME, expand=False).fillna("")
    which = which_name.to_numpy(dtype=object)
    idx = np.flatnonzero((t.events["kind"].to_numpy() == PYTHON) & (which != "")[codes])
    return idx, which[codes[idx]]


def autograd_calls(t: Trace) -> pd.DataFrame:
    """The outermost ``backward()`` call frames (:data:`AUTOGRAD_CALL`) of each thread:
    ``pid``, ``tid``, ``start``, ``end`` (ns), by thread and start; a frame inside another of
    its thread is left out (the nested frames of one call make one range). Once per trace."""
    return t.once("autograd_calls", t.events, lambda: _autograd_calls(t))


def _autograd_calls(t: Trace) -> pd.DataFrame:
    ev = t.events
    hit = t.name_test(lambda s: s.str.contains(AUTOGRAD_CALL))
    idx = np.flatnonzero((ev["kind"].to_numpy() == PYTHON) & hit)
    pid, tid, ts = ev["pid"].to_numpy()[idx], ev["tid"].to_numpy()[idx], ev["ts"].to_numpy()[idx]
    end = ts + ev["dur"].to_numpy()[idx]
    order = np.lexsort((np.arange(len(idx)), -end, ts, tid, pid))  # longest first at one start
    keep, last = [], (None, None, -1)
    for p, q, s, e in zip(*(x[order].tolist() for x in (pid, tid, ts, end))):  # a few per call
        inside = (p, q) == last[:2] and s < last[2]
        keep.append(not inside)
        if not inside:
            last = (p, q, e)
    rows = order[np.array(keep, bool)]
    return pd.DataFrame({"pid": pid[rows], "tid": tid[rows], "start": ts[rows], "end": end[rows]})


def call_start(t: Trace) -> np.ndarray:
    """Per activity: the start (ns) of the ``backward()`` call (:func:`autograd_calls`) around
    its launch on its thread; -1 for none."""
    calls = autograd_calls(t)
    a = t.acts
    if calls.empty:
        return np.full(len(a), -1, np.int64)
    pid = np.concatenate([calls["pid"].to_numpy(), a["launch_pid"].to_numpy()])
    tid = np.concatenate([calls["tid"].to_numpy(), a["launch_tid"].to_numpy()])
    thread = row_codes(pid, tid)  # one key per thread
    n = len(calls)
    start = calls["start"].to_numpy(np.int64)
    of = containing(thread[n:], a["launch_ts"].to_numpy(), thread[:n], start, calls["end"].to_numpy())
    return take(start, of, -1)


def autograd_call(t: Trace, phase: np.ndarray, evidence: np.ndarray) -> None:
    """Work with no other evidence launched inside a ``backward()`` call on its thread is
    backward (see the module doc): autograd's start before its first node, its end after the
    last (DDP's reducer, FSDP's post-backward callback)."""
    free = evidence == EV[NO_EVIDENCE]
    if not free.any():
        return
    hit = free & (call_start(t) >= 0)
    phase[hit], evidence[hit] = PH["backward"], EV["autograd_call"]
