"""What ``tracekit capture sweep`` writes and shows: ``sweep.json``, a Table III-style
``sweep.md`` (with the paper's published values beside it under ``--paper``) and the terminal
summary.

:func:`relative`: Needs: the rows (``tokens_per_s``, ``peak_mem_mb`` of those that ran). Adds:
``relative_throughput`` and ``relative_memory`` against the baseline, ``naive`` when it ran,
else the first method that ran (the document names it). :func:`with_paper`: Adds: each row's
``paper`` entry (table, model, platform, tokens/s, memory, relative throughput) or None.
"""

from __future__ import annotations

import textwrap

from tracekit.paper import cost, paper_costs

from .methods import Method

#: Units of the row fields (``sweep.json``'s ``units``).
UNITS = {
    "step_ms": "ms",
    "step_median_ms": "ms",
    "step_min_ms": "ms",
    "step_max_ms": "ms",
    "tokens_per_s": "tokens/s",
    "samples_per_s": "sequences/s",
    "peak_mem_mb": "MiB",
    "peak_rss_mb": "MiB",
    "peak_reserved_mb": "MiB",
    "relative_throughput": "x baseline tokens/s",
    "relative_memory": "x baseline peak_mem_mb",
    "seconds": "s",
}
#: --model -> the paper's model (tiny has no counterpart: the paper's smallest, 7B, is shown).
PAPER_MODEL = {"llama2-7b": "7B", "llama2-13b": "13B", "llama2-70b": "70B", "tiny": "7B"}
PLATFORM = "A800"


def relative(rows: list[dict]) -> str | None:
    """Set each row's relative throughput and memory; the baseline method's name (or None)."""
    ran = [r for r in rows if r["status"] == "ok" and r.get("tokens_per_s")]
    base = next((r for r in ran if r["method"] == "naive"), ran[0] if ran else None)
    for r in rows:
        ok = base is not None and r in ran
        r["relative_throughput"] = r["tokens_per_s"] / base["tokens_per_s"] if ok and base else None
        mem, base_mem = r.get("peak_mem_mb"), base.get("peak_mem_mb") if base else None
        r["relative_memory"] = mem / base_mem if ok and mem and base_mem else None
    return base["method"] if base else None


def paper_table(method: Method, max_batch: bool) -> str:
    """The paper's table for ``method``: IX (LoRA, QLoRA: batch 1 only), IV (largest batch), III."""
    if method.finetune:
        return "IX"
    return "IV" if max_batch else "III"


def with_paper(rows: list[dict], methods: dict[str, Method], model: str, max_batch: bool) -> dict:
    """Each row's ``paper`` entry; the document's ``paper`` block (citation, setting, model)."""
    paper_model = PAPER_MODEL.get(model, "7B")
    for r in rows:
        m = methods[r["method"]]
        table = paper_table(m, max_batch)
        entry = cost(m.label, table, paper_model, PLATFORM)
        if entry is not None:
            naive = cost("Naive", "III" if table == "IX" else table, paper_model, PLATFORM)
            tokens = entry["tokens_per_s"]
            entry["relative_throughput"] = tokens / naive["tokens_per_s"] if naive else None
            entry |= {"table": table, "model": paper_model, "platform": PLATFORM}
        r["paper"] = entry
    doc = paper_costs()
    return {
        "citation": doc["citation"],
        "setting": doc["setting"],
        "model": f"Llama2-{paper_model}",
        "platform": f"8x {PLATFORM}",
        "notes": doc["notes"],
    }


def _num(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


def spread(r: dict) -> str:
    """The fastest and slowest profiled step, ``40.1-162.3`` (ms), ``-`` when unknown."""
    lo, hi = r.get("step_min_ms"), r.get("step_max_ms")
    return "-" if lo is None or hi is None else f"{lo:,.1f}-{hi:,.1f}"


def markdown(doc: dict) -> str:
    """``sweep.md``: the paper's Table III layout (method, tokens/s, memory) for this sweep."""
    rows, paper, batch = doc["rows"], doc.get("paper"), doc["max_batch"]
    base = doc.get("baseline") or "-"
    head = ["Method", "Step ms (median)", "min-max", "Tokens/s", "M (MiB)", f"vs {base}"]
    head += ["BS"] if batch else []
    if paper:
        head += ["paper Tokens/s", "paper M (GB)", "paper vs Naive"] + (["paper BS"] if batch else [])
        head += ["paper table"]
    lines = [
        f"# tracekit capture sweep: {doc['model']} on {doc['device'].upper()}",
        "",
        _setting(doc),
        "",
        "| " + " | ".join(head) + " | status |",
        "|" + "|".join("---" if h in ("Method", "paper table") else "---:" for h in head) + "|---|",
    ]
    for r in rows:
        cells = [
            r["label"],
            _num(r.get("step_median_ms")),
            spread(r),
            _num(r["tokens_per_s"]),
            _num(r["peak_mem_mb"]),
            _num(r["relative_throughput"], 2),
        ]
        cells += [str(r.get("batch_size") or "-")] if batch else []
        if paper:
            p = r.get("paper") or {}
            cells += [
                _num(p.get("tokens_per_s")),
                _num(p.get("memory_gb")),
                _num(p.get("relative_throughput"), 2),
            ]
            cells += [str(p.get("batch_size") or "-")] if batch else []
            cells += [p.get("table", "-")]
        status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r['reason']}"
        lines.append("| " + " | ".join(_md(c) for c in [*cells, status]) + " |")
    if paper:
        where = f"{paper['model']} on {paper['platform']}"
        lines += ["", f"Paper: {where}, {paper['setting']} {paper['citation']}"]
        lines += ["Transcribed in tracekit/data/paper_costs.json (its notes say how)."]
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _setting(doc: dict) -> str:
    batch = "the largest batch that fits per method" if doc["max_batch"] else f"batch {doc['batch_size']}"
    limit = f", memory limit {doc['memory_limit_mb']:g} MiB" if doc.get("memory_limit_mb") else ""
    return (
        f"{batch} per rank, sequence length {doc['seq_len']}, {doc['nproc_per_node']} rank(s){limit}; "
        f"mean over {doc['steps']} profiled step(s) after {doc['warmup']} warm-up step(s); step ms: "
        "the median profiled step and the fastest-slowest (its noise). "
        f"M: {doc['memory']}. vs {doc.get('baseline') or '-'}: tokens/s relative to that method."
    )


def terminal_lines(doc: dict, width: int) -> list[str]:
    """The summary a person reads after a sweep, fitted to ``width`` columns."""
    batch = doc["max_batch"]
    head = ["method", "status", "step ms", "min-max", "tokens/s", "peak MiB", "vs base"]
    head += ["batch"] if batch else []
    body = []
    for r in doc["rows"]:
        row = [r["label"], r["status"], _num(r.get("step_median_ms")), spread(r)]
        row += [_num(r["tokens_per_s"]), _num(r["peak_mem_mb"])]
        row += [_num(r["relative_throughput"], 2)] + ([str(r.get("batch_size") or "-")] if batch else [])
        body.append(row)
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    first = max(8, width - sum(widths[1:]) - 2 * (len(head) - 1))
    widths[0] = min(widths[0], first)

    def line(cells: list[str]) -> str:
        name = cells[0] if len(cells[0]) <= widths[0] else cells[0][: widths[0] - 1] + "~"
        parts = [name.ljust(widths[0])]
        parts += [c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)) if i]
        return "  ".join(parts).rstrip()

    out = [line(head), *(line(b) for b in body)]
    failed = [r for r in doc["rows"] if r["status"] != "ok"]
    for r in failed:
        out += textwrap.wrap(f"{r['method']}: {r['reason']}", width, subsequent_indent="    ")
    return out
