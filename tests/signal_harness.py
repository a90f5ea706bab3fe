"""Signals to a run in its own process group, for the hostile-input tests (test_hostile*.py):
the CLI with its pool workers held (:func:`held_run`, :func:`signal_group`), and a capture whose
rank must stop with its launcher (:func:`stop_capture`). One harness for every such test."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

TIMEOUT = 60
MEMORY = 3 << 30

#: Runs ``tracekit`` with one hook in its pool workers (inherited by the fork): at ``where``
#: (``task``: a rank's work; ``start``: the worker's start-up, before it ignores SIGINT) a
#: worker writes a byte to fd READY, then blocks reading fd HOLD, which the test never writes.
#: No worker can finish anything, so the run can only end by handling the signal, whatever
#: the machine's speed.
HELD = """
import os, sys
import tracekit.ranks.pool as par
READY, HOLD, WHERE = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def held():
    os.write(READY, b"x")
    os.read(HOLD, 1)
if WHERE == "task":
    call = par._Attempt.__call__
    def attempt(self, item):
        held()
        return call(self, item)
    par._Attempt.__call__ = attempt
else:
    start = par._ignore_sigint
    def ignore():
        held()
        start()
    par._ignore_sigint = ignore
from tracekit.cli import main
sys.argv = ["tracekit", *sys.argv[4:]]
main()
"""


def limit() -> None:
    """The child's address-space limit (:data:`MEMORY`)."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


@contextmanager
def held_run(where: str, args: list, env: dict) -> Iterator[subprocess.Popen]:
    """``tracekit *args`` under :data:`HELD` at ``where``, in a session (process group) of its
    own, under :func:`limit`: yields the process once a worker says it is held there (so a
    signal sent now cannot land after the run); the pipes are closed on the way out."""
    ready_r, ready_w = os.pipe()
    hold_r, hold_w = os.pipe()
    p = subprocess.Popen(
        [sys.executable, "-c", HELD, str(ready_w), str(hold_r), where, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=limit,
        pass_fds=(ready_w, hold_r),
    )
    os.close(ready_w)
    os.close(hold_r)
    try:
        got = os.read(ready_r, 1)  # a worker is running (or the run failed: b"")
        assert got == b"x", p.communicate(timeout=TIMEOUT)
        yield p
    finally:
        os.close(ready_r)
        os.close(hold_w)


def signal_group(p: subprocess.Popen, sig: int, what: str) -> bytes:
    """``sig`` to ``p``'s whole process group (as a terminal sends Ctrl-C); its stderr once it
    has ended. A run still going after :data:`TIMEOUT` is killed and the test fails."""
    os.killpg(p.pid, sig)
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        pytest.fail(f"hung after {what}")
    return err


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_capture(
    p: subprocess.Popen, send: Callable[[], None], find_rank: Callable[[], int], what: str = "launcher"
) -> str:
    """Stop a capture (``p``, started in a session of its own) by ``send`` (a signal to it or
    to its group) once ``find_rank`` has its rank's pid; its stderr once it has ended, after
    that rank has ended too (else the test fails: "the rank outlived its ``what``"). The group
    is killed on the way out, whatever happened."""
    try:
        rank = find_rank()
        send()
        _, err = p.communicate(timeout=180)
        end = time.monotonic() + 60
        while alive(rank) and time.monotonic() < end:
            time.sleep(0.2)
        assert not alive(rank), f"the rank outlived its {what}"
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return err
