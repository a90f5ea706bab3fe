"""Build and run tracekit's fuzzer: libFuzzer, ASan and UBSan over the C scanner, the reader
and the caches, and the surfaces of issue 39: the shapes reader, memory events, merged-file
splitting and the renderers (fuzz/tracekit_fuzz.py and fuzz/fuzz_surfaces.py have the targets,
docs/security.md the results).

    python fuzz/run.py                          # every target, 60 s in all
    python fuzz/run.py --target reader --seconds 3600 --work /tmp/tf   # an hour, kept in /tmp/tf

Needs clang with its fuzzer and sanitizer runtimes (Debian: ``apt-get install clang
libclang-rt-14-dev``) and a Python with a shared libpython. Builds, in ``--work`` (a new
temporary folder by default): ``tracekit/read/_kineto.c`` instrumented (``-fsanitize=fuzzer-no-link,
address,undefined``, UBSan fatal) and ``fuzz/main.c`` as the libFuzzer binary that embeds this
Python. Seeds each target's corpus there from real traces (``../shared/traces`` when present,
``sample_traces/``): windows of their events, as whole small traces and as event runs, and each
at epoch-scale times too; nothing is written anywhere else. Runs each target under ``nice``,
one process (one core), then prints and writes ``summary.json``: executions, coverage (edges
and features as libFuzzer counts them), corpus size, and the artifacts found (crashes,
divergences, timeouts, slow inputs, out-of-memory), which make the exit status 1. Save each
artifact under ``fuzz/regressions/<target>/``: tests/test_fuzz_harness.py replays them all.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from seeds import SURFACE_SEEDS, memory_events  # beside this file (fuzz/ is the script's folder)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGETS = ("scanner", "reader", "cache", "shapes", "memory", "merged", "render")
#: Each target's share of ``--seconds`` when all run.
SHARES = {
    "scanner": 0.25,
    "reader": 0.25,
    "cache": 0.1,
    "shapes": 0.1,
    "memory": 0.1,
    "merged": 0.1,
    "render": 0.1,
}
_FLAGS = ["-g", "-O1", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]


#: An input slower than this is a finding. The cache target analyses a whole trace per input
#: (0.2-0.7 s uninstrumented, several times that under ASan at nice 19 on a busy 2-core host:
#: 5 s flagged six-byte inputs); its replay bound in tests/test_fuzz_harness.py is 20 s too.
#: The surface targets: memory analyses a small trace and writes it (about 1.5 s uninstrumented,
#: 20-33 s at nice 19 beside a test run), render writes every format (0.3 s, 14 s there).
SLOW_SECONDS = {"scanner": 5, "reader": 5, "cache": 20, "shapes": 5, "memory": 30, "merged": 10, "render": 20}


def build(work: Path) -> tuple[Path, Path]:
    """The instrumented scanner and the fuzzer binary, built in ``work``."""
    clang = shutil.which("clang")
    if clang is None:
        raise SystemExit("fuzz: clang not found (Debian: apt-get install clang libclang-rt-14-dev)")
    include = sysconfig.get_paths()["include"]
    libdir = sysconfig.get_config_var("LIBDIR")
    lib = f"python{sysconfig.get_config_var('LDVERSION')}"
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    kineto = work / f"_kineto{suffix}"
    binary = work / "tracekit-fuzz"
    san = "address,undefined"
    _run(
        [clang, *_FLAGS, f"-fsanitize=fuzzer-no-link,{san}", "-DTRACEKIT_NO_FORCE_INLINE", "-std=c11"]
        + [
            "-fno-fast-math",
            "-ffp-contract=off",
            "-fPIC",
            "-shared",
            f"-I{include}",
            str(ROOT / "tracekit" / "read" / "_kineto.c"),
        ]
        + ["-o", str(kineto)]
    )
    _run(
        [clang, *_FLAGS, f"-fsanitize=fuzzer,{san}", f"-I{include}", str(HERE / "main.c")]
        + [f"-L{libdir}", f"-Wl,-rpath,{libdir}", f"-l{lib}", "-o", str(binary)]
    )
    return kineto, binary


def _run(cmd: list[str]) -> None:
    got = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if got.returncode:
        raise SystemExit(f"fuzz: build failed: {' '.join(cmd)}\n{got.stderr[-3000:]}")


def _traces() -> list[Path]:
    shared = ROOT.parent / "shared" / "traces"
    found = sorted(shared.rglob("*.json*")) if shared.is_dir() else []
    found += sorted((ROOT / "sample_traces").rglob("*.json.gz"))
    return [p for p in found if p.name.endswith((".json", ".json.gz")) and p.name != "manifest.json"]


def _windows(events: list, n: int = 8) -> list[list]:
    """``n`` runs of consecutive events from along the list, of growing lengths."""
    if not events:
        return []
    out = []
    for i in range(n):
        at = (len(events) - 1) * i // max(1, n - 1)
        out.append(events[at : at + 1 + 3 * i])
    return out


def _epoch(events: list) -> list:
    """The same events at epoch-scale float times (the reader's exact-text path)."""
    out = []
    for e in events:
        e = dict(e)
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = e["ts"] + 1_700_000_000_000_000.125
        out.append(e)
    return out


def seed(work: Path, target: str, max_len: int) -> Path:
    """The target's seed corpus, made in ``work`` from the real traces."""
    folder = work / f"corpus-{target}"
    folder.mkdir(parents=True, exist_ok=True)
    if target == "cache":
        for first in range(16):  # every entry, seal mode and damage, with a few edits
            (folder / f"seed-{first}").write_bytes(bytes([first]) + bytes(range(1, 40, 3)))
        return folder
    if target in SURFACE_SEEDS:
        return SURFACE_SEEDS[target](folder, _traces())
    n = 0
    for path in _traces():
        raw = path.read_bytes()
        try:
            doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
        except (ValueError, OSError):
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
            continue
        rest = {k: v for k, v in doc.items() if k != "traceEvents" and len(json.dumps(v)) < 2000}
        for events in _windows(doc["traceEvents"]):
            for evs in (events, _epoch(events)):
                n += _seed_one(folder, n, target, rest, evs, max_len)
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1000, "dur": 10}
    for evs in ([kernel, *memory_events()], memory_events()[::3]):  # the memory bound's edges
        n += _seed_one(folder, n, target, {}, evs, max_len)
    return folder


def _seed_one(folder: Path, n: int, target: str, rest: dict, evs: list, max_len: int) -> int:
    """Write seed ``n`` (a run of events for the scanner, else a trace); 1 if written."""
    if target == "scanner":
        text = ", ".join(json.dumps(e) for e in evs).encode()
    else:
        text = json.dumps({**rest, "traceEvents": evs}).encode()
    if len(text) > max_len:
        return 0
    (folder / f"seed-{n}").write_bytes(text)
    if target == "reader" and n % 4 == 0:  # some as gzip files, read as they stand
        (folder / f"seed-{n}.gz").write_bytes(gzip.compress(text, compresslevel=1 + n % 9, mtime=0))
    return 1


def fuzz(target: str, seconds: int, work: Path, kineto: Path, binary: Path, max_len: int) -> dict:
    """One target for ``seconds``: libFuzzer's final numbers and the artifacts it saved."""
    corpus = seed(work, target, max_len)
    artifacts = work / "artifacts"
    artifacts.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "TRACEKIT_FUZZ_PYTHON": sys.executable,
        "TRACEKIT_FUZZ_TARGET": target,
        "TRACEKIT_FUZZ_KINETO": str(kineto),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:handle_abort=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "TRACEKIT_CACHE_DIR": str(work / "cache"),
    }
    cmd = ["nice", "-n", "19", str(binary), f"-max_total_time={seconds}", f"-max_len={max_len}"]
    slow = SLOW_SECONDS.get(target, 5)
    cmd += ["-timeout=30", f"-report_slow_units={slow}", "-rss_limit_mb=4096", "-print_final_stats=1"]
    if target in SURFACE_SEEDS:  # Python targets: the C edges do not grow, so keep every seed
        cmd += ["-keep_seed=1", "-reduce_inputs=0"]
    cmd += [f"-dict={HERE / 'dict.txt'}", f"-artifact_prefix={artifacts}/{target}-", str(corpus)]
    log = work / f"{target}.log"
    with open(log, "w") as out:
        code = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=work, check=False
        ).returncode
    text = log.read_text(errors="replace")
    return {"target": target, "seconds": seconds, "exit": code, **_stats(text), "log": str(log)} | {
        "artifacts": sorted(p.name for p in artifacts.glob(f"{target}-*")),
        "corpus": len(list(corpus.iterdir())),
    }


def _stats(text: str) -> dict:
    """libFuzzer's numbers: executions, and the coverage (edges ``cov``, features ``ft``) of its
    last status line."""
    out: dict = {}
    m = re.search(r"stat::number_of_executed_units: (\d+)", text)
    out["executions"] = int(m.group(1)) if m else None
    status = re.findall(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+)", text)
    if status:
        out["executions"] = out["executions"] or int(status[-1][0])
        out["edges"], out["features"] = int(status[-1][1]), int(status[-1][2])
    m = re.search(r"stat::peak_rss_mb: (\d+)", text)
    out["peak_rss_mb"] = int(m.group(1)) if m else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", choices=[*TARGETS, "all"], default="all")
    p.add_argument("--seconds", type=int, default=60, help="in all (split among targets)")
    p.add_argument("--work", type=Path, help="build, corpus, logs, artifacts (default: a new temp folder)")
    p.add_argument("--max-len", type=int, default=16384)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="tracekit-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    kineto, binary = build(work)
    targets = TARGETS if args.target == "all" else (args.target,)
    share = {t: SHARES[t] / sum(SHARES[u] for u in targets) for t in targets}
    runs = [
        fuzz(t, max(1, round(args.seconds * share[t])), work, kineto, binary, args.max_len) for t in targets
    ]
    (work / "summary.json").write_text(json.dumps(runs, indent=1))
    for r in runs:
        print(
            f"{r['target']}: {r['executions']} executions in {r['seconds']} s, cov {r.get('edges')} "
            f"ft {r.get('features')}, corpus {r['corpus']}, exit {r['exit']}, "
            f"artifacts {r['artifacts'] or 'none'}"
        )
    print(f"work: {work}")
    return 1 if any(r["exit"] or r["artifacts"] for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
