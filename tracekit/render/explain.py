"""Text of ``tracekit explain``: one block per chain, every line cut at the terminal's width.

Names come from traces (attacker-controlled text): control characters are replaced before a
line is cut, so nothing but printable text reaches the terminal.
"""

from __future__ import annotations

from pathlib import Path

from tracekit.explain import MISSING
from tracekit.perf.explain import lines as perf_lines
from tracekit.pipeline.taxonomy import MODULE_CATEGORIES

from .terminal import safe_plain

LABEL = 12  # width of the left column


def fit(line: str, width: int) -> str:
    """``line`` made safe and cut to ``width`` columns (with an ellipsis)."""
    s = safe_plain(line)
    return s if len(s) <= width else s[: max(width - 1, 0)] + "…"


def _ms(x: float | None) -> str:
    return "?" if x is None else f"{x:,.3f}"


def _pieces(d: dict, counted: str) -> str:
    """`` (N self-time pieces)`` where the ``counted`` CPU ops of ``d`` were split into pieces
    (their self time: the op minus the ops nested in it), else nothing."""
    n = d.get("pieces")
    return f" ({n} self-time pieces)" if n is not None and n != d[counted] else ""


def _ranks_text(ranks: list) -> str:
    if ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks[:8])) + (", ..." if len(ranks) > 8 else "")


def _row(label: str, text: str) -> str:
    return f"    {label:<{LABEL}}{text}"


def lines(doc: dict) -> list[str]:
    """The whole output as lines (not yet cut to width)."""
    m = doc["meta"]
    where = f" in step {m['step']}" if m.get("step") is not None else ""
    out = [
        (
            f"{m['pattern']!r} in {Path(m['path']).name} (rank {m['rank']}{where}): "
            f"{m['matched']} matches{_pieces(m, 'matched')}, {m['groups']} chains, {m['shown']} shown"
        ),
        "times: ms after the trace's first event; chains by total time, largest first",
    ]
    if len(m.get("ranks", [])) > 1:
        out.append(
            f"one rank searched: rank {m['rank']} of the {len(m['ranks'])} here "
            f"({_ranks_text(m['ranks'])}); --rank R searches another"
        )
    if m.get("rank_files", 1) > 1:
        out.append(
            f"this rank has {m['rank_files']} files (successive profiler windows), all searched: "
            + ", ".join(m["files"])
        )
    if m.get("rank_split"):
        out.append(f"ranks: {m['rank_split']}")
    if not m["matched"]:
        what = "no op with a model" if m.get("by_op") else "no activity name"
        out.append(f"{what} matches (case-insensitive substring or regular expression)")
    for i, c in enumerate(doc["chains"], 1):
        out += [""] + chain_lines(i, c, m.get("rank_files", 1) > 1)
    if m["shown"] < m["groups"]:
        out += [
            "",
            (f"{m['groups'] - m['shown']} more chain(s): raise --limit, or narrow the pattern or --step"),
        ]
    return out


def chain_lines(i: int, c: dict, several_files: bool = False) -> list[str]:
    """One chain's block; ``several_files``: the rank has several files, so name the one each
    activity came from."""
    steps = ", ".join(map(str, c["steps"][:12])) + (" ..." if len(c["steps"]) > 12 else "")
    out = [
        f"[{i}] {c['name']}",
        (
            f"    {c['count']} x{_pieces(c, 'count')}, {_ms(c['total_ms'])} ms in all; steps {steps}; "
            f"{c['module_instances']} module instance(s). First of them:"
        ),
        _activity_line(c["activity"]),
    ]
    if several_files:
        per_file = ", ".join(f"{n} in {f}" for f, n in c["files"].items())
        out.append(_row("file", f"{c['file']} (the chain: {per_file})"))
    out += _launch_lines(c) + _op_stack_lines(c)
    mod = c["module"]
    out.append(_row("module", "none (no module range around the launch)" if mod is None else mod["path"]))
    out += _backward_lines(c) + _label_lines(c) + perf_lines(c.get("perf"), _row)
    return out


def _activity_line(a: dict) -> str:
    """Where and how long: a device activity's stream and duration; a CPU op's thread and its
    whole self time (the sum of its pieces)."""
    cpu = a["kind"] == "cpu_op"
    took = (
        f"self time {_ms(a['dur_ns'] / 1e6)} ms in {a['pieces']} piece(s)"
        if cpu
        else f"{_ms(a['dur_ns'] / 1e6)} ms"
    )
    return _row(
        a["kind"], f"{'thread' if cpu else 'stream'} {a['stream']}, start {_ms(a['start_ms'])}, {took}"
    )


def _op_stack_lines(c: dict) -> list[str]:
    """The CPU ops and ranges around the launch, outermost first, one per line."""
    out = []
    for k, op in enumerate(c["op_stack"]):
        seq = f" seq {op['seq']}" if op["seq"] is not None else ""
        out.append(
            _row(
                "op stack" if k == 0 else "",
                f"{'> ' if k else ''}{op['name']} "
                f"({op['kind']}, {_ms(op['ts_ms'])} +{_ms(op['dur_ms'])}{seq})",
            )
        )
    return out


def _backward_lines(c: dict) -> list[str]:
    """The backward node and the forward op that created it (nothing outside backward nodes)."""
    b = c["backward"]
    if b is None:
        return []
    f = b["forward_op"]
    fwd = (
        "no forward op found"
        if f is None
        else f"forward op {f['name']} at {_ms(f['ts_ms'])} on thread {f['tid']}"
    )
    seq = f" (seq {b['seq']})" if b["seq"] is not None else ""
    return [_row("backward", f"node {b['node'] or '?'}{seq} -> {fwd}; link: {b['link']}")]


def _launch_lines(c: dict) -> list[str]:
    """The launch row: the runtime call, or why there is none in the file."""
    ln = c["launch"]
    if ln is not None:
        corr = "" if ln["correlation"] is None else f", correlation {ln['correlation']}"
        # CPU traces: an op launches itself; a gloo worker's range is queued by a c10d op
        who = ln["runtime"] if corr or not ln["runtime"] else f"queued by {ln['runtime']}"
        return [
            _row(
                "launch",
                f"{who or 'the op itself'}{corr}, at {_ms(ln['ts_ms'])} on thread {ln['tid']}",
            )
        ]
    why, evidence = MISSING.get(c.get("launch_missing") or "", ("not recorded", ""))
    out = [_row("launch", f"none in the file: {why}")]
    if evidence:
        out.append(_row("", f"(its correlation id {c['activity']['correlation']} is {evidence})"))
    return out


def _label_lines(c: dict) -> list[str]:
    """Phase, step, categories and the table cells of a chain."""
    s = c["step"]
    renumbered = (
        f"; step {s['in_file']} of its file, renumbered" if s.get("in_file", s["step"]) != s["step"] else ""
    )
    k, mc = c["kernel_category"], c["module_category"]
    out = [
        _row("phase", f"{c['phase']['phase']} (evidence: {c['phase']['evidence']})"),
        *([_row("", c["phase"]["why"])] if c["phase"].get("why") else []),
        _row("step", f"{s['step']} (by {s['by']}{renumbered})" if s["step"] >= 0 else "outside every step"),
        *([_row("walls", s["walls"])] if s.get("walls") else []),
        _row("category", f"{k['group']} / {k['category']} (rule {k['rule']})"),
    ]
    if mc["category"]:
        out.append(_row("module cat", f"{mc['category']} (rule {mc['rule']})"))
        if mc.get("why"):
            out.append(_row("", mc["why"]))
    if co := c.get("collective"):
        who = (
            "the activity counts it" if co["counted"] else "counted once, on the call that holds or queued it"
        )
        out.append(
            _row("collective", f"{co['collective']}, named by the {co['named_by']} {co['text']}; {who}")
        )
    out.append(_row("tables", cells(c)))
    return out


def cells(c: dict) -> str:
    """Which table rows the chain's time lands in (docs/metrics.md)."""
    if c["step"]["step"] < 0:
        return "none: outside every step"
    if not c["step"]["complete"]:
        return "none: its step is incomplete (cut by the profiling window)"
    k, group = c["kernel_category"], c["kernel_category"]["group"]
    parts = [f"kernels {'memcpy' if group == 'memset' else group}/{k['category']}"]
    if group == "compute":
        mc = c["module_category"]["category"]
        parts.append(f"modules {mc if mc in MODULE_CATEGORIES else 'Other'}")
        parts.append(f"phases {c['phase']['phase']} compute_ms")
    elif group == "comm":
        parts.append("modules Exposed communication (the part not under compute)")
        parts.append(f"phases {c['phase']['phase']} comm_ms")
    return " · ".join(parts)
