"""Entry point of one capture process: ``python -m tracekit.capture.worker <spec.json>``.

launch.py starts one per rank with the torch.distributed environment set. The worker runs the
capture the spec names and keeps ``logs/rank<R>.status.json`` up to date (steps finished, the
trace file, an error line), so the parent can report and the manifest can record what happened
even when a rank dies.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path

from . import interrupts
from .errors import CaptureError
from .output import read_json, status_path, traces, worker_name, write_json

#: Exit status of a capture stopped by Ctrl-C (128 + SIGINT, as shells report it).
INTERRUPTED = 130


def _end_with_launcher() -> None:
    """A rank ends with its launcher: were the launcher killed outright (SIGKILL, where nothing
    of it can run), Linux sends this rank SIGINT (``PR_SET_PDEATHSIG``), so it keeps its
    finished steps and stops instead of running on, re-parented to init. A launcher that
    already died before this (then this process's parent is not it) ends the rank at once."""
    launcher = os.environ.get("TRACEKIT_CAPTURE_LAUNCHER")
    if not launcher or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGINT))  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != int(launcher):
        os._exit(INTERRUPTED)


def main(argv: list[str]) -> int:
    interrupts.install()
    _end_with_launcher()
    spec = read_json(Path(argv[0]))
    if spec is None:
        print(f"tracekit: error: cannot read capture spec {argv[0]}", file=sys.stderr)
        return 2
    rank = int(os.environ.get("RANK", "0"))
    out = Path(spec["out"])
    path = status_path(out, rank)
    status: dict = {
        "rank": rank,
        "pid": os.getpid(),
        "state": "running",
        "steps_run": 0,
        "completed_steps": 0,
        "trace": None,
        "error": None,
    }

    def report(**fields) -> None:
        status.update(fields)
        write_json(path, status)

    report()
    code = 0
    try:
        if spec["kind"] == "train":
            from . import train

            train.run(spec, report)
        elif spec["engine"] == "lightllm":
            from . import lightllm

            lightllm.run(spec, report)
        else:
            from . import infer

            infer.run(spec, report)
        status["state"] = "finished"
    except CaptureError as err:
        status.update(state="failed", error=err.format_message())
        print(f"tracekit: error: {err.format_message()}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt as e:
        term = isinstance(e, interrupts.Terminated)
        what = "terminated (SIGTERM)" if term else "interrupted (Ctrl-C)"
        status.update(state="interrupted", error=f"{what} after {status['completed_steps']} finished steps")
        code = 128 + signal.SIGTERM if term else INTERRUPTED
    except BaseException as err:  # a crash: keep what was traced, say what happened
        status.update(state="failed", error=f"{type(err).__name__}: {err}".strip())
        traceback.print_exc()
        code = 1
    finally:
        mine = [p for p in traces(out) if p.name.startswith(worker_name(rank) + ".")]
        status["trace"] = mine[-1].name if mine else None
        write_json(path, status)
        sys.stdout.flush()
        sys.stderr.flush()
    return code


if __name__ == "__main__":
    code = main(sys.argv[1:])
    # Skip interpreter teardown: DeepSpeed/gloo atexit handlers can hang or abort after a failed
    # peer, and everything worth keeping is on disk already.
    os._exit(code)
