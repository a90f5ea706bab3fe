"""Benchmark: time per rank and the parent's peak memory, from 8 to 512 (or more) ranks.

Not a test: run by hand, on an idle machine.

    python benchmarks/rank_scaling.py                       # 8, 64, 512 ranks; pool and Dask
    python benchmarks/rank_scaling.py --ranks 2000 --engines pool \\
        --src ../shared/traces/tracelens/inference__sglang_decode__sglang_Qwen3-8B_decode.json.gz
    python benchmarks/rank_scaling.py --tile-mb 20         # each rank a 20 MB tile of --src

Rank files are copies of one real rank file (``--src``; ``--tile-mb`` first tiles it with
``benchmarks/tile.py``), each with its own ``distributedInfo.rank``, gzipped. Each run is a fresh
child process that calls ``tracekit.load(dir, cache=False, ...).tables()`` (with ``--cache``:
``cache=True`` into a fresh, empty ``$TRACEKIT_CACHE_DIR``, the default path of a first run:
workers store each rank's result and send back a handle, not its intervals; with
``--cache --cached`` the same directory is filled by one run first and the measured run is a
re-analysis):

* ``pool``: the local process pool, one worker per core (``--jobs``);
* ``dask``: a Dask ``LocalCluster`` (one single-threaded worker process per core) started by this
  script before the child, which connects to it as ``--scheduler ADDRESS`` would.

Columns: ``seconds`` (load and every table, imports excluded), ``ms/rank`` (seconds / ranks),
``overhead ms/rank`` (``seconds x workers / ranks`` minus the time one rank's work takes in a warm
process, measured in the same child: what running a rank costs beyond its own work),
``cpu overhead ms/rank`` (the same from CPU time, which a busy machine disturbs far less than
seconds: the CPU time of the parent and of every worker during the run, per rank, minus one
rank's own work's CPU time in the warm child; the workers' CPU time is ``RUSAGE_CHILDREN`` for
the pool, whose workers are reaped when the run ends, and each Dask worker's
``time.process_time()`` before and after the run), ``parent cpu ms/rank`` (the CPU time of the
process that gathers the results, per rank: the serial part, which no number of workers
shortens), the
parent's peak RSS (``RUSAGE_SELF`` of the child: the process that gathers the results; the
pool's workers are ``RUSAGE_CHILDREN``, reported as ``workers peak``).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
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

DEFAULT_SRC = shared_traces() / "hta" / "trace_filter__sampled_rank-0.json.gz"

CHILD = """
import resource, sys, time, logging, statistics
logging.disable(logging.CRITICAL)
import tracekit
from tracekit.analysis import Options
from tracekit.ranks.perfile import tabulate_file
files = sorted(D.iterdir())
one = [f for f in files if f.name.endswith('.gz')][0]
tabulate_file(one, Options(cache=False))  # warm: imports, rule tables
def timed():
    t, c = time.perf_counter(), time.process_time()
    tabulate_file(one, Options(cache=False))
    return time.perf_counter() - t, time.process_time() - c
runs = [timed() for _ in range(5)]
work, work_cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
def kids_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime
def workers_cpu():  # Dask workers are not our children: ask each for its CPU time
    if 'scheduler' not in KW:
        return kids_cpu()
    from distributed import Client
    with Client(KW['scheduler']) as c:
        return sum(c.run(time.process_time).values())
w0 = workers_cpu()
t, cpu = time.perf_counter(), time.process_time()
a = tracekit.load(D, cache=CACHE, **KW)
a.tables()
secs, cpu = time.perf_counter() - t, time.process_time() - cpu
w1 = workers_cpu()
assert len(a.ranks) == N, (len(a.ranks), N)
me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
got = {'seconds': secs, 'parent_cpu_s': cpu, 'work_s': work, 'work_cpu_s': work_cpu,
       'workers_cpu_s': w1 - w0, 'parent_mb': me, 'workers_mb': kids}
sys.stderr.write('BENCH %r\\n' % (got,))
"""


def make_ranks(src: Path, n: int, out_dir: Path, tile_mb: float | None) -> Path:
    """``n`` gzipped copies of ``src`` as ranks 0..n-1 (made once, kept in ``out_dir``)."""
    tag = src.name.split(".")[0] + (f"_{tile_mb:g}mb" if tile_mb else "")
    d = out_dir / f"ranks_{tag}_{n}"
    if d.is_dir() and len(list(d.glob("*.json.gz"))) == n:
        return d
    d.mkdir(parents=True, exist_ok=True)
    if tile_mb:
        from tile import tile

        tiled = out_dir / f"{tag}.json"
        if not tiled.exists():
            tile(str(src), str(tiled), mb=tile_mb)
        src = tiled
    op = gzip.open if src.name.endswith(".gz") else open
    with op(src, "rb") as f:
        doc = json.load(f)
    events = doc.pop("traceEvents")
    doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": 987654321, "world_size": n}
    head = json.dumps(doc)[:-1] + ', "traceEvents": '
    body = (json.dumps(events) + "}").encode()
    print(f"writing {n} rank files of {len(body) / 1e6:.1f} MB to {d} ...", file=sys.stderr)
    for r in range(n):
        with gzip.open(d / f"rank{r}.pt.trace.json.gz", "wb", compresslevel=1) as f:
            f.write(head.replace("987654321", str(r)).encode())
            f.write(body)
    return d


def run(d: Path, n: int, kw: dict, cache: bool = False, cached: bool = False) -> dict:
    """One measured child; with ``cache`` it uses ``$TRACEKIT_CACHE_DIR`` (set by the caller to
    a fresh directory, also for the Dask workers it starts), filled first when ``cached``."""
    code = f"from pathlib import Path\nD=Path({str(d)!r})\nN={n}\nKW={kw!r}\nCACHE={cache!r}\n" + CHILD
    if cache and cached:  # fill the cache first: the measured run is a re-analysis
        subprocess.run([sys.executable, "-c", code], check=False, capture_output=True)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    got = [line[6:] for line in p.stderr.splitlines() if line.startswith("BENCH ")]
    if p.returncode or not got:
        return {"ok": False, "error": p.stderr[-400:], "wall": wall}
    import ast

    return {"ok": True, "wall": wall, **ast.literal_eval(got[0])}


@contextlib.contextmanager
def fresh_cache_dir():
    """``$TRACEKIT_CACHE_DIR`` set to a new empty directory (removed after), for the children
    and the Dask workers started meanwhile: --cache runs never touch the user's cache."""
    old = os.environ.get("TRACEKIT_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tracekit-bench-cache-") as d:
        os.environ["TRACEKIT_CACHE_DIR"] = d
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("TRACEKIT_CACHE_DIR", None)
            else:
                os.environ["TRACEKIT_CACHE_DIR"] = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 64, 512])
    ap.add_argument("--engines", nargs="+", default=["pool", "dask"], choices=["pool", "dask"])
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--tile-mb", type=float, help="tile --src to this size first (benchmarks/tile.py)")
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench-data")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--cache", action="store_true", help="cache on, into a fresh empty cache directory")
    ap.add_argument("--cached", action="store_true", help="with --cache: measure a re-analysis")
    a = ap.parse_args()
    results = []
    print(
        f"{'ranks':>6} {'engine':<6} {'seconds':>8} {'ms/rank':>8} {'overhead ms/rank':>17} "
        f"{'work ms':>8} {'cpu overhead ms/rank':>20} {'parent cpu ms/rank':>18} {'parent peak MB':>15} "
        f"{'workers peak MB':>16}"
    )
    for n in a.ranks:
        d = make_ranks(a.src, n, a.out_dir, a.tile_mb)
        for engine in a.engines:
            if engine == "pool":
                with fresh_cache_dir():
                    r = run(d, n, {"jobs": a.workers}, a.cache, a.cached)
            else:
                from distributed import LocalCluster

                with (
                    fresh_cache_dir(),
                    LocalCluster(
                        n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None
                    ) as cluster,
                ):
                    r = run(d, n, {"scheduler": cluster.scheduler_address}, a.cache, a.cached)
            r.update(ranks=n, engine=engine, workers=a.workers, src=a.src.name, tile_mb=a.tile_mb)
            r.update(cache=a.cache, cached=a.cached)
            results.append(r)
            if not r["ok"]:
                print(f"{n:>6} {engine:<6} failed: {r['error']}", flush=True)
                continue
            r["ms_per_rank"] = 1000 * r["seconds"] / n
            r["overhead_ms_per_rank"] = 1000 * (r["seconds"] * a.workers / n - r["work_s"])
            tree_cpu = r["parent_cpu_s"] + r["workers_cpu_s"]
            r["cpu_overhead_ms_per_rank"] = 1000 * (tree_cpu / n - r["work_cpu_s"])
            print(
                f"{n:>6} {engine:<6} {r['seconds']:8.2f} {r['ms_per_rank']:8.1f} "
                f"{r['overhead_ms_per_rank']:17.1f} {1000 * r['work_s']:8.1f} "
                f"{r['cpu_overhead_ms_per_rank']:20.1f} "
                f"{1000 * r['parent_cpu_s'] / n:18.1f} "
                f"{r['parent_mb']:15.0f} {r['workers_mb']:16.0f}",
                flush=True,
            )
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
