"""Benchmark: this checkout against a baseline install, command for command (issue 34's budget).

Not a test: run by hand, on an idle machine. Each figure is the end-to-end CLI run a user types,
``tracekit analyze X --format json --no-cache`` (every table on), timed as a child process:
wall seconds and the peak RSS of the largest process (``/usr/bin/time``'s figure; pool workers
are their own processes); for the rank workloads also the peak of parent plus workers (the
process tree's RSS summed, sampled every 50 ms: issue 34's figure for 1,000 ranks against
100). Best of ``--repeat`` runs, the two installs alternating so both see
the same machine.

    python benchmarks/budget.py --baseline /path/to/venv-c42c687/bin/tracekit
    python benchmarks/budget.py --baseline B --work tiny 250 gz1000 ranks64 ranks100 ranks1000

Workloads (made once in ``--out-dir``): ``tiny`` (sample_traces/tiny-train-1rank), ``250``
(``--src`` tiled to 250 MB, benchmarks/tile.py), ``gz1000`` (tiled to 1 GB and gzipped; its
peak is also given as a share of the decompressed size), ``ranksN`` (N distinct ranks, small
copies of ``--rank-src`` each with its own ``distributedInfo.rank``, ``-j 2``). Run the
baseline from a directory where this checkout does not shadow its package (the script runs
every child in a temporary directory).

Both installs' own modules are byte-compiled first (``compileall``), as a wheel install is: an
editable install under ``PYTHONDONTWRITEBYTECODE=1`` would compile every module on every run
(0.15 s of CPU for this checkout's 107 modules, on a loaded machine), which measures the
environment, not tracekit.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import ROOT, shared_traces  # noqa: E402
from rank_scaling import make_ranks  # noqa: E402
from tile import tile  # noqa: E402

SRC = (
    shared_traces()
    / "kineto"
    / "tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz"
)
RANK_SRC = shared_traces() / "hta" / "df_index_resolver__df_index_resolver.json.gz"


def workload(name: str, out: Path, src: Path, rank_src: Path) -> tuple[Path, list[str]]:
    """The input of a workload (made once) and its extra CLI arguments."""
    if name == "tiny":
        return ROOT / "sample_traces" / "tiny-train-1rank", []
    if name == "250":
        f = out / "budget_250.json"
        if not f.exists():
            tile(str(src), str(f), mb=250)
        return f, ["-j", "1"]
    if name == "gz1000":
        f = out / "budget_1000.json.gz"
        if not f.exists():
            plain = out / "budget_1000.json"
            tile(str(src), str(plain), mb=1000)
            with open(plain, "rb") as a, gzip.open(f, "wb", compresslevel=6) as b:
                shutil.copyfileobj(a, b, 1 << 24)
            plain.unlink()
        return f, []
    if name.startswith("ranks"):
        return make_ranks(rank_src, int(name[5:]), out, None), ["-j", "2"]
    raise SystemExit(f"unknown workload {name!r}")


def measure(exe: str, target: Path, extra: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MB of the largest process, peak MB of the whole process tree:
    parent plus workers, sampled every 50 ms) of one CLI run in a fresh child."""
    cmd = ["/usr/bin/time", "-f", "%M", exe, "analyze", str(target), "--format", "json", "--no-cache", *extra]
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryFile("w+") as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, text=True)
        tree = 0
        while p.poll() is None:
            tree = max(tree, tree_rss(p.pid))
            time.sleep(0.05)
        wall = time.perf_counter() - t
        err.seek(0)
        stderr = err.read()
    if p.returncode not in (0, 1):
        raise SystemExit(f"{exe} failed on {target}: {stderr[-500:]}")
    return wall, int(stderr.strip().splitlines()[-1]) / 1024, tree / 1024


def tree_rss(pid: int) -> int:
    """KB resident in ``pid`` and all its descendants now (0 for a process already gone)."""
    total, todo = 0, [pid]
    while todo:
        q = todo.pop()
        try:
            with open(f"/proc/{q}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{q}/task/{q}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def compile_install(exe: str) -> None:
    """Byte-compile the tracekit (and top-level ``analyses``) package that ``exe`` runs."""
    with open(shutil.which(exe) or exe, encoding="utf-8", errors="replace") as f:
        python = f.readline().removeprefix("#!").strip() or sys.executable
    code = (
        "import importlib.util, os, sys\n"
        "for name in ('tracekit', 'analyses'):\n"
        "    spec = importlib.util.find_spec(name)\n"
        "    if spec and spec.origin: print(os.path.dirname(spec.origin))\n"
    )
    with tempfile.TemporaryDirectory() as cwd:
        got = subprocess.run([python, "-c", code], cwd=cwd, capture_output=True, text=True, check=False)
        dirs = got.stdout.split()
        subprocess.run([python, "-m", "compileall", "-q", *dirs], cwd=cwd, capture_output=True, check=False)


def size_of(target: Path) -> float:
    """Decompressed MB of a .gz file (for the gzip peak's share)."""
    n = 0
    with gzip.open(target, "rb") as f:
        while chunk := f.read(1 << 24):
            n += len(chunk)
    return n / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline", required=True, help="the baseline install's tracekit executable")
    ap.add_argument("--tracekit", default=shutil.which("tracekit") or "tracekit", help="this checkout's")
    ap.add_argument("--work", nargs="+", default=["tiny", "250", "gz1000", "ranks64"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--src", type=Path, default=SRC)
    ap.add_argument("--rank-src", type=Path, default=RANK_SRC)
    ap.add_argument("--out-dir", type=Path, default=ROOT / "bench-data")
    args = ap.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for exe in (args.baseline, args.tracekit):
        compile_install(exe)
    print(f"{'work':10} {'base s':>8} {'base MB':>8} {'this s':>8} {'this MB':>8} {'time x':>7} {'RSS x':>6}")
    for name in args.work:
        target, extra = workload(name, args.out_dir, args.src, args.rank_src)
        runs: dict[str, list[tuple[float, float, float]]] = {"base": [], "this": []}
        for _ in range(args.repeat):
            runs["base"].append(measure(args.baseline, target, extra))
            runs["this"].append(measure(args.tracekit, target, extra))
        (bt, bm, btree), (tt, tm, ttree) = min(runs["base"]), min(runs["this"])
        line = f"{name:10} {bt:8.2f} {bm:8.0f} {tt:8.2f} {tm:8.0f} {tt / bt:7.2f} {tm / bm:6.2f}"
        if name.startswith("gz"):
            line += f"  peak / decompressed: base {bm / size_of(target):.2f}, this {tm / size_of(target):.2f}"
        if name.startswith("ranks"):
            n = int(name[5:])
            line += f"  ms/rank: base {1000 * bt / n:.0f}, this {1000 * tt / n:.0f}"
            line += f"; parent+workers MB: base {btree:.0f}, this {ttree:.0f}"
        print(line, flush=True)


if __name__ == "__main__":
    os.environ.setdefault("COLUMNS", "80")
    main()
