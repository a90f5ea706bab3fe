"""An independent reading of a CPU capture's QKV, Output, head and OPT-style MLP rows (issue 37,
items 6 and 7, and OPT's activation), from the raw JSON with none of tracekit's code.

Per CPU op: its self time (its duration minus its direct child ops'), its enclosing ops and
``nn.Module`` ranges on its thread (by time containment), the ``ProfilerStep#`` it is in.
An op inside an ``autograd::engine::evaluate_function`` range is backward, and belongs to that
node's creator: the forward op with the node's ``Sequence number``; unless a module range
inside the node encloses it (a checkpointed forward rerun there), which it then belongs to.
Any other op belongs to its own innermost module. Rows, given the op the work belongs to:

* **QKV** / **Output**: an ``aten::linear`` run directly by an ``nn.MultiheadAttention``
  module (its outermost op inside the module), before / after the module's first
  ``scaled_dot_product_attention`` / ``bmm`` / ``baddbmm``;
* **Linear**: work inside the head module instance the test names (the model's known head),
  but its ``LayerNorm`` (a norm row);
* **MLP**: work inside a ``Linear`` or activation module (``ReLU``, ``GELU``...) whose parent
  module is a ``*DecoderLayer``: OPT's fc1, activation_fn and fc2, the whole FFN block of a
  layer that has no MLP module (DESIGN.md: MLP is "the whole MLP block"); of it, the work of
  the activation module alone is also given as the row **MLP activation**.

Result: ms per step, ``{(phase, row): ms}``.
"""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

CORE = ("aten::scaled_dot_product_attention", "aten::bmm", "aten::baddbmm")
NODE = "autograd::engine::evaluate_function:"
ACTIVATIONS = ("ReLU", "GELU", "GELUActivation", "NewGELUActivation", "SiLU")


def _load(path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def _cls(module: dict) -> str:
    return module["name"][len("nn.Module: ") :].rpartition("_")[0]


def _sweep(events: list[dict]) -> None:
    """Give each event of one thread ``ops`` (enclosing cpu ops, outermost first), ``mods``
    (enclosing module ranges) and ``kids`` (its direct child ops' durations, for self time)."""
    order = sorted(events, key=lambda e: (e["ts"], -e["dur"], e["cat"] != "python_function"))
    stack: list[dict] = []
    for e in order:
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
            stack.pop()
        e["ops"] = [s for s in stack if s["cat"] == "cpu_op"]
        e["mods"] = [s for s in stack if s["cat"] == "python_function"]
        e["kids"] = 0.0
        if e["cat"] == "cpu_op" and e["ops"]:
            e["ops"][-1]["kids"] += e["dur"]
        stack.append(e)


def _row(op: dict, module: dict | None, head: str) -> str | None:
    """The row of the work of ``op`` (a forward op) run inside ``module``."""
    if module is None:
        return None
    parent = module["mods"][-1] if module["mods"] else None
    if parent is not None and _cls(parent).endswith("DecoderLayer"):
        if _cls(module) in ACTIVATIONS:
            return "MLP activation"
        if _cls(module) == "Linear":
            return "MLP"
    if (
        any(m["name"] == f"nn.Module: {head}" for m in module["mods"] + [module])
        and _cls(module) != "LayerNorm"
    ):
        return "Linear"
    if _cls(module) != "MultiheadAttention":
        return None
    top = next((o for o in op["ops"] + [op] if o["ts"] >= module["ts"]), op)
    if top["name"] != "aten::linear":
        return None
    core = min((o["ts"] for o in module["own"] if o["name"] in CORE), default=float("inf"))
    return "QKV" if top["ts"] < core else "Output"


def rows(path, head: str) -> dict[tuple[str, str], float]:
    """``{(phase, row): ms per step}`` (see the module docstring); ``head``: the head module's
    instance (``Linear_4``, ``BertOnlyMLMHead_0``)."""
    events = _load(path)
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    keep = [e for e in events if e.get("cat") in ("cpu_op", "python_function")]
    keep = [e for e in keep if e["cat"] == "cpu_op" or e["name"].startswith("nn.Module: ")]
    by_tid = defaultdict(list)
    for e in keep:
        by_tid[(e["pid"], e["tid"])].append(e)
    for evs in by_tid.values():
        _sweep(evs)
    for e in keep:
        if e["cat"] == "python_function":
            e["own"] = []
    for e in keep:  # each module's own top ops (directly inside it, outside other ops there)
        if e["cat"] == "cpu_op" and e["mods"] and not [o for o in e["ops"] if o["ts"] >= e["mods"][-1]["ts"]]:
            e["mods"][-1]["own"].append(e)
    creator = {}
    for e in keep:
        seq = e.get("args", {}).get("Sequence number")
        if e["cat"] == "cpu_op" and seq is not None and not any(o["name"].startswith(NODE) for o in e["ops"]):
            creator.setdefault(seq, e)
    out: dict[tuple[str, str], float] = defaultdict(float)
    for e in keep:
        if e["cat"] != "cpu_op" or not any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps):
            continue
        nodes = [o for o in e["ops"] + [e] if o["name"].startswith(NODE)]
        module = e["mods"][-1] if e["mods"] else None
        if nodes and not (module is not None and module["ts"] > nodes[-1]["ts"]):
            fwd = creator.get(nodes[-1].get("args", {}).get("Sequence number"))
            row = _row(fwd, fwd["mods"][-1] if fwd and fwd["mods"] else None, head) if fwd else None
        else:
            row = _row(e, module, head)
        if row is not None:
            phase, ms = ("backward" if nodes else "forward"), (e["dur"] - e["kids"]) / 1e3
            out[(phase, row)] += ms
            if row == "MLP activation":
                out[(phase, "MLP")] += ms
    return {k: v / len(steps) for k, v in out.items()}
