"""What a capture or a sweep wrote, so that ``--force`` removes exactly that and nothing else.

A capture's ``manifest.json`` says it is tracekit's (``"tracekit_capture": 1``), which tool
wrote it (``"written_by"``: ``tracekit capture train``, ``infer`` or ``sweep``) and which
files it wrote (``"files"``: relative paths); its ranks' traces are named by the profiler
(``rank<R>.<ms>.pt.trace.json[.gz]``, for a rank R of its world size). A directory is a
capture's only when every entry in it is one of those: any other file, a symlink, a FIFO, a
directory that is not ``logs/`` or a manifest that is not tracekit's (or not the expected
tool's) makes ``--force`` refuse, in one line, before anything is removed.

A sweep's directory holds ``sweep.json`` (``"tracekit_sweep": 1``), ``sweep.md``, one capture
directory per method and ``probes/<method>/batch<B>/`` captures, each written by the sweep.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .errors import CaptureError

MANIFEST, LOGS = "manifest.json", "logs"
SWEEP_TOOL = "tracekit capture sweep"
TRACE_NAME = re.compile(r"rank(\d+)\.\d+\.pt\.trace\.json(\.gz)?")
_MAX_MANIFEST = 16 << 20


def capture_files(kind: str, world_size: int) -> list[str]:
    """The files a capture of ``kind`` on ``world_size`` ranks writes, traces aside."""
    files = [MANIFEST, f"{LOGS}/spec.json"]
    files += [f"{LOGS}/deepspeed_config.json"] if kind == "train" else []
    for r in range(world_size):
        files += [f"{LOGS}/rank{r}.log", f"{LOGS}/rank{r}.status.json"]
    return files


def _regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def read_doc(path: Path) -> dict | None:
    """The JSON object in the regular file ``path`` (never a link, FIFO or device), or None."""
    import json

    if not _regular(path):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with open(fd, "rb") as f:
            doc = json.loads(f.read(_MAX_MANIFEST))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _allowed(out: Path, by: str | None) -> tuple[set[str], int] | None:
    """The files the manifest in ``out`` says its capture wrote, and its world size; None
    when ``out`` holds no manifest of tracekit's (or, with ``by``, not one ``by`` wrote)."""
    m = read_doc(out / MANIFEST)
    if m is None or m.get("tracekit_capture") != 1 or (by is not None and m.get("written_by") != by):
        return None
    world = (m.get("environment") or {}).get("world_size")
    world = world if isinstance(world, int) and 0 < world <= 4096 else 1
    files = m.get("files")
    listed = {f for f in files if isinstance(f, str)} if isinstance(files, list) else set()
    return listed | set(capture_files(str(m.get("kind")), world)), world


def _walk(root: Path) -> list[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (links not followed): (relative path, lstat)."""
    found = []
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(here, name)
            try:
                found.append((p.relative_to(root).as_posix(), os.lstat(p)))
            except OSError:
                continue
    return found


def owned_capture(out: Path, by: str | None = None) -> tuple[list[Path], list[str]]:
    """(the files a previous capture in ``out`` wrote, the entries it did not write)."""
    entries = _walk(out)
    if all(name == LOGS and stat.S_ISDIR(st.st_mode) for name, st in entries):
        return [], []  # empty, or the empty logs/ a capture's prepare makes
    got = _allowed(out, by)
    if got is None:
        return [], [name for name, _ in entries if "/" not in name] or [MANIFEST]
    allowed, world = got
    files: list[str] = []
    foreign: list[str] = []
    for name, st in entries:
        if name == LOGS and stat.S_ISDIR(st.st_mode):
            continue
        trace = TRACE_NAME.fullmatch(name)
        ours = name in allowed or (trace is not None and int(trace.group(1)) < world)
        (files if ours and stat.S_ISREG(st.st_mode) else foreign).append(name)
    return [out / f for f in files], foreign


def remove(root: Path, files: list[Path]) -> None:
    """Remove ``files``, then every directory under ``root`` that held them and is left empty
    (deepest first); a directory holding anything else stays."""
    for f in files:
        f.unlink(missing_ok=True)
    dirs = {p for f in files for p in f.parents if root in p.parents}
    for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
        try:
            d.rmdir()
        except OSError:
            pass


def refuse(out: Path, foreign: list[str], what: str) -> None:
    if foreign:
        raise CaptureError(
            f"{out} holds files {what} did not write ({', '.join(sorted(foreign)[:3])}); choose another --out"
        )


def owned_sweep(out: Path) -> tuple[list[Path], list[str]]:
    """(the files a previous sweep in ``out`` wrote, the entries it did not write)."""
    files: list[Path] = []
    foreign: list[str] = []
    doc = read_doc(out / "sweep.json")
    ours = doc is not None and doc.get("tracekit_sweep") == 1
    for e in sorted(out.iterdir()):
        if e.name in ("sweep.json", "sweep.md") and ours and _regular(e):
            files.append(e)
        elif e.name == "probes" and e.is_dir() and not e.is_symlink():
            for method in sorted(e.iterdir()):
                _sweep_dirs(method, f"probes/{method.name}", files, foreign)
        elif e.is_dir() and not e.is_symlink():
            _capture_of_sweep(e, e.name, files, foreign)
        else:
            foreign.append(e.name)
    return files, foreign


def _sweep_dirs(method: Path, name: str, files: list, foreign: list) -> None:
    if not method.is_dir() or method.is_symlink():
        foreign.append(name)
        return
    for batch in sorted(method.iterdir()):
        if batch.is_dir() and not batch.is_symlink():
            _capture_of_sweep(batch, f"{name}/{batch.name}", files, foreign)
        else:
            foreign.append(f"{name}/{batch.name}")


def _capture_of_sweep(d: Path, name: str, files: list, foreign: list) -> None:
    mine, others = owned_capture(d, by=SWEEP_TOOL)
    files += mine
    foreign += [f"{name}/{o}" for o in others]
