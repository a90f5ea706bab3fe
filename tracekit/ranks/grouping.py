"""Group trace files into ranks: files are not ranks.

A directory may hold several files of one process: a profiler schedule with ``repeat`` (or an
``on_trace_ready`` handler) writes one file per profiling cycle. Those files are successive
windows of one rank, not different ranks. The rules, strongest evidence first:

1. a file's rank is its ``distributedInfo.rank``, else the rank the capture manifest
   (``manifest.json`` beside the traces, written by ``tracekit capture``) gives its file name;
   files with the same rank are one rank;
2. a file with no rank belongs to the rank of a ranked file of the same process (same host and
   pid), else it is grouped with the other unranked files of its process, and each such process
   gets the lowest rank number not yet taken, in file order;
3. a file whose process cannot be told (no CPU side, no pid) is a rank of its own.

:func:`group_files`: Needs: per file its ``rank`` (or None), ``pid`` and ``host`` (or None).
Adds: groups of file indices, one per rank, and a sentence saying how they were grouped.
Guarantees: every file is in exactly one group; files of one distributed rank are together.

:func:`merge_windows`: Needs: the :class:`~tracekit.pipeline.Attributed` of each file of one
rank. Adds: one Attributed whose steps are the files' steps concatenated in time order.
Guarantees: step numbers are kept; a number already taken by an earlier window is shifted past
every number before it (and the shift is reported), so each step stays one step.
:func:`files_of_rank`: a rank's files by their heads; :func:`group_results`: workers' results.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..pipeline.checks import TraceWarning, listed
from ..pipeline.windows import CUT_FRACTION, CUT_MESSAGE, CUT_MIN_STEPS
from ..read.reader import ANNOTATION, CPU_OP, PYTHON, RUNTIME, trace_listing

#: ``tensorboard_trace_handler`` names files ``{hostname}_{pid}.{time_ns}.pt.trace.json``.
_HANDLER_NAME = re.compile(r"^(?P<host>.+)_(?P<pid>\d+)\.\d+\.pt\.trace\.json(\.gz)?$")
_MANIFEST_MAX_BYTES = 4 << 20


@dataclass(frozen=True)
class FileIdentity:
    """What says which rank and process a trace file came from."""

    rank: int | None
    pid: int | None
    host: str | None


def process_of(events: pd.DataFrame) -> int | None:
    """The process that recorded a file's CPU side: the pid of most of its CPU events."""
    if events.empty:
        return None
    kind = events["kind"].to_numpy()
    cpu = events["pid"].to_numpy()[np.isin(kind, (CPU_OP, ANNOTATION, PYTHON, RUNTIME))]
    if cpu.size == 0:
        return None
    codes, pids = pd.factorize(cpu)
    counts = np.bincount(codes)
    if (counts == counts.max()).sum() == 1:  # one most frequent pid (else: value_counts' tie order)
        return int(pids[counts.argmax()])
    return int(pd.Series(cpu).value_counts().idxmax())


def host_of(path: str | os.PathLike, header_host: str | None) -> str | None:
    """The host a file came from: the trace header's ``host_name``, else the trace handler's
    file name (``host_pid.time.pt.trace.json``)."""
    if header_host:
        return header_host
    m = _HANDLER_NAME.match(Path(path).name)
    return m.group("host") if m else None


def read_manifest(directory: Path) -> dict | None:
    """The capture manifest in ``directory`` (``manifest.json``, at most 4 MiB), None when there
    is none or it is not a JSON object."""
    p = directory / "manifest.json"
    try:
        if not p.is_file() or p.stat().st_size > _MANIFEST_MAX_BYTES:
            return None
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def manifest_ranks(directory: Path) -> dict[str, int]:
    """File name -> rank from a capture manifest in ``directory`` (empty when none is usable)."""
    doc = read_manifest(directory)
    out: dict[str, int] = {}
    rows = doc.get("ranks") if doc is not None else None
    for r in rows if isinstance(rows, list) else []:
        if (
            isinstance(r, dict)
            and isinstance(r.get("trace"), str)
            and isinstance(r.get("rank"), int)
            and not isinstance(r.get("rank"), bool)
        ):
            out[Path(r["trace"]).name] = r["rank"]
    return out


def files_of_rank(
    directory: Path, files: list[Path], rank: int | None, max_bytes: int
) -> tuple[list[Path], list[int], str] | None:
    """The files of ``rank`` (``None``: the lowest rank found) in ``directory``, told from each
    file's head (or tail) and the
    capture manifest without reading any events (:mod:`tracekit.ranks.rankhead`), with every rank
    found and the grouping sentence; ``None`` when some file's rank cannot be told so (no
    ``distributedInfo``, not named by a manifest, or unreadable): then the ranks come from the
    processes, which only a full read gives."""
    from .rankhead import Unknown, head_rank

    named = manifest_ranks(directory)
    ids = []
    for f in files:
        try:
            r = head_rank(f, max_bytes)
        except Unknown:
            return None
        r = named.get(f.name) if r is None else r
        if r is None:
            return None
        ids.append(FileIdentity(rank=r, pid=None, host=None))
    groups, how = group_files(ids)
    if rank is None:
        rank = min(groups, default=-1)
    return [files[i] for i in groups.get(rank, [])], sorted(groups), how


def group_files(ids: list[FileIdentity]) -> tuple[dict[int, list[int]], str]:
    """``{rank: [file indices]}`` and a sentence saying how the files were grouped."""
    groups: dict[int, list[int]] = {}
    proc_rank: dict[tuple[str | None, int], int] = {}
    for i, f in enumerate(ids):
        if f.rank is not None:
            groups.setdefault(f.rank, []).append(i)
            if f.pid is not None:
                proc_rank.setdefault((f.host, f.pid), f.rank)
    unranked = [i for i, f in enumerate(ids) if f.rank is None]
    by_process = 0
    for i in unranked:
        f = ids[i]
        key = (f.host, f.pid) if f.pid is not None else None
        if key is not None and key in proc_rank:
            groups[proc_rank[key]].append(i)
            by_process += 1
            continue
        r = next(k for k in range(len(ids) + len(groups) + 1) if k not in groups)
        groups[r] = [i]
        if key is not None:
            proc_rank[key] = r
    return {r: sorted(v) for r, v in sorted(groups.items())}, _how(ids, groups, unranked, by_process)


def _how(ids: list[FileIdentity], groups: dict[int, list[int]], unranked: list[int], by_process: int) -> str:
    n, k = len(ids), len(groups)
    if not unranked:
        how = "ranks from distributedInfo (or the capture manifest)"
    elif len(unranked) == n:
        how = (
            "no distributedInfo: files grouped by process (host and pid); "
            "rank numbers follow file order and are not distributed ranks"
        )
    else:
        how = (
            f"{n - len(unranked)} files ranked by distributedInfo (or the capture manifest), "
            f"{len(unranked)} without: grouped by process (host and pid)"
        )
    if any(f.pid is None for f in ids if f.rank is None):
        how += "; files with no CPU process id are a rank each"
    if k < n:
        how += f"; {n} files -> {k} rank{'s' if k != 1 else ''} (files of one rank are successive windows)"
    return how


def merge_windows(parts: list[Any]) -> Any:
    """One :class:`~tracekit.pipeline.Attributed` from the files of one rank, in time order."""
    if len(parts) == 1:
        return parts[0]
    parts = sorted(parts, key=_first_time)
    taken: set[int] = set()
    framed: dict[str, list] = {k: [] for k in ("steps", "windows", "memory", "critical")}
    steps, warnings, shifted, shifts = framed["steps"], [], [], []
    for p in parts:
        nums = p.steps["step"].to_numpy(np.int64) if len(p.steps) else np.empty(0, np.int64)
        shift = 0
        if taken and taken.intersection(nums.tolist()):
            shift = max(taken) + 1 - int(nums.min())
            shifted.append(
                f"{Path(p.path).name}: steps {nums.min()}-{nums.max()} "
                f"renumbered {nums.min() + shift}-{nums.max() + shift}"
            )
        taken.update((nums + shift).tolist())
        shifts.append(shift)
        for name, out in framed.items():  # each frame's steps renumbered alike
            out.append(getattr(p, name).assign(step=getattr(p, name)["step"] + shift))
        warnings += p.warnings
    if shifted:
        repeat = "step numbers repeat across files of one rank; "
        warnings.append(TraceWarning("steps_renumbered", repeat + listed(shifted, "files")))
    first = parts[0]
    meta = dict(first.meta)
    meta["steps"] = [s + _shift_of(p, steps[i]) for i, p in enumerate(parts) for s in p.meta.get("steps", [])]
    meta["complete_steps"] = [
        s + _shift_of(p, steps[i]) for i, p in enumerate(parts) for s in p.meta.get("complete_steps", [])
    ]
    meta["has_profiler_steps"] = all(p.meta.get("has_profiler_steps", True) for p in parts)
    if any("coverage" in p.meta for p in parts):
        meta["coverage"] = _merge_coverage([p.meta.get("coverage") or {} for p in parts])
    if any("step_ranges" in p.meta for p in parts):
        meta["step_ranges"] = _merge_step_ranges([p.meta.get("step_ranges") or {} for p in parts], shifts)
    meta["memory_events"] = sum(p.meta.get("memory_events", 0) for p in parts)
    meta["window_files"] = [p.path for p in parts]
    merged = replace(
        first,
        mode="gpu" if any(p.mode == "gpu" for p in parts) else first.mode,
        intervals=_merged(MergedIntervals(tuple(zip(parts, shifts)))),
        **{name: pd.concat(out, ignore_index=True) for name, out in framed.items()},
        meta=meta,
        warnings=warnings,
    )
    unjudged = [s for p, st in zip(parts, steps) if len(st) < CUT_MIN_STEPS for s in st["step"]]
    return _cut_rank_edges(merged, set(unjudged))


def _cut_rank_edges(att: Any, unjudged: set) -> Any:
    """The cut rule of :func:`tracekit.pipeline.windows.find_windows` for the rank's first and
    last step when the file holding it had too few steps to judge them: against the median
    step of the whole rank, so splitting a run into window files changes nothing."""
    st = att.steps.sort_values("step", kind="stable")  # the order find_windows judges them in
    if len(st) < CUT_MIN_STEPS or not unjudged:
        return att
    dur = (st["end"] - st["start"]).to_numpy()
    edges = st.iloc[[0, -1]]
    short = (edges["end"] - edges["start"]).to_numpy() < CUT_FRACTION * float(np.median(dur))
    cut = {int(s) for s, c, ok in zip(edges["step"], short, edges["complete"]) if c and ok and s in unjudged}
    if not cut:
        return att

    def gone(df: pd.DataFrame) -> np.ndarray:
        return df["step"].isin(cut).to_numpy()

    meta = dict(att.meta, complete_steps=[s for s in att.meta.get("complete_steps", []) if s not in cut])
    warnings = att.warnings + [TraceWarning("step_cut", CUT_MESSAGE, step=s) for s in sorted(cut)]
    held = att.__dict__["_intervals"]
    return replace(
        att,
        intervals=(
            replace(held, cut=frozenset(cut)) if att.lazy else held[~gone(held)].reset_index(drop=True)
        ),
        steps=att.steps.assign(complete=att.steps["complete"].to_numpy() & ~gone(att.steps)),
        windows=att.windows.assign(complete=att.windows["complete"].to_numpy() & ~gone(att.windows)),
        memory=att.memory[~gone(att.memory)].reset_index(drop=True),
        critical=att.critical[~gone(att.critical)].reset_index(drop=True),
        meta=meta,
        warnings=warnings,
    )


@dataclass(frozen=True)
class MergedIntervals:
    """The intervals of a rank of several window files: each file's, its steps shifted as
    :func:`merge_windows` numbers them, the steps :func:`_cut_rank_edges` cut left out. Held by
    a lazy Attributed (some file's intervals are in the result cache, :mod:`tracekit.ranks.results`)
    and computed when read, so a parent holds no rank's intervals until a table needs them."""

    parts: tuple  # ((Attributed, step shift), ...), in time order
    cut: frozenset = frozenset()

    def load(self, columns: list[str] | None = None) -> pd.DataFrame:
        want = None if columns is None else list(dict.fromkeys([*columns, "step"]))
        frames = []
        for part, shift in self.parts:
            iv = part.load_intervals(want)
            frames.append(iv.assign(step=iv["step"] + shift))
        out = pd.concat(frames, ignore_index=True)
        if self.cut:
            out = out[~out["step"].isin(self.cut).to_numpy()].reset_index(drop=True)
        return out if columns is None else out[columns]


def _merged(held: MergedIntervals) -> Any:
    """``held`` itself: the rank's tables are computed a file at a time from it
    (:mod:`tracekit.ranks.window_tables`); its intervals are joined only when read."""
    return held


def _merge_coverage(covs: list[dict]) -> dict:
    """Coverage shares of several windows: each share weighted by its window's device time."""
    total = sum(c.get("device_ms") or 0.0 for c in covs)
    out: dict = {"device_ms": round(total, 6)}
    for k in sorted({k for c in covs for k in c} - {"device_ms"}):
        vals = [(c.get(k), c.get("device_ms") or 0.0) for c in covs]
        if all(v is None for v, _ in vals):
            out[k] = None
        else:
            w = sum(v * d for v, d in vals if v is not None)
            out[k] = round(w / total, 6) if total > 0 else 0.0
    return out


def _merge_step_ranges(ranges: list[dict], shifts: list[int]) -> dict:
    """The step-range facts of several windows, in the merged step numbers."""
    empty = [s + k for r, k in zip(ranges, shifts) for s in r.get("empty", [])]
    overlaps = [[a + k, b + k] for r, k in zip(ranges, shifts) for a, b in r.get("cpu_overlaps", [])]
    return {"empty": sorted(empty), "cpu_overlaps": overlaps}


def _shift_of(part: Any, shifted_steps: pd.DataFrame) -> int:
    if part.steps.empty:
        return 0
    return int(shifted_steps["step"].iloc[0] - part.steps["step"].iloc[0])


def _first_time(part: Any) -> int:
    s = part.steps
    if len(s) and "start" in s:
        return int(s["start"].min())
    iv = part.intervals
    return int(iv["start"].min()) if len(iv) else 0


def group_results(p: Path, files: list[Path], done: list[Any]) -> tuple[dict[int, Any], str, dict[int, int]]:
    """The files' analyses grouped into ranks (:mod:`tracekit.ranks.grouping`): files of one process are
    successive windows of one rank. With them, ``{rank: index in files}`` of each rank that is
    one file (whose tables the worker computed; a rank of several windows is computed again
    from its merged intervals)."""
    from_manifest = manifest_ranks(p) if p.is_dir() else {}
    ids = []
    for f, att in zip(files, done):
        r = att.meta.get("rank")
        ids.append(
            FileIdentity(
                rank=from_manifest.get(f.name) if r is None else r,
                pid=att.meta.get("pid"),
                host=att.meta.get("host"),
            )
        )
    groups, how = group_files(ids)
    split = sorted({a.meta["rank_split"] for a in done if a.meta.get("rank_split")})
    if split:  # a file of several ranks (tracekit.ranks.merged): say how they were found
        how = "; ".join(split + [how])
    ranks, alone = {}, {}
    for r, idx in groups.items():
        merged = copy.copy(merge_windows([done[i] for i in idx]))  # replace() would load lazy intervals
        merged.meta = {**merged.meta, "rank": r}
        ranks[r] = merged
        if len(idx) == 1:
            alone[r] = idx[0]
    return ranks, how, alone


def directory_warnings(done: list[Any], skipped: list[tuple[Path, str]]) -> list:
    """One warning per skipped file, and one when the files' own metadata says they are copies
    (every file "rank 0 of world size 1"): copies or successive windows of one rank."""
    out = [TraceWarning("skipped_file", f"skipped {f.name}: {why}") for f, why in skipped]
    if len(done) > 1 and all(a.meta.get("rank") == 0 and a.meta.get("world_size") == 1 for a in done):
        out.append(
            TraceWarning(
                "not_ranks",
                f"all {len(done)} files say they are rank 0 of world size 1: copies of "
                f"one trace or successive windows of one rank, not {len(done)} ranks",
            )
        )
    return out


def files_to_read(
    p: Path, rank: int | None, strict: bool, max_bytes: int, lowest: bool = False
) -> tuple[list[Path], list[tuple[Path, str]], str | None]:
    """The files to read, the entries skipped, and (when ``rank`` was picked by the files'
    heads) how the directory's files group into ranks: only rank ``rank``'s files (with
    ``lowest`` and no ``rank``, the lowest rank's) are read when every file's rank can be told
    from its head (:func:`files_of_rank`); else every file.
    Shared by :func:`load` and ``tracekit explain`` (:func:`tracekit.ranks.raw_rank.rank_traces`)."""
    if not p.exists():
        raise TraceError(p, "no such file or directory")
    files, skipped = trace_listing(p) if p.is_dir() else ([p], [])
    if skipped and strict:
        raise TraceError(skipped[0][0], skipped[0][1])
    one = rank is not None or (lowest and bool(files))
    heads = files_of_rank(p, files, rank, max_bytes) if one and p.is_dir() else None
    if heads is None:
        return files, skipped, None
    files, found, how = heads
    if not files:
        raise TraceError(p, f"no rank {rank}; ranks here: {', '.join(map(str, found))}")
    return files, skipped, how
