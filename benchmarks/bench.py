"""Benchmark: tracekit vs HolisticTraceAnalysis vs TraceLens vs an orjson.loads floor, on the same files.

Not a test: run by hand, on an idle machine.

    python benchmarks/bench.py                       # tiles b200 to ~250 MB and ~1 GB in bench-data/
    python benchmarks/bench.py --sizes 250 1000 4000 --gzip-sizes 4000 --json sizes.json
    python benchmarks/bench.py --sizes --events 100000 1000000 10000000 --tools "tracekit cold" "orjson floor"
    python benchmarks/bench.py --sizes 250 \\
        --src ../shared/traces/hta/df_index_resolver__df_index_resolver.json.gz

Files: ``--sizes`` tiles ``--src`` (a real trace) with ``benchmarks/tile.py`` to each size in MB
(plain JSON; ``--gzip-sizes`` also writes the same tile gzipped); ``--events`` writes synthetic
launch+kernel traces of that many events with ``benchmarks/synth.py``. Each tool runs in a fresh
child process; ``seconds`` is the work inside the child (imports excluded: they are the same for
every file size), ``wall`` the child's whole life, and ``peak RSS`` the child's maximum resident
set plus the largest of its own helper processes' (tracekit's parallel reader forks; the sum
bounds what was resident at once). Tools:

* ``tracekit cold``: ``tracekit.load(f, cache=False).tables()`` (read, link, attribute, all tables);
* ``tracekit serial``: the same with ``TRACEKIT_READ_JOBS=1`` (one process decodes the file);
* ``tracekit cached``: the same with the Parquet cache already filled by a previous run;
* ``HTA``: ``TraceAnalysis(trace_dir=...)`` (parse) then ``get_temporal_breakdown()``
  (HolisticTraceAnalysis, the ``bench`` extra);
* ``TraceLens``: ``generate_perf_report_pytorch(f, output_csvs_dir=...)``, what its
  ``TraceLens_generate_perf_report_pytorch --profile_json_path f --output_csvs_dir d`` runs (the
  tree, the GPU timeline, ops summaries and roofline sheets). AMD's TraceLens is not on PyPI (the
  PyPI package ``tracelens`` is an unrelated agent-evaluation tool): install it from its
  repository; a tool that is not installed is reported as such;
* ``orjson floor``: ``orjson.loads`` of the file's bytes: the cost of merely parsing the JSON.

The script prints one side-by-side table (one row per file: seconds and peak RSS of each tool,
tracekit's cold time as a multiple of the orjson floor's, and per event: tracekit's microseconds
and its peak RSS growth past the RSS after imports, in bytes), and ``--json`` writes every
measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, shared_traces  # noqa: E402

DEFAULT_SRC = shared_traces() / "tracelens" / "b200__eager_trace.json.gz"

#: ``import tracekit`` imports no pandas (the CLI's --help stays fast): the modules a load uses
#: are imported here, outside the timed window, as every other tool's are.
_TK = (
    "import tracekit, tracekit.analysis, tracekit.ranks.results, tracekit.ranks.perfile, tracekit.analyses\n"
)
CHILD = {
    "tracekit cold": _TK + "t=time.perf_counter()\na=tracekit.load(F, cache=False); a.tables()\n",
    "tracekit serial": "import os\nos.environ['TRACEKIT_READ_JOBS']='1'\n"
    + _TK
    + "t=time.perf_counter()\na=tracekit.load(F, cache=False); a.tables()\n",
    "tracekit cached": _TK + "t=time.perf_counter()\na=tracekit.load(F); a.tables()\n",
    "HTA": "from hta.trace_analysis import TraceAnalysis\nt=time.perf_counter()\n"
    "ta=TraceAnalysis(trace_dir=D)\nta.get_temporal_breakdown(visualize=False)\n",
    "TraceLens": "import tempfile\n"
    "from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch\n"
    "t=time.perf_counter()\n"
    "with tempfile.TemporaryDirectory() as out:\n"
    "    generate_perf_report_pytorch(F, output_csvs_dir=out)\n",
    "orjson floor": "import orjson, gzip\nt=time.perf_counter()\n"
    "x=orjson.loads((gzip.open if F.endswith('.gz') else open)(F,'rb').read())\n",
}
MISSING = "ModuleNotFoundError"


def run_child(tool: str, f: Path, d: Path, timeout: float) -> dict:
    """One tool on one file in a fresh child: its work time, wall time and peak RSS (wait4)."""
    code = (
        "import time, sys, logging, warnings\nlogging.disable(logging.CRITICAL)\n"
        "warnings.filterwarnings('ignore')\n"
        f"F={str(f)!r}\nD={str(d)!r}\n"
        + CHILD[tool].replace(
            "t=time.perf_counter()",
            "import resource\nB=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\nt=time.perf_counter()",
        )
        + "S=time.perf_counter()-t\nR=resource.getrusage\n"
        "sys.stderr.write('BENCH %.3f %d %d %d\\n' % (S, B, R(resource.RUSAGE_SELF).ru_maxrss, "
        "R(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    )
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errf:  # a file, not a pipe: a chatty tool cannot block
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=errf)
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                p.kill()
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = -9
                return {"tool": tool, "ok": False, "seconds": None, "wall": timeout,
                        "peak_rss_mb": ru.ru_maxrss / 1024, "error": f"over {timeout:.0f} s"}  # fmt: skip
            time.sleep(0.05)
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        errf.seek(0)
        err = errf.read()
    got = [x.split()[1:] for x in err.splitlines() if x.startswith("BENCH ")]
    secs = [float(g[0]) for g in got]
    base = int(got[0][1]) / 1024 if got else None
    # The process's own peak plus its largest helper process's (the parallel reader's children
    # run at the same time as the parent): an upper bound on the memory the work used at once.
    own, helpers = (int(got[0][2]) / 1024, int(got[0][3]) / 1024) if got else (ru.ru_maxrss / 1024, 0.0)
    ok = bool(secs) and p.returncode == 0
    error = None if ok else ("not installed" if MISSING in err else " ".join(err.strip().splitlines()[-1:]))
    return {
        "tool": tool,
        "ok": ok,
        "seconds": secs[0] if secs else None,
        "wall": wall,
        "peak_rss_mb": own + helpers,
        "own_peak_rss_mb": own,
        "helper_peak_rss_mb": helpers,
        "rss_after_imports_mb": base,
        "error": error,
    }


def ensure_tile(src: Path, mb: int, out_dir: Path, gz: bool = False) -> tuple[Path, Path, int | None]:
    """A tile of ``src`` of about ``mb`` MB (made once): its path, its folder, its event count."""
    import gzip
    import shutil

    from tile import tile

    d = out_dir / f"{src.name.split('.')[0]}_{mb}mb{'_gz' if gz else ''}"
    d.mkdir(parents=True, exist_ok=True)
    plain_dir = out_dir / f"{src.name.split('.')[0]}_{mb}mb"
    plain_dir.mkdir(parents=True, exist_ok=True)
    plain, facts = plain_dir / "rank0.json", plain_dir / "facts.json"
    if not plain.exists() or not facts.exists():
        print(f"tiling {src.name} to ~{mb} MB ...", file=sys.stderr)
        facts.write_text(json.dumps(tile(str(src), str(plain), mb=mb)))
    events = json.loads(facts.read_text()).get("events")
    if not gz:
        return plain, plain_dir, events
    f = d / "rank0.json.gz"
    if not f.exists():
        print(f"gzipping {plain.name} ...", file=sys.stderr)
        with open(plain, "rb") as i, gzip.open(f, "wb", compresslevel=6) as o:
            shutil.copyfileobj(i, o, 1 << 24)
    return f, d, events


def ensure_synth(n: int, out_dir: Path) -> tuple[Path, Path, int]:
    from synth import synth

    d = out_dir / f"synth_{n}"
    d.mkdir(parents=True, exist_ok=True)
    f, facts = d / "rank0.json", d / "facts.json"
    if not f.exists() or not facts.exists():
        print(f"writing a synthetic trace of {n:,} events ...", file=sys.stderr)
        facts.write_text(json.dumps(synth(str(f), n)))
    return f, d, json.loads(facts.read_text())["events"]


def measure(f: Path, d: Path, events: int | None, tools: list[str], timeout: float, label: str) -> list[dict]:
    out = []
    for tool in tools:
        if tool == "tracekit cold":
            from tracekit.read import cache as tk_cache

            tk_cache.clear()  # the user's cache directory (tracekit cache clear)
        if tool == "tracekit cached":
            run_child("tracekit cached", f, d, timeout)  # fill the cache
        r = run_child(tool, f, d, timeout)
        r.update(file=label, path=str(f), size_mb=round(f.stat().st_size / 1e6), events=events)
        out.append(r)
        s = f"{r['seconds']:8.2f} s" if r["ok"] else f"failed: {r['error']}"
        rss = f"peak RSS {r['peak_rss_mb']:8.0f} MB" if r["peak_rss_mb"] else ""
        print(f"  {label:<24} {tool:<16} {s}  {rss}", file=sys.stderr, flush=True)
    return out


def table(results: list[dict], tools: list[str]) -> str:
    """One row per file: each tool's seconds and peak RSS; tracekit cold / orjson floor; per event."""
    files = list(dict.fromkeys(r["file"] for r in results))
    head = ["file", "MB", "events"] + [f"{t} s / MB RSS" for t in tools]
    head += ["tracekit / orjson", "tracekit us/event", "tracekit RSS growth B/event"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name in files:
        rows = {r["tool"]: r for r in results if r["file"] == name}
        any_row = next(iter(rows.values()))
        cells = [name, str(any_row["size_mb"]), f"{any_row['events']:,}" if any_row["events"] else "?"]
        for t in tools:
            r = rows.get(t)
            if r is None:
                cells.append("")
            elif r["ok"]:
                cells.append(f"{r['seconds']:.2f} s / {r['peak_rss_mb']:.0f} MB")
            else:
                cells.append(str(r["error"]))
        tk, floor = rows.get("tracekit cold"), rows.get("orjson floor")
        ok_tk = tk is not None and tk["ok"]
        cells.append(f"{tk['seconds'] / floor['seconds']:.2f}x" if ok_tk and floor and floor["ok"] else "")
        n = any_row["events"]
        cells.append(f"{1e6 * tk['seconds'] / n:.2f}" if ok_tk and n else "")
        grown = tk["peak_rss_mb"] - (tk.get("rss_after_imports_mb") or 0) if ok_tk else 0
        cells.append(f"{grown * 2**20 / n:.0f}" if ok_tk and n else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description="tracekit vs HTA vs TraceLens vs orjson floor")
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--sizes", type=int, nargs="*", default=[250, 1000], help="tiles of --src, MB")
    ap.add_argument("--gzip-sizes", type=int, nargs="*", default=[], help="also these tiles gzipped, MB")
    ap.add_argument("--events", type=int, nargs="*", default=[], help="synthetic launch+kernel traces")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench-data")
    ap.add_argument("--tools", nargs="+", default=list(CHILD), choices=list(CHILD))
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per tool and file")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args()
    results = []
    for mb in a.sizes:
        f, d, n = ensure_tile(a.src, mb, a.out_dir)
        results += measure(f, d, n, a.tools, a.timeout, f"{f.parent.name}/{f.name}")
    for mb in a.gzip_sizes:
        f, d, n = ensure_tile(a.src, mb, a.out_dir, gz=True)
        results += measure(f, d, n, a.tools, a.timeout, f"{f.parent.name}/{f.name}")
    for n_events in a.events:
        f, d, n = ensure_synth(n_events, a.out_dir)
        results += measure(f, d, n, a.tools, a.timeout, f"{f.parent.name}/{f.name}")
    print(table(results, a.tools))
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
