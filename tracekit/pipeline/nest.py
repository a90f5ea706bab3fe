"""Step ``nest_cpu_ops``: the CPU op stack, module frame and backward node around each launch."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .. import annotations as ann
from ..read.reader import ANNOTATION, CPU_OP, PYTHON
from .nesting import F_BWD, F_COMM, F_EVAL, F_MODULE, F_OP, F_OPT, F_ROPE, own_context, sweep
from .state import Trace, add_columns, categorical_take, codes_of, lookup, str_in, take

OPT_PREFIX = "Optimizer.step#"
EVAL_PREFIX = "autograd::engine::evaluate_function:"
#: An autograd node's name: ``AddmmBackward`` (before torch 1.9), ``MmBackward0`` (since), or
#: the gradient accumulator ``torch::autograd::AccumulateGrad`` (its work, and the hooks it
#: runs, are backward on the main thread too).
BACKWARD_NODE_NAME = r"(?:torch::autograd::)?[A-Z]\w*Backward\d*|torch::autograd::AccumulateGrad"
MODULE_PREFIX = "nn.Module: "
COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms")
#: The context columns the sweep gives each range and each activity (range-table rows, -1 none).
CONTEXT = ("op_r", "top_r", "mod_r", "bwd_r", "comm_r")


def nest_cpu_ops(t: Trace) -> Trace:
    """Find the enclosing CPU ranges of every launch by time containment on its thread.

    Needs: ``acts.launch_pid``, ``launch_tid``, ``launch_ts``, ``launched``, ``ev``.
    Adds: ``t.ranges`` (one row per CPU op, module frame, optimizer/backward/collective range:
    ``ev``, ``name``, ``pid``, ``tid``, ``start``, ``end``, ``seq``, ``fwd_tid``, ``flags``
    (:mod:`tracekit.pipeline.nesting` bits) and its own enclosing context ``op_r`` ... ``bits``), and on
    ``acts``: ``op_r`` (innermost CPU op), ``top_r`` (outermost op inside the innermost module),
    ``mod_r`` (innermost module frame), ``bwd_r`` (innermost backward node), ``comm_r``
    (innermost collective range) as rows of ``t.ranges`` (-1 none); ``ctx_bits`` (inherited
    bits: under Optimizer.step, under evaluate_function, in a rotary frame, module inside the
    backward node); ``op``/``op_id`` (innermost op's name / event row) and ``comm_text``
    (the collective range's "Collective name" or name). Sets ``t.capture_modules``.
    Guarantees: the result equals the reference stack sweep (``nesting.sweep_loop``). On CPU
    traces every self-time piece of an op has the op's own context: the op is its innermost op
    (and its top op when no op encloses it inside the module).
    """
    ev, a = t.events, t.acts
    kind = ev["kind"].to_numpy()
    t.capture_modules = bool(
        (t.name_test(lambda s: s.str.startswith(ann.MODULE_PREFIX)) & (kind == ANNOTATION)).any()
    )
    t.ranges = _ranges(t, kind)
    r = t.ranges
    # CPU mode: a piece's context is its own op's (below), so only the ranges are swept.
    ok = a["launched"].to_numpy() & (t.mode == "gpu")
    on_ranges, at_points = sweep_with_points(
        r, a["launch_pid"].to_numpy()[ok], a["launch_tid"].to_numpy()[ok], a["launch_ts"].to_numpy()[ok]
    )
    own = {}
    for col, x in at_points.items():
        full = np.full(len(a), 0 if col == "ctx_bits" else -1, np.int64)
        full[ok] = x
        own[col] = full
    t.ranges = r = add_columns(r, on_ranges)
    if t.mode == "cpu":
        own.update(_own_op_context(a, r))
    own.update(op_columns(t, own["op_r"], own["comm_r"]))
    t.acts = add_columns(a, own)
    return t


def sweep_with_points(
    r: pd.DataFrame, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The stack sweep (:func:`tracekit.nesting.sweep`) over the ranges ``r`` and points
    ``(pid, tid, ts)`` (launches, memory events): ``(ranges' context, points' context)``, each
    ``{column: values}`` with :data:`CONTEXT` and the inherited bits (``bits`` on the ranges,
    ``ctx_bits`` on the points)."""
    n_r, n_p = len(r), len(ts)
    ctx = sweep(
        np.concatenate([r["pid"].to_numpy(), pid]),
        np.concatenate([r["tid"].to_numpy(), tid]),
        np.concatenate([r["start"].to_numpy(), ts]),
        np.concatenate([r["end"].to_numpy(), ts]),
        np.concatenate([np.ones(n_r, bool), np.zeros(n_p, bool)]),
        np.concatenate([r["flags"].to_numpy(), np.zeros(n_p, np.int64)]),
    )
    on_ranges = {col: x[:n_r] for col, x in zip(CONTEXT + ("bits",), ctx)}
    at_points = {col: x[n_r:] for col, x in zip(CONTEXT + ("ctx_bits",), ctx)}
    return on_ranges, at_points


def op_columns(t: Trace, op_r: np.ndarray, comm_r: np.ndarray) -> dict:
    """``op_id`` / ``op`` (the innermost op's event row and name) and ``comm_text`` of points
    whose innermost op and collective range are rows ``op_r`` / ``comm_r`` of ``t.ranges``."""
    r_ev = t.ranges["ev"].to_numpy()
    op_id = take(r_ev, op_r, -1)
    comm_text = _comm_text(t, take(r_ev, comm_r, -1))
    return {"op_id": op_id, "op": t.name_categorical(op_id), "comm_text": comm_text}


def _comm_text(t: Trace, comm_ev: np.ndarray) -> pd.Categorical:
    """Per activity, its collective range's "Collective name", else the range's name ("" none),
    as a categorical built from the codes of both columns."""
    c_codes, c_uniq = t.once("collective_codes", t.events, lambda: codes_of(t.events["collective"]))
    n_codes, n_uniq = t.name_codes
    c_uniq = np.append(c_uniq, "")  # code len(c_uniq) - 1: no range
    coll = take(c_codes, comm_ev, len(c_uniq) - 1)
    name = take(n_codes, comm_ev, len(n_uniq))
    code = np.where((c_uniq != "")[coll], coll, len(c_uniq) + name)  # tested once per value
    values = np.concatenate([c_uniq, n_uniq])
    return categorical_take(values, code, np.arange(len(code)), "")


def _own_op_context(a: pd.DataFrame, r: pd.DataFrame) -> dict[str, np.ndarray]:
    """CPU mode: every self-time piece of an op takes the context its launching op (the op
    itself, or the collective op that issued a worker thread's collective range) gives its own
    body (the op pushed onto its enclosing context), so all pieces of one op share one context:
    the context columns (:data:`CONTEXT` and ``ctx_bits``) of ``a``'s rows."""
    r_ev = r["ev"].to_numpy()
    own = lookup(pd.Series(np.arange(len(r)), index=r_ev), a["launch_ev"].to_numpy())
    ctx = own_context(r["flags"].to_numpy(), *(r[c].to_numpy() for c in CONTEXT + ("bits",)))
    return {col: take(x, own, 0 if col == "ctx_bits" else -1) for col, x in zip(CONTEXT + ("ctx_bits",), ctx)}


def _ranges(t: Trace, kind: np.ndarray) -> pd.DataFrame:
    """The range events the sweep needs (those with at least one flag), by event row."""
    ev = t.events
    rng = np.flatnonzero(np.isin(kind, (CPU_OP, ANNOTATION, PYTHON)))
    seq, fwd_tid = ev["seq"].to_numpy()[rng], ev["fwd_tid"].to_numpy()[rng]
    codes, uniq = t.name_codes
    flags = range_flags(
        (codes[rng], uniq),
        kind[rng],
        seq,
        fwd_tid,
        ~str_in(ev["collective"], ("",))[rng],
        t.capture_modules,
    )
    keep = flags != 0
    rng = rng[keep]
    ts = ev["ts"].to_numpy()[rng]
    return pd.DataFrame(
        {
            "ev": rng,
            "name": t.name_categorical(rng),
            "pid": ev["pid"].to_numpy()[rng],
            "tid": ev["tid"].to_numpy()[rng],
            "start": ts,
            "end": ts + ev["dur"].to_numpy()[rng],
            "seq": seq[keep],
            "fwd_tid": fwd_tid[keep],
            "flags": flags[keep],
        },
        copy=False,  # fresh arrays: kept as they are, not copied into one block
    )


def range_flags(
    names: tuple[np.ndarray, np.ndarray],
    kinds: np.ndarray,
    seq: np.ndarray,
    fwd_tid: np.ndarray,
    has_collective: np.ndarray,
    use_capture_modules: bool,
) -> np.ndarray:
    """Bit flags per range event (:mod:`tracekit.pipeline.nesting`), vectorised over the names
    (``(codes, distinct)``: each distinct name is tested once); ``has_collective``: the event
    records a collective ("Collective name")."""
    codes, uniq = names
    # Per distinct name, the flags its name alone gives, and the name tests that the event's
    # kind completes (bits above the flags'); read for every range by one gather. The tests
    # are pandas' ``str`` methods' (``contains(case=False)`` compares upper case), in Python.
    is_step, is_mod, is_rope, is_node = 1 << 16, 1 << 17, 1 << 18, 1 << 19
    module_prefix = ann.MODULE_PREFIX if use_capture_modules else MODULE_PREFIX
    # An autograd node by its name alone (``AddmmBackward``, ``CudnnConvolutionBackward``):
    # traces of the legacy profiler and of Kineto before torch 1.9 record backward nodes with
    # no Sequence number, no Fwd thread id and no evaluate_function around them.
    node = re.compile(BACKWARD_NODE_NAME)
    tests = (
        (F_OPT, lambda x: x.startswith(OPT_PREFIX)),
        (F_EVAL, lambda x: x.startswith(EVAL_PREFIX)),
        (F_COMM, lambda x: x.startswith(COMM_PREFIXES)),
        # ProfilerStep# recorded as a cpu_op/Operator (torch 1.8-1.13) is a step, not an op.
        (is_step, lambda x: x.startswith("ProfilerStep#")),
        (is_mod, lambda x: x.startswith(module_prefix)),
        (is_rope, lambda x: "ROTARY" in x.upper()),
        (is_node, lambda x: node.fullmatch(x) is not None),
    )
    names_ = uniq.tolist()
    by_name = np.array([sum(bit for bit, test in tests if test(x)) for x in names_], dtype=np.int64)
    named = by_name[codes]
    flags = named & (F_OPT | F_EVAL | F_COMM)
    is_op = (kinds == CPU_OP) & ((named & is_step) == 0)
    flags |= np.where(is_op, F_OP, 0)
    module_kind = ANNOTATION if use_capture_modules else PYTHON
    flags |= np.where((kinds == module_kind) & ((named & is_mod) != 0), F_MODULE, 0)
    # A backward node carries the forward thread's id (>0); forward ops carry none or 0.
    flags |= np.where(
        is_op & ((seq >= 0) & (fwd_tid > 0) | ((named & F_EVAL) != 0) | ((named & is_node) != 0)), F_BWD, 0
    )
    flags |= np.where(has_collective, F_COMM, 0)
    flags |= np.where((kinds == PYTHON) & ((named & is_rope) != 0), F_ROPE, 0)
    return flags
