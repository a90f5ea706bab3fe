"""An independent ground truth for CPU-only traces, written without tracekit's code.

DESIGN.md: on CPU traces the tables are over CPU op *self* time (an op's duration minus the ops
nested in it). The truth here is that rule read literally, with plain ``json`` and one stack
walk per thread:

* every CPU op's self time (``dur`` minus its direct child ops' ``dur``);
* its step: the ProfilerStep range its start lies in;
* its phase: optimizer inside ``Optimizer.step#``; backward inside a backward node (an op with
  a forward-thread id, or ``autograd::engine::evaluate_function``); recompute when an
  ``nn.Module`` frame opens inside that backward node (a module run again); otherwise, on
  DeepSpeed, what its engine's own ``backward`` or ``step`` frame holds (loss scaling and the
  gradient reduction after autograd are backward, the grad norm before ``Optimizer.step#``
  optimizer: issue 12.11); backward inside the Python frame of a ``backward()`` call
  (``torch/_tensor.py(N): backward``, ``torch/autograd/__init__.py(N): backward``: the
  gradient seed and DDP's reducer after the last node, issue 37.1-2); else forward;
* its module instance: forward and recompute, the innermost ``nn.Module`` frame around it;
  backward, the module of the node's creator, the LAST forward op with the node's sequence
  number that started before the node.

A collective's own work is CPU time too: gloo runs each collective a ``c10d::*`` op queued on a
worker thread (``pt_gloo_runloop``), recorded as a ``gloo:*`` range outside every op of that
thread. Such a range counts like an op (its self time), and its step, phase and module are those
of the op that queued it: the collective op of its process that started last before it (the
work cannot start before it is queued; DeepSpeed and DDP wait for one phase's collectives
before the next phase queues any).

:func:`truth` is thread time (what the labelled intervals sum to); :func:`busy` is wall time per
step and phase, the measure of the union of those self-time pieces over every thread (what the
phases table's busy time is: a worker's collective that runs while the main thread is inside
an op of the same phase is not counted twice).

Used by tests/test_cpu_truth.py, which compares tracekit with it.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from pathlib import Path

MODULE = "nn.Module: "
#: Ranges of a collective's own work (gloo's worker threads; nccl's CPU ranges).
COLLECTIVE = ("gloo:", "nccl:")
#: Ops that queue a collective.
QUEUES = ("c10d::", "record_param_comms")
#: DeepSpeed's engine.backward and engine.step Python frames ("deepspeed/runtime/engine.py(N): step").
ENGINE = {"backward": "backward", "step": "optimizer"}


def _events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def _kind(e: dict) -> str | None:
    cat, name = str(e.get("cat", "")).lower(), e.get("name", "")
    if name.startswith("ProfilerStep#"):
        return None
    if cat in ("cpu_op", "operator") or name.startswith(COLLECTIVE):
        return "op"
    if name.startswith("Optimizer.step#"):
        return "opt"
    if cat == "python_function" and name.startswith(MODULE):
        return "mod"
    if cat == "python_function" and name.startswith("deepspeed/runtime/engine.py("):
        return "engine" if name.rpartition(": ")[2] in ENGINE else None
    if cat == "python_function" and name.endswith(": backward"):
        path = name.rpartition("(")[0]
        return "call" if path.endswith(("torch/_tensor.py", "torch/autograd/__init__.py")) else None
    return None


def _walk(events: list[dict]) -> list[dict]:
    """One record per op: the op, its self time and the ranges open around it (outermost first)."""
    threads: dict = defaultdict(list)
    for e in events:
        k = _kind(e)
        if k:
            threads[(e["pid"], e["tid"])].append((k, e))
    ops = []
    for items in threads.values():
        items.sort(key=lambda x: (x[1]["ts"], -x[1]["dur"], x[0] == "op"))
        stack: list[tuple[str, dict, dict | None]] = []
        for k, e in items:
            stack = [s for s in stack if s[1]["ts"] + s[1]["dur"] > e["ts"]]
            ctx = [(sk, se) for sk, se, _ in stack]
            rec = {"e": e, "ctx": ctx, "self": e["dur"], "kids": []} if k == "op" else None
            if rec is not None:
                parent = next((r for sk, _, r in reversed(stack) if sk == "op"), None)
                if parent is not None:
                    parent["self"] -= e["dur"]
                    parent["kids"].append((e["ts"], e["ts"] + e["dur"]))
                ops.append(rec)
            stack.append((k, e, rec))
    return ops


def _is_node(e: dict) -> bool:
    a = e.get("args", {})
    return a.get("Fwd thread id", 0) > 0 or e["name"].startswith("autograd::engine::evaluate_function")


def _labelled(path: Path) -> list[tuple[tuple, dict]]:
    """Every op record with its (step, phase, module instance); step None outside every step."""
    events = _events(path)
    steps = [
        (e["ts"], e["ts"] + e["dur"], int(e["name"][13:]))
        for e in events
        if e["name"].startswith("ProfilerStep#")
    ]
    ops = _walk(events)
    creators: dict = defaultdict(list)  # sequence number -> [(start, module instance)]
    for rec in ops:
        e, a = rec["e"], rec["e"].get("args", {})
        mods = [x["name"][len(MODULE) :] for k, x in rec["ctx"] if k == "mod"]
        rec["module"] = mods[-1] if mods else ""
        if a.get("Sequence number", -1) >= 0 and not _is_node(e):
            creators[a["Sequence number"]].append((e["ts"], rec["module"]))
    labels = {}
    for rec in ops:
        phase, module = _phase_and_module(rec, creators)
        step = next((s for lo, hi, s in steps if lo <= rec["e"]["ts"] < hi), None)
        labels[id(rec)] = (step, phase, module)
    queued = sorted((r["e"]["pid"], r["e"]["ts"], id(r)) for r in ops if r["e"]["name"].startswith(QUEUES))
    for rec in ops:
        e = rec["e"]
        if e["name"].startswith(COLLECTIVE) and not any(k == "op" for k, _ in rec["ctx"]):
            by = [q for p, ts, q in queued if p == e["pid"] and ts <= e["ts"]]
            if by:
                labels[id(rec)] = labels[by[-1]]
    return [(labels[id(rec)], rec) for rec in ops]


def _phase_and_module(rec: dict, creators: dict) -> tuple[str, str]:
    ctx = rec["ctx"] + [("op", rec["e"])]
    nodes = [i for i, (k, x) in enumerate(ctx) if k == "op" and _is_node(x)]
    mods = [i for i, (k, _) in enumerate(ctx) if k == "mod"]
    engine = [ENGINE[x["name"].rpartition(": ")[2]] for k, x in ctx if k == "engine"]
    if any(k == "opt" for k, _ in ctx):
        return "optimizer", rec["module"]
    if not nodes:
        if any(k == "call" for k, _ in ctx):
            return "backward", rec["module"]
        return (engine[-1] if engine else "forward"), rec["module"]
    if mods and mods[-1] > nodes[-1]:
        return "recompute", rec["module"]
    node = ctx[nodes[-1]][1]
    seq = node.get("args", {}).get("Sequence number", -1)
    before = [m for t, m in creators.get(seq, []) if t < node["ts"]]
    return "backward", before[-1] if before else ""


def truth(path: Path) -> Counter:
    """Self time in microseconds per (step, phase, module instance); phase in forward,
    backward, recompute, optimizer; the instance is the frame's name without "nn.Module: "."""
    out: Counter = Counter()
    for key, rec in _labelled(path):
        if key[0] is not None:
            out[key] += rec["self"]
    return out


def busy(path: Path) -> Counter:
    """Wall time in microseconds per (step, phase): the measure of the union of the phase's
    self-time pieces (an op's interval minus its children's) over every thread."""
    pieces: dict = defaultdict(list)
    for (step, phase, _), rec in _labelled(path):
        if step is None:
            continue
        lo = rec["e"]["ts"]
        for a, b in sorted(rec["kids"]) + [(rec["e"]["ts"] + rec["e"]["dur"],) * 2]:
            if a > lo:
                pieces[(step, phase)].append((lo, a))
            lo = max(lo, b)
    out: Counter = Counter()
    for key, spans in pieces.items():
        end = float("-inf")
        for a, b in sorted(spans):
            out[key] += max(0.0, b - max(a, end))
            end = max(end, b)
    return out
