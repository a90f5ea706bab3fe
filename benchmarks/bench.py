"""Benchmark: tracekit vs HolisticTraceAnalysis vs an orjson.loads floor, on the same big files.

Not a test: run by hand, on an idle machine.

    python benchmarks/bench.py                  # tiles b200 to ~250 MB and ~1 GB in bench-data/
    python benchmarks/bench.py --sizes 250 \
        --src ../shared/traces/hta/df_index_resolver__df_index_resolver.json.gz

Each tool runs in a fresh child process; ``seconds`` is the work inside the child (imports
excluded: they are the same for every file size), ``wall`` the child's whole life, and
``peak RSS`` the child's maximum resident set (from wait4). Tools:

* ``tracekit cold``: ``tracekit.load(f, cache=False).tables()`` (read, link, attribute, all tables);
* ``tracekit cached``: the same with the Parquet cache already filled by a previous run;
* ``HTA``: ``TraceAnalysis(trace_dir=...)`` (parse) then ``get_temporal_breakdown()``
  (HolisticTraceAnalysis, the ``peers`` extra);
* ``orjson floor``: ``orjson.loads`` of the file's bytes: the cost of merely parsing the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_SRC = ROOT.parent / "shared" / "traces" / "tracelens" / "b200__eager_trace.json.gz"

CHILD = {
    "tracekit cold": "import tracekit\nt=time.perf_counter()\na=tracekit.load(F, cache=False); a.tables()\n",
    "tracekit cached": "import tracekit\nt=time.perf_counter()\na=tracekit.load(F); a.tables()\n",
    "HTA": "from hta.trace_analysis import TraceAnalysis\nt=time.perf_counter()\n"
    "ta=TraceAnalysis(trace_dir=D)\nta.get_temporal_breakdown(visualize=False)\n",
    "orjson floor": "import orjson\nt=time.perf_counter()\nx=orjson.loads(open(F,'rb').read())\n",
}


def run_child(tool: str, f: Path, d: Path) -> dict:
    code = (
        "import time, sys, logging\nlogging.disable(logging.CRITICAL)\n"
        f"F={str(f)!r}\nD={str(d)!r}\n"
        + CHILD[tool]
        + "sys.stderr.write('BENCH %.3f\\n' % (time.perf_counter()-t))\n"
    )
    t0 = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read()
    p.returncode = os.waitstatus_to_exitcode(status)
    secs = [float(x.split()[1]) for x in err.splitlines() if x.startswith("BENCH ")]
    return {
        "tool": tool,
        "ok": bool(secs) and p.returncode == 0,
        "seconds": secs[0] if secs else None,
        "wall": wall,
        "peak_rss_mb": ru.ru_maxrss / 1024,
        "error": None if secs else err[-300:],
    }


def ensure_tile(src: Path, mb: int, out_dir: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(HERE))
    from tile import tile

    d = out_dir / f"{src.name.split('.')[0]}_{mb}mb"
    d.mkdir(parents=True, exist_ok=True)
    f = d / "rank0.json"
    if not f.exists():
        print(f"tiling {src.name} to ~{mb} MB ...", file=sys.stderr)
        tile(str(src), str(f), mb=mb)
    return f, d


def main() -> None:
    ap = argparse.ArgumentParser(description="tracekit vs HTA vs orjson floor")
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 1000], help="MB")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench-data")
    ap.add_argument("--tools", nargs="+", default=list(CHILD), choices=list(CHILD))
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()
    results = []
    for mb in a.sizes:
        f, d = ensure_tile(a.src, mb, a.out_dir)
        for tool in a.tools:
            if tool == "tracekit cold":
                from tracekit import cache as tk_cache

                tk_cache.clear()  # the user's cache directory (tracekit cache clear)
            if tool == "tracekit cached":
                run_child("tracekit cached", f, d)  # fill the cache
            r = run_child(tool, f, d)
            r.update(file=f.name, size_mb=round(f.stat().st_size / 1e6))
            results.append(r)
            s = f"{r['seconds']:8.2f} s" if r["ok"] else "  failed  "
            print(
                f"{r['size_mb']:>6} MB  {tool:<16} {s}  wall {r['wall']:7.2f} s  "
                f"peak RSS {r['peak_rss_mb']:8.0f} MB" + ("" if r["ok"] else f"  {r['error']}"),
                flush=True,
            )
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
