"""The fuzz harness (fuzz/): every input it ever found is replayed, and a short run of it.

* Regressions (every run of the suite): each file under ``fuzz/regressions/<target>/`` is an
  input that once crashed, diverged or ran slowly; it goes through its target
  (``fuzz/tracekit_fuzz.py``) again, in a child process (a crash must fail the test, not the
  run), and must pass quickly. ``fuzz/regressions/ipc/`` holds damaged Arrow IPC streams of a
  result entry's frames, decoded by :func:`tracekit.ranks.packed_ipc.decode` (``None``).
* Smoke (marker ``fuzz``, about a minute): ``fuzz/run.py`` builds the scanner and the libFuzzer
  binary under ASan and UBSan and runs every target; no artifact may come out. Skipped where
  clang or its fuzzer runtime is missing (``.ci/run`` installs them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
REGRESSIONS = FUZZ / "regressions"
TARGETS = ("scanner", "reader", "cache", "shapes", "memory", "merged", "render")

_REPLAY = """
import sys, time
import tracekit_fuzz
target = getattr(tracekit_fuzz, sys.argv[1])
tracekit_fuzz.setup(sys.argv[1])
for path in sys.argv[2:]:
    t0 = time.monotonic()
    target(open(path, "rb").read())
    took = time.monotonic() - t0
    assert took < 20, f"{path}: {took:.1f} s"
print("replayed", len(sys.argv) - 2)
"""


def _inputs(target: str) -> list[Path]:
    folder = REGRESSIONS / target
    return sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


@pytest.mark.parametrize("target", [t for t in TARGETS if _inputs(t)])
def test_every_input_the_fuzzer_found_passes_its_target(target, tmp_path):
    files = _inputs(target)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FUZZ), os.environ.get("PYTHONPATH", "")])}
    env["TRACEKIT_CACHE_DIR"] = str(tmp_path / "cache")
    p = subprocess.run(
        [sys.executable, "-c", _REPLAY, target, *map(str, files)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert p.returncode == 0 and p.stdout.strip() == f"replayed {len(files)}", p.stderr[-3000:]


def test_damaged_ipc_streams_are_refused():
    code = (
        "import sys; from tracekit.ranks import packed_ipc\n"
        "for f in sys.argv[1:]:\n"
        "    assert packed_ipc.decode([], open(f, 'rb').read(), 1 << 30) is None, f\n"
    )
    files = sorted((REGRESSIONS / "ipc").glob("*.bin"))
    assert files
    p = subprocess.run(
        [sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])


def _fuzzer_runtime() -> bool:
    clang = shutil.which("clang")
    if clang is None:
        return False
    got = subprocess.run([clang, "-print-resource-dir"], capture_output=True, text=True, check=False)
    return any(Path(got.stdout.strip()).rglob("libclang_rt.fuzzer-x86_64.a")) or any(
        Path(got.stdout.strip()).rglob("libclang_rt.fuzzer.a")
    )


@pytest.mark.fuzz
@pytest.mark.skipif(
    not _fuzzer_runtime(), reason="clang with libFuzzer not installed (apt-get install clang)"
)
def test_a_minute_of_fuzzing_finds_nothing(tmp_path):
    """``fuzz/run.py`` for 60 s over the seven targets, under ASan and UBSan: each target runs,
    covers the scanner's code, and leaves no crash, divergence, timeout or slow input."""
    p = subprocess.run(
        [sys.executable, str(FUZZ / "run.py"), "--seconds", "60", "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    runs = json.loads((tmp_path / "summary.json").read_text()) if (tmp_path / "summary.json").exists() else []
    logs = {r["target"]: Path(r["log"]).read_text(errors="replace")[-3000:] for r in runs if r["exit"]}
    assert p.returncode == 0, (p.stdout, p.stderr[-2000:], logs)
    assert {r["target"] for r in runs} == set(TARGETS)
    for r in runs:
        assert r["executions"] and r["executions"] > 5, r
        assert not r["artifacts"], r
    scanner = next(r for r in runs if r["target"] == "scanner")
    assert scanner["edges"] > 200, scanner  # the instrumented scanner's edges are counted
