"""Start the capture processes (one per rank), watch them, and write the manifest.

The parent stays light (no deepspeed, no transformers): each rank is ``python -m
tracekit.capture.worker`` with the torch.distributed environment (RANK, LOCAL_RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) set, its output in ``logs/rank<R>.log``. If one rank fails the others
are stopped (they would wait for it in a collective forever) after a grace period in which
they can still write their trace.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .errors import FAILED, OOM, CaptureError
from .manifest import manifest, now
from .measure import MIB, rss_bytes
from .output import MANIFEST, log_path, read_json, status_path, write_json
from .owned import capture_files

GRACE_SECONDS = 20.0
#: What a rank's error says when it ran out of memory: CUDA's allocator, the kernel's OOM killer
#: (SIGKILL), or the launcher's own memory limit.
OOM_SIGNS = ("OutOfMemoryError", "out of memory", "killed by signal 9", "memory limit")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_environment(rank: int, world_size: int, port: int, threads: int) -> dict:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    # One intra-op thread per rank unless the user chose: more threads than cores per rank slows
    # CPU steps down 10-20x under load. Also quiets tokenizers-style fork warnings.
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    # Make the worker importable even when tracekit runs from a source checkout.
    env["TRACEKIT_CAPTURE_LAUNCHER"] = str(os.getpid())  # a rank ends with it (worker.py)
    here = str(Path(__file__).resolve().parents[1])
    if (Path(here) / "tracekit").is_dir():
        env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def run(
    spec: dict,
    *,
    nproc: int,
    argv: list[str] | None,
    options: dict,
    config: dict,
    memory_limit: int | None = None,
) -> dict:
    """Run ``spec`` on ``nproc`` ranks; return the manifest (also written to the output).

    ``memory_limit`` (bytes): every rank is stopped as soon as one rank's resident memory
    (``VmRSS``, polled every 0.2 s) passes it, and the capture fails as out of memory."""
    out = Path(spec["out"])
    spec_path = out / "logs" / "spec.json"
    write_json(spec_path, spec)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    environment = {
        "world_size": nproc,
        "omp_num_threads": threads,
        "gpu": spec["gpu"],
        "backend": ("nccl" if spec["gpu"] else "gloo") if spec["kind"] == "train" else None,
    }
    record = dict(
        kind=spec["kind"],
        argv=argv,
        options=options,
        config=config,
        env=environment,
        started=now(),
        written_by=spec.get("written_by"),
        files=capture_files(spec["kind"], nproc),
    )
    with _InterruptFlag() as stop:  # from here on Ctrl-C and SIGTERM are recorded, never an exception
        write_json(out / MANIFEST, manifest(**record, ranks=[], status="running"))
        procs: list = []
        try:
            procs = _start_workers(out, spec_path, nproc, threads)
            codes, interrupted, over = _wait(procs, stop, memory_limit)
        except BaseException as e:  # no rank outlives its launcher, and the manifest says so
            _stop(procs)
            ranks = [_rank_status(out, r, p.returncode, True) for r, (p, _) in enumerate(procs)]
            why = f"the launcher stopped ({type(e).__name__}: {e})".strip()
            write_json(out / MANIFEST, manifest(**record, ranks=ranks, status="failed", error=why))
            raise
    ranks = [_rank_status(out, rank, codes[rank], interrupted) for rank in range(nproc)]
    if over is not None and memory_limit is not None:
        ranks[over[0]].update(
            state="failed",
            error=f"resident memory reached {over[1] / MIB:.0f} MiB, over the memory limit of "
            f"{memory_limit / MIB:.0f} MiB (stopped)",
        )
    failed = [r for r in ranks if r["state"] != "finished"]
    first = min(failed, key=lambda r: (r["exit_code"] in (None, -15), r["rank"])) if failed else None
    if over is not None:
        first = ranks[over[0]]
    error = f"rank {first['rank']}: {first['error']}" if first else None
    if interrupted:
        done = min((r.get("completed_steps", 0) for r in ranks), default=0)
        error = f"{stop.what} after {done} finished steps"
    state = "interrupted" if interrupted else ("failed" if failed else "finished")
    result = manifest(**record, ranks=ranks, status=state, error=error)
    write_json(out / MANIFEST, result)
    kept = [r["trace"] for r in ranks if r.get("trace")]
    if interrupted:
        tail = f"; traces kept: {', '.join(kept)}" if kept else "; no finished step to keep"
        err = CaptureError(f"capture {error}{tail}")
        err.exit_code = 128 + stop.seen
        raise err
    if first:
        tail = f"; traces kept: {', '.join(kept)}" if kept else ""
        kind = OOM if any(sign in str(error) for sign in OOM_SIGNS) else FAILED
        raise CaptureError(f"capture failed on {error} (log: {out / first['log']}){tail}", kind)
    return result


def _start_workers(out: Path, spec_path: Path, nproc: int, threads: int) -> list:
    """One worker process per rank, its output in the rank's log: (process, log file) each."""
    port = free_port()
    procs = []
    for rank in range(nproc):
        log = open(log_path(out, rank), "wb")  # noqa: SIM115 (closed when the worker ends)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tracekit.capture.worker", str(spec_path)],
            env=rank_environment(rank, nproc, port, threads),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        procs.append((proc, log))
    return procs


def _rank_status(out: Path, rank: int, code: int | None, interrupted: bool) -> dict:
    """What the rank's worker reported, with its exit code and the state a dead worker left."""
    status = read_json(status_path(out, rank)) or {
        "rank": rank,
        "state": "failed",
        "error": "the process left no status",
    }
    status["exit_code"] = code
    if code != 0 and status.get("state") not in ("failed", "interrupted"):
        status["state"] = "interrupted" if interrupted else "failed"
        status["error"] = status.get("error") or _killed(code)
    status["log"] = str(log_path(out, rank).relative_to(out))
    return status


def _killed(code: int | None) -> str:
    if code is None:
        return "stopped after another rank failed"
    if code in (130, -signal.SIGINT):
        return "interrupted (Ctrl-C)"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exited with status {code}"


class _InterruptFlag:
    """While active, SIGINT (Ctrl-C) and SIGTERM (``kill``, a scheduler, a sweep's own stop)
    set ``seen`` (the signal's number) instead of raising, so the launcher can always stop the
    ranks, let them write their traces and record what happened: one signal stops the whole
    capture, none of its ranks outlives it."""

    def __init__(self) -> None:
        self.seen = 0
        self._previous: dict = {}

    def _handler(self, signum, frame) -> None:
        self.seen = self.seen or signum

    @property
    def what(self) -> str:
        return "terminated (SIGTERM)" if self.seen == signal.SIGTERM else "interrupted (Ctrl-C)"

    def __enter__(self) -> _InterruptFlag:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handler)
            except ValueError:  # not the main thread: the signals are not ours to handle
                pass
        return self

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


def _over_limit(procs, limit: int | None) -> tuple[int, int] | None:
    """(rank, resident bytes) of the first running rank whose resident memory passes ``limit``."""
    if limit is None:
        return None
    for rank, (p, _) in enumerate(procs):
        rss = rss_bytes(p.pid) if p.poll() is None else None
        if rss is not None and rss > limit:
            return rank, rss
    return None


def _wait(
    procs, ctrl_c: _InterruptFlag, memory_limit: int | None = None
) -> tuple[list[int | None], bool, tuple[int, int] | None]:
    """Wait for every rank; once one fails, give the rest GRACE_SECONDS, then stop them. Stop
    them all at once when a rank passes ``memory_limit`` (returned: that rank and its memory).

    On Ctrl-C or SIGTERM (recorded by ``ctrl_c``; the ranks, in the same process group, get a
    Ctrl-C too, a SIGTERM sent to the launcher alone they do not) the ranks are sent SIGINT, and
    get GRACE_SECONDS to write the trace of their finished steps before they are stopped.
    Returns the exit codes, whether the run was interrupted, and the rank over the memory
    limit with its memory (else None).
    """
    deadline = None
    interrupted = False
    try:
        while True:
            if ctrl_c.seen and not interrupted:
                interrupted = True
                for p, _ in procs:
                    if p.poll() is None:
                        p.send_signal(signal.SIGINT)
                deadline = time.monotonic() + GRACE_SECONDS
            over = _over_limit(procs, memory_limit)
            if over is not None:
                _stop(procs)
                return [p.returncode for p, _ in procs], interrupted, over
            codes = [p.poll() for p, _ in procs]
            if all(c is not None for c in codes):
                return codes, interrupted, None
            if deadline is None and any(c not in (None, 0) for c in codes):
                deadline = time.monotonic() + GRACE_SECONDS
            if deadline is not None and time.monotonic() > deadline:
                _stop(procs)
                return [p.returncode for p, _ in procs], interrupted, None
            time.sleep(0.2)
    finally:
        for _, log in procs:
            log.close()


def _stop(procs) -> None:
    for p, _ in procs:
        if p.poll() is None:
            p.terminate()
    for p, _ in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
