"""Seed corpora of the surface targets (:mod:`fuzz_surfaces`), made from the real traces and a
few hostile shapes of issue 39; ``fuzz/run.py`` calls :data:`SURFACE_SEEDS` per target."""

from __future__ import annotations

import gzip
import json
import struct
from collections.abc import Callable
from pathlib import Path


def _docs(traces: list[Path], limit: int = 40):
    """The first ``limit`` traces that decode, as documents."""
    n = 0
    for path in traces:
        raw = path.read_bytes()
        try:
            doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (ValueError, OSError):
            continue
        if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
            yield doc
            n += 1
            if n >= limit:
                return


def _write(folder: Path, items: list[bytes]) -> Path:
    for i, data in enumerate(items):
        (folder / f"seed-{i}").write_bytes(data)
    return folder


def shapes(folder: Path, traces: list[Path]) -> Path:
    """Modelled ops' recorded shapes from the traces, and issue 39's huge dims."""
    from tracekit.perf.ops import READERS

    names = sorted(READERS)
    items: list[bytes] = []
    seen: set = set()
    for doc in _docs(traces):
        for e in doc["traceEvents"]:
            args = e.get("args") if isinstance(e, dict) else None
            if not isinstance(args, dict) or e.get("name") not in READERS or "Input Dims" not in args:
                continue
            texts = [json.dumps(args.get(k, [])) for k in ("Input Dims", "Input type", "Concrete Inputs")]
            key = (e["name"], *texts)
            if key in seen or len(seen) >= 600:
                continue
            seen.add(key)
            items.append(bytes([names.index(e["name"]) % 256]) + "\x00".join(texts).encode())
    bf16 = '["c10::BFloat16", "c10::BFloat16"]'
    for i, name in enumerate(names):
        for dims in ("[[4096, 4096], [4096, 4096]]", "[[1073741824, 1073741824, 1073741824, 4, 8], [8, 4]]"):
            items.append(bytes([i % 256]) + f'{dims}\x00{bf16}\x00["", ""]'.encode())
        del name
    return _write(folder, items)


def memory(folder: Path, traces: list[Path]) -> Path:
    """Runs of real ``[memory]`` events' args, many devices, and bytes near float64's range."""
    items: list[bytes] = []
    for doc in _docs(traces):
        args = [e["args"] for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") == "[memory]"]
        for at in range(0, len(args), max(1, len(args) // 6)):
            items.append(json.dumps(args[at : at + 24]).encode())
        if len(items) > 200:
            break
    many = [{"Device Type": 1, "Device Id": i, "Bytes": 1024 * (i + 1), "Addr": i} for i in range(40)]
    items.append(json.dumps(many).encode())
    items.append(struct.pack("<bd", 1, 1.5e308) * 4 + struct.pack("<bd", 0, -1.5e308))
    items.append(struct.pack("<bd", 1, 2.0**50) + struct.pack("<bd", 1, 2.0**50 - 1) * 2)
    items.append(json.dumps(HUGE_MEMORY_ARGS).encode())
    return _write(folder, items)


#: ``[memory]`` args at and around the bound of :mod:`tracekit.read.memory_bound` (2^50), as
#: ints past int64 and float64 too, in each of the three byte fields.
HUGE_MEMORY_ARGS = [
    {"Device Type": 1, "Device Id": 0, "Addr": i, field: value, "Total Reserved": 1 << 30}
    for i, (field, value) in enumerate(
        (f, v)
        for f in ("Bytes", "Total Allocated", "Total Reserved")
        for v in (2**50 - 1, 2**50, -(2**50), 1e300, 2**70, 2**64, 2**1100, "1e300")
    )
]


def memory_events() -> list[dict]:
    """``[memory]`` events of :data:`HUGE_MEMORY_ARGS` (for the reader and scanner targets)."""
    ev = {"ph": "i", "s": "t", "cat": "[memory]", "name": "[memory]", "pid": 1, "tid": 1}
    return [{**ev, "ts": 1000 + i, "args": a} for i, a in enumerate(HUGE_MEMORY_ARGS)]


def merged(folder: Path, traces: list[Path]) -> Path:
    """Small merged files (processes launching onto devices of their own, shared ids), and
    windows of the real traces."""
    items: list[bytes] = []
    for procs, shared in ((2, False), (17, False), (3, True)):
        ev = []
        for p in range(procs):
            c = 1 if shared else 10 * p + 1
            rt = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1000 + p, "tid": 1}
            ev.append({**rt, "ts": 100, "dur": 5, "args": {"correlation": c}})
            k = {"ph": "X", "cat": "kernel", "name": "k", "pid": p, "tid": 7, "ts": 110, "dur": 10}
            ev.append({**k, "args": {"correlation": c, "device": p}})
        items.append(json.dumps({"traceEvents": ev}).encode())
    for doc in _docs(traces, 12):
        evs = doc["traceEvents"]
        step = max(1, len(evs) // 4)
        for at in range(0, len(evs), step):
            items.append(json.dumps({"traceEvents": evs[at : at + 40]}).encode())
    return _write(folder, [i for i in items if len(i) <= 16384])


def render(folder: Path, traces: list[Path]) -> Path:
    """Names that would be links, markup, formulas or control sequences, and odd numbers."""
    names = [
        "see http://evil.example/x",
        "www.evil.example",
        "me@evil.example",
        "[x](javascript:alert(1))",
        "<img src=x onerror=alert(1)>",
        '=HYPERLINK("http://x")',
        "\x1b[31mred\u202eevil",
        "a|b\nc",
        "![i](http://x/i.png)",
        "<https://evil.example>",
    ]
    nums = struct.pack("<4d", float("inf"), 1.5e308, -0.0, float("nan"))
    return _write(folder, ["\x00".join(names).encode() + b"\x00" + nums, *(n.encode() + nums for n in names)])


SURFACE_SEEDS: dict[str, Callable[[Path, list[Path]], Path]] = {
    "shapes": shapes,
    "memory": memory,
    "merged": merged,
    "render": render,
}
