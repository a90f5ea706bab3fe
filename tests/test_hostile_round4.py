"""Hostile input, round 4 (issue 39): the pool, the cache's key and the capture sweep.

Each break rebuilt small and checked against the promise of docs/security.md (exit 0 with the
right output, or exit 2 with one line, or a partial result with exit 1 and the bad file named;
bounded time; nothing lost). The analysis cases run the real CLI in a subprocess under the
limits of :mod:`test_hostile`; the capture cases need no GPU (the sweep's own logic runs with a
stand-in capture, the signal cases run a tiny DeepSpeed capture on CPU).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
from bad_inputs import mini_trace
from signal_harness import stop_capture
from test_hostile import TIMEOUT, _env, _limit, _ranks, one_line, run, trace


@pytest.fixture
def box(tmp_path):
    """A test root with its own HOME and cache, and the input folder ``in`` (as test_hostile's)."""
    for d in ("in", "home", "xdg", "cache"):
        (tmp_path / d).mkdir()
    return tmp_path


# 2, 6. A rank whose worker dies, or that raises, is that rank's error -----------------------

#: ``tracekit *argv`` with one rank made to fail in the worker that analyses it (inherited by
#: the fork): ``kill``, killed by SIGKILL as the OOM killer does; ``raise``, an OverflowError.
_BROKEN = """
import os, signal, sys
from tracekit.ranks import analyse
HOW, BAD = sys.argv[1], sys.argv[2]
parts = analyse.analyse_parts
def broken(path, *a, **k):
    if os.path.basename(os.fspath(path)) in BAD.split(","):
        if HOW == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise OverflowError("Python int too large to convert to C long")
    return parts(path, *a, **k)
analyse.analyse_parts = broken
from tracekit.cli import main
sys.argv = ["tracekit", *sys.argv[3:]]
main()
"""


def _broken(box: Path, how: str, bad: str, *args: str) -> subprocess.CompletedProcess:
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-c", _BROKEN, how, bad, *args],
        capture_output=True,
        timeout=TIMEOUT,
        preexec_fn=_limit,
        env=_env(box),
        cwd=box,
    )
    p.seconds = time.monotonic() - t0
    p.err = p.stderr.decode()
    assert "Traceback" not in p.err, p.err
    return p


# SIGKILL with -j 1 would kill the run itself: only the pool has a worker to lose.
@pytest.mark.parametrize(("how", "jobs"), [("raise", "1"), ("raise", "2"), ("kill", "2")])
def test_a_rank_that_fails_or_whose_worker_dies_is_a_partial_result_naming_it(box, how, jobs):
    """A pool worker killed by SIGKILL made ``-j 2`` wait forever (multiprocessing.Pool
    replaced it and lost its task); an OverflowError in one rank failed the whole directory
    with "could not analyse", naming no file. Now either is that rank's error: the other ranks'
    result, exit 1, the file named. (SIGKILL with ``-j 1`` would kill the run itself: only the
    pool has a worker to lose.)"""
    d = _ranks(box, 4)
    p = _broken(box, how, "rank2.json", "analyze", str(d), "-j", jobs, "--format", "json")
    assert p.returncode == 1, (p.returncode, p.err)
    [line] = p.err.splitlines()
    assert line.startswith("tracekit: warning: skipped rank2.json: "), line
    assert ("SIGKILL" if how == "kill" else "OverflowError") in line, line
    meta = json.loads(p.stdout)["meta"]
    assert meta["partial"] and meta["ranks"] == [0, 1, 3]
    assert [s["file"] for s in meta["skipped"]] == ["rank2.json"]


def test_every_worker_killed_is_one_line_and_exit_2(box):
    """When every rank's worker dies, the first file's error is the one line (exit 2)."""
    d = _ranks(box, 2)
    p = _broken(box, "kill", "rank0.json,rank1.json", "analyze", str(d), "-j", "2")
    one_line(p, 2, "rank0.json", "SIGKILL")


# 3, 15. The cache's seal key: never a blocking open, trusted only when private -------------


def _answer(box: Path, t: Path) -> dict:
    p = run(box, "analyze", t, "--format", "json", "--no-cache")
    assert p.returncode == 0, p.err
    return json.loads(p.stdout)["tables"]


def test_a_fifo_at_the_seal_key_is_refused_not_waited_for(box):
    """A FIFO at ``.seal-key`` hung every analysis (the key was opened with a blocking open).
    Now the key is opened with O_NONBLOCK | O_NOFOLLOW and must be a regular file: the run
    goes on without the cache, with one warning line, and gives the uncached answer."""
    t = trace(box)
    os.mkfifo(box / "cache" / ".seal-key")
    p = run(box, "analyze", t, "--format", "json")
    line = one_line(p, 0, "cache key", ".seal-key", "not a regular file", "does not use the cache")
    assert line.startswith("tracekit: warning: ")
    assert json.loads(p.stdout)["tables"] == _answer(box, t)
    assert sorted(x.name for x in (box / "cache").iterdir()) == [".seal-key"]  # nothing stored


@pytest.mark.parametrize("case", ["group-readable", "other-owner", "open-directory", "symlink"])
def test_a_key_that_is_not_the_users_own_and_private_is_refused(box, case):
    """A cache directory and ``.seal-key`` owned by another user and readable by all were
    trusted: whoever planted the key could seal forged entries. As ssh does, a key that is not
    the user's own and private (or in a directory others can write) is refused in one line, and
    the analysis runs without the cache: nothing is read from it or stored in it."""
    from tracekit.read import sealkey

    t = trace(box)
    cache = box / "cache"
    assert run(box, "analyze", t, "--format", "json").returncode == 0  # a trusted cache, filled
    entries = sorted(x.name for x in cache.iterdir())
    key = cache / ".seal-key"
    if case == "group-readable":
        key.chmod(0o640)
    elif case == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(key, 54321, -1)
    elif case == "open-directory":
        cache.chmod(0o777)
    else:
        (box / "elsewhere.key").write_bytes(key.read_bytes())
        (box / "elsewhere.key").chmod(0o600)
        key.unlink()
        key.symlink_to(box / "elsewhere.key")
    assert sealkey.read_key(cache) is None and sealkey.untrusted(cache)
    p = run(box, "analyze", t, "--format", "json")
    one_line(p, 0, "does not use the cache")
    assert json.loads(p.stdout)["tables"] == _answer(box, t)
    assert sorted(x.name for x in cache.iterdir()) == entries  # nothing new stored


# 17. A trace edited in place with its times put back is never served stale ------------------


def _padded(n: int = 4000) -> dict:
    doc = mini_trace()
    doc["traceEvents"] += [
        {"ph": "X", "cat": "user_annotation", "name": f"pad{i:05d}", "pid": 9, "tid": 9, "ts": 10, "dur": 1}
        for i in range(n)
    ]
    return doc


def test_the_file_key_sees_an_edit_whose_mtime_was_put_back(tmp_path):
    """The key left out the change time: a trace edited in place with its mtime restored kept
    its key (0.4 where the new content gives 0.403). Edit a byte no hashed block covers."""
    from tracekit.read.filekey import _EDGE, _SAMPLE, _samples, file_key

    t = tmp_path / "t.json"
    t.write_text(json.dumps(_padded()))
    size = t.stat().st_size
    assert size > 4 * _EDGE
    blocks = list(_samples(size))
    at = blocks[3] + _SAMPLE + 10  # between two sampled blocks
    assert all(not b <= at < b + _SAMPLE for b in blocks) and _EDGE < at < size - _EDGE
    before = t.stat()
    key = file_key(t, 1 << 30)
    data = bytearray(t.read_bytes())
    data[at] = ord("X") if data[at] != ord("X") else ord("Y")
    time.sleep(0.01)
    with open(t, "r+b") as f:  # in place: same inode, same size
        f.write(data)
    os.utime(t, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = t.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        before.st_ino,
        before.st_size,
        before.st_mtime_ns,
    )
    assert file_key(t, 1 << 30) != key


def test_an_edited_trace_with_its_mtime_put_back_is_not_served_stale(box):
    """End to end: the cached answer of the old content is never shown for the new one."""
    doc = _padded()
    t = box / "in" / "t.json"
    t.write_text(json.dumps(doc))
    first = run(box, "analyze", t, "--format", "json")
    assert first.returncode == 0, first.err
    before = t.stat()
    text = t.read_text()
    edited = text.replace('"dur": 30,', '"dur": 31,', 1)  # one kernel-launching op, same size
    assert len(edited) == len(text) and edited != text
    with open(t, "r+") as f:
        f.write(edited)
    os.utime(t, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = run(box, "analyze", t, "--format", "json")
    assert json.loads(again.stdout)["tables"] == _answer(box, t)


# 1, 5. The sweep: --force removes only its own; one signal stops every later method ---------


def _common(out: Path):
    from tracekit.capture.options import Common

    return Common("tiny", 2, 1, "sdpa", None, None, True, 0, out, True)


def _fake_capture(calls: list, fail: dict | None = None):
    """A stand-in for ``runs.run_train``: writes what a capture writes (through the real
    output and manifest code) and returns its manifest; ``fail`` maps a call number to the
    exception it raises instead."""
    from tracekit.capture import output
    from tracekit.capture.manifest import manifest
    from tracekit.capture.owned import capture_files

    def run(c, t, *, argv, echo, memory_limit_mb=None, written_by="tracekit capture train"):
        calls.append(c.out)
        if fail and len(calls) in fail:
            raise fail[len(calls)]
        out = output.prepare(c.out, c.force)
        for name in capture_files("train", 1):
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text("{}")
        (out / "rank0.1700000000000.pt.trace.json.gz").write_bytes(b"trace")
        rank = {"rank": 0, "state": "finished", "trace": "rank0.1700000000000.pt.trace.json.gz"}
        doc = manifest(
            kind="train",
            argv=argv,
            options={},
            config={},
            env={"world_size": 1},
            ranks=[rank],
            status="finished",
            started="now",
            written_by=written_by,
            files=capture_files("train", 1),
        )
        doc["measures"] = {"job": {"step_ms": 10.0, "tokens_per_s": 1.0, "peak_mem_mb": 1.0}}
        output.write_json(out / "manifest.json", doc)
        return doc

    return run


def _sweep(out: Path, calls: list, methods: str = "naive,zero2,zero3,recompute", fail=None) -> dict:
    from tracekit.capture import runs, sweep
    from tracekit.capture.methods import parse_methods

    s = sweep.Settings(_common(sweep.prepare(out, False)), runs.Train())
    return sweep.run_sweep(
        s, parse_methods(methods), ["tracekit"], lambda line: None, _fake_capture(calls, fail)
    )


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_sweep_force_never_deletes_a_foreign_directory(tmp_path):
    """``--force`` deleted every subdirectory of DIR holding a manifest.json, with all in it.
    Now it removes what the sweep wrote: its files, and the captures whose manifest names the
    sweep, file by file. Anything else (another tool's manifest, a plain capture, a user's file
    inside a method's logs) is refused in one line before anything is removed."""
    from tracekit.capture import sweep
    from tracekit.capture.errors import CaptureError

    out = tmp_path / "sweep"
    _sweep(out, [])
    mine = _tree(out)
    assert "naive/manifest.json" in mine and "sweep.json" in mine
    foreign = {
        "results/manifest.json": b'{"experiment": "a week of work"}',
        "results/weights.bin": b"\x00precious",
    }
    for case in ("other-tool", "plain-capture", "user-file-in-logs"):
        if case == "other-tool":
            extra = foreign
        elif case == "plain-capture":
            doc = json.loads((out / "naive" / "manifest.json").read_text())
            doc["written_by"] = "tracekit capture train"
            extra = {"mine/manifest.json": json.dumps(doc).encode(), "mine/logs/rank0.log": b"x"}
        else:
            extra = {"zero2/logs/notes.txt": b"my notes"}
        for name, data in extra.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(data)
        with pytest.raises(CaptureError, match="did not write"):
            sweep.prepare(out, True)
        assert _tree(out) == mine | extra, case  # nothing removed
        for name in extra:
            (out / name).unlink()
        for d in ("results", "mine/logs", "mine"):
            if (out / d).is_dir():
                (out / d).rmdir()
    sweep.prepare(out, True)
    assert list(out.iterdir()) == []


def test_sweep_force_refuses_a_foreign_directory_from_the_cli(tmp_path):
    """The same through ``tracekit capture sweep --force``: one line, exit 2, all kept."""
    pytest.importorskip("torch")
    out = tmp_path / "sweep"
    (out / "results").mkdir(parents=True)
    (out / "results" / "manifest.json").write_text("{}")
    (out / "results" / "weights.bin").write_bytes(b"precious")
    p = subprocess.run(
        [sys.executable, "-m", "tracekit.cli", "capture", "sweep", "--model", "tiny", "--methods", "naive"]
        + ["--out", str(out), "--force"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    [line] = p.stderr.splitlines()
    assert line.startswith("tracekit: error: ") and "did not write (results/" in line, line
    assert (out / "results" / "weights.bin").read_bytes() == b"precious"


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_one_signal_stops_every_later_method(tmp_path, signal_name):
    """Ctrl-C during the first method skipped only the second: every later method still ran
    its whole capture. One signal, in a capture (its exit status 130 or 143) or before its
    ranks start (KeyboardInterrupt, or the CLI's Terminated for SIGTERM), stops the sweep."""
    from tracekit.capture.errors import CaptureError

    from tracekit.cli.io import Terminated

    code = 130 if signal_name == "SIGINT" else 143
    inside = CaptureError("capture interrupted after 1 finished steps")
    inside.exit_code = code
    for stop in (inside, KeyboardInterrupt() if code == 130 else Terminated()):
        calls: list = []
        out = tmp_path / f"{signal_name}-{type(stop).__name__}"
        doc = _sweep(out, calls, fail={1: stop})
        assert len(calls) == 1, calls  # no later method started
        rows = doc["rows"]
        assert rows[0]["status"] == "interrupted" and rows[0]["exit_code"] == code
        assert [r["status"] for r in rows[1:]] == ["not-run"] * 3
        assert json.loads((out / "sweep.json").read_text())["rows"] == json.loads(json.dumps(rows))


# 4. SIGTERM to a capture stops its ranks and is recorded -------------------------------------

TINY = ["--model", "tiny", "--layers", "2", "--seq-len", "32", "--batch-size", "1", "--no-stack"]


def _rank_pid(out: Path, p: subprocess.Popen, steps: int = 1, timeout: float = 300) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            status = json.loads((out / "logs" / "rank0.status.json").read_text())
        except (OSError, ValueError):
            status = {}
        if status.get("completed_steps", 0) >= steps:
            return status["pid"]
        if p.poll() is not None:
            pytest.fail(f"capture ended early: {p.communicate()}")
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    pytest.fail("no finished step in time")


@pytest.mark.capture
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_signal_to_the_capture_stops_its_rank(tmp_path, how):
    """SIGTERM to ``capture train`` exited 143 but left the rank worker running, re-parented
    to init, and its manifest said "running". Now SIGTERM stops the ranks (they keep their
    finished steps), the manifest records the stop and the exit status is 143 with one line;
    a launcher killed outright (SIGKILL) takes its rank with it (PR_SET_PDEATHSIG)."""
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name)
    out = tmp_path / "run"
    p = subprocess.Popen(
        [sys.executable, "-m", "tracekit.capture.cli", "train", *TINY, "--warmup", "1", "--steps", "100000"]
        + ["--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the signal goes to the launcher alone, not to its group
    )
    err = stop_capture(p, partial(os.kill, p.pid, getattr(signal, how)), partial(_rank_pid, out, p))
    if how == "SIGKILL":
        return
    assert p.returncode == 143, (p.returncode, err)
    [line] = err.strip().splitlines()
    assert line.startswith("tracekit: error: capture terminated (SIGTERM)"), line
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted" and "SIGTERM" in m["error"], (m["status"], m["error"])
    assert m["ranks"][0]["state"] != "running" and m["traces"], m["ranks"]


@pytest.mark.capture
def test_sigterm_to_a_sweep_stops_its_capture_and_every_later_method(tmp_path):
    """SIGTERM to ``capture sweep`` during its first method: that method's rank stops, its row
    is ``interrupted`` (exit_code 143), every later method ``not-run``, exit 143, one line."""
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name)
    out = tmp_path / "sweep"
    args = ["--model", "tiny", "--layers", "2", "--seq-len", "32", "--batch-size", "1", "--no-stack"]
    p = subprocess.Popen(
        [sys.executable, "-m", "tracekit.capture.cli", "sweep", *args, "--methods", "naive,zero2,zero3"]
        + ["--steps", "100000", "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    rank = partial(_rank_pid, out / "naive", p)
    err = stop_capture(p, partial(os.kill, p.pid, signal.SIGTERM), rank, "sweep")
    assert p.returncode == 143, (p.returncode, err)
    [line] = err.strip().splitlines()
    assert line.startswith("tracekit: error: sweep terminated (SIGTERM)"), line
    rows = json.loads((out / "sweep.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["interrupted", "not-run", "not-run"], rows
    assert rows[0]["exit_code"] == 143
    assert json.loads((out / "naive" / "manifest.json").read_text())["status"] == "interrupted"


def test_capture_force_removes_only_the_files_its_manifest_lists(tmp_path):
    """A capture's ``--force`` removed ``logs/`` whole. Now only what the previous capture's
    manifest lists (and its ranks' traces) goes; a file of the user's in ``logs/`` is refused
    first; an existing empty directory is taken as it is."""
    from tracekit.capture import output
    from tracekit.capture.errors import CaptureError

    out = tmp_path / "run"
    out.mkdir()
    assert output.prepare(out, force=False) == out  # empty: nothing to refuse
    calls: list = []
    _fake_capture(calls)(_common(out), None, argv=["x"], echo=print)
    (out / "logs" / "notes.txt").write_text("mine")
    before = _tree(out)
    with pytest.raises(CaptureError, match=r"did not write \(logs/notes.txt\)"):
        output.prepare(out, force=True)
    assert _tree(out) == before
    (out / "logs" / "notes.txt").unlink()
    output.prepare(out, force=True)
    assert _tree(out) == {} and (out / "logs").is_dir()
