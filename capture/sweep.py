"""``tracekit capture sweep``: what each method costs, one training capture per method.

For each method of ``--methods`` (:mod:`.methods`) the sweep runs the training capture that
method means (:func:`~tracekit.capture.runs.run_train`, as ``tracekit capture train`` would)
into ``DIR/<method>/`` and takes the figures its ranks measured (the manifest's
``measures.job``, :mod:`.measure`). A method that cannot run here (no GPU, a missing package,
out of memory, a failed run) is a row with its status and one-line reason, and the sweep goes
on. ``--max-batch`` searches each method's largest batch that fits (:mod:`.batch_search`).
``DIR/sweep.json`` and ``DIR/sweep.md`` (:mod:`.sweep_report`) are rewritten after each method.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from . import output, owned, runs
from .batch_search import largest_fitting
from .errors import FAILED, OOM, CaptureError
from .manifest import command_line, now
from .methods import Method
from .options import Common

SWEEP_JSON, SWEEP_MD, PROBES = "sweep.json", "sweep.md", "probes"
#: Figures a row takes from the capture's ``measures.job``.
FIGURES = (
    "step_ms",
    "tokens_per_s",
    "samples_per_s",
    "peak_mem_mb",
    "peak_rss_mb",
    "peak_reserved_mb",
    "step_median_ms",
    "step_min_ms",
    "step_max_ms",
)
INTERRUPTED = "interrupted"
#: Exit statuses of a capture stopped by a signal: Ctrl-C (130), SIGTERM (143).
STOPPED = (130, 143)


@dataclass(frozen=True)
class Settings:
    """One sweep: the options every capture shares (``common.out`` is the sweep's directory)."""

    common: Common
    train: runs.Train
    memory_limit_mb: float | None = None
    max_batch: bool = False
    batch_cap: int = 1024
    paper: bool = False
    gpu: bool = False


def train_argv(c: Common, t: runs.Train, method: Method) -> list[str]:
    """The ``tracekit capture train`` command that makes the same capture (for its manifest)."""
    args = ["tracekit", "capture", "train", f"--model={c.model}", f"--batch-size={c.batch_size}"]
    args += [f"--layers={c.layers}"] if c.layers is not None else []
    args += [f"--seq-len={t.seq_len}", f"--steps={t.steps}", f"--nproc-per-node={t.nproc_per_node}"]
    args += [f"--warmup={c.warmup}"] if c.warmup is not None else []
    args += [f"--dtype={c.dtype}"] if c.dtype else []
    args += [f"--attention={c.attention}"] if c.attention != "sdpa" and "flash" not in method.parts else []
    args += ["--no-stack"] * c.no_stack + ["--profile-memory"] * c.profile_memory
    args += [f"--seed={c.seed}", *method.options(), f"--out={c.out}", "--force"]
    return args


Runner = Callable[..., dict]


def capture_method(s: Settings, method: Method, batch: int, out: Path, run: Runner = runs.run_train) -> dict:
    """Capture ``method`` at ``batch`` into ``out``: a row's figures, or its status and reason."""
    c = replace(
        s.common, out=out, batch_size=batch, attention=method.attention(s.common.attention), force=True
    )
    t = method.train(s.train)
    started = time.monotonic()
    row: dict = {"status": "ok", "reason": None, "batch_size": batch}
    try:
        result = run(
            c,
            t,
            argv=train_argv(c, t, method),
            echo=lambda *a: None,
            memory_limit_mb=s.memory_limit_mb,
            written_by=owned.SWEEP_TOOL,
        )
    except CaptureError as err:
        if err.exit_code in STOPPED:  # a signal stopped the capture: it stops the sweep too
            return row | {
                "status": INTERRUPTED,
                "reason": err.format_message(),
                "exit_code": err.exit_code,
                "seconds": time.monotonic() - started,
            }
        kind = FAILED if err.kind == "error" else err.kind
        return row | {"status": kind, "reason": err.format_message(), "seconds": time.monotonic() - started}
    except Exception as err:  # a bug or an unforeseen failure: a row, never a traceback
        reason = f"{type(err).__name__}: {err}".strip().splitlines()[0]
        return row | {"status": "error", "reason": reason, "seconds": time.monotonic() - started}
    job = (result.get("measures") or {}).get("job")
    row["seconds"] = time.monotonic() - started
    if not job:
        return row | {"status": FAILED, "reason": "the capture recorded no measured step"}
    row |= {k: job.get(k) for k in FIGURES if k in job}
    row |= {"memory_source": job.get("peak_mem_source"), "steps": job.get("steps"), "ranks": job.get("ranks")}
    limit = s.memory_limit_mb
    if limit is not None and (job.get("peak_mem_mb") or 0) > limit:
        row |= {
            "status": OOM,
            "reason": f"peak {job['peak_mem_mb']:.0f} MiB is over --memory-limit {limit:g} MiB",
        }
    return row


class _CannotRun(Exception):
    def __init__(self, row: dict) -> None:
        self.row = row


def largest(s: Settings, method: Method, sweep_dir: Path, run: Runner = runs.run_train) -> dict:
    """``method`` at the largest batch that fits (``--max-batch``): its row, with the search's
    probes; the capture at that batch is moved to ``DIR/<method>/``, the others stay in
    ``DIR/probes/<method>/batch<B>/``."""
    tried: dict[int, dict] = {}
    probes = sweep_dir / PROBES / method.name

    def fits(batch: int) -> bool:
        row = tried[batch] = capture_method(s, method, batch, probes / f"batch{batch}", run)
        if row["status"] not in ("ok", OOM):
            raise _CannotRun(row)
        return row["status"] == "ok"

    try:
        found = largest_fitting(fits, start=s.common.batch_size, cap=s.batch_cap)
    except _CannotRun as stop:
        return stop.row | {"probes": _probes(tried)}
    if found.best == 0:
        first = tried[s.common.batch_size]
        reason = f"batch {s.common.batch_size} does not fit: {first['reason']}"
        return first | {"status": OOM, "reason": reason, "probes": _probes(tried)}
    shutil.move(str(probes / f"batch{found.best}"), str(sweep_dir / method.name))
    row = tried[found.best] | {"probes": _probes(tried), "capped": found.capped}
    if found.capped:
        row["reason"] = f"every batch up to --batch-cap {s.batch_cap} fitted"
    return row


def _probes(tried: dict[int, dict]) -> list[dict]:
    return [
        {
            "batch_size": b,
            "fits": r["status"] == "ok",
            "peak_mem_mb": r.get("peak_mem_mb"),
            "why": r["reason"],
        }
        for b, r in tried.items()
    ]


def prepare(out: Path, force: bool) -> Path:
    """Make the sweep directory ready: refuse a non-empty one unless ``force``, and then remove
    only what a sweep wrote (:func:`.owned.owned_sweep`: its files, and the captures whose
    manifests say the sweep wrote them, file by file); anything else is refused first."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise CaptureError(f"--out {out} exists and is not a directory")
    entries = list(out.iterdir()) if out.is_dir() else []
    if entries and not force:
        raise CaptureError(f"{out} is not empty (a previous sweep?); pass --force to replace it")
    if entries:
        files, foreign = owned.owned_sweep(out)
        owned.refuse(out, foreign, "a sweep")
        owned.remove(out, files)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_sweep(
    s: Settings, methods: list[Method], argv: list[str], echo, run: Runner = runs.run_train
) -> dict:
    """Every method in turn; the sweep's document (also in ``DIR/sweep.json`` after each).
    ``echo(line)`` says which method runs, then how it went."""
    from .sweep_report import UNITS, markdown, relative, with_paper

    out = s.common.out
    doc = _document(s, argv)
    rows: list[dict] = []
    by_name = {m.name: m for m in methods}
    stop: dict | None = None  # the row of the method a signal stopped: every later one is not run
    for i, m in enumerate(methods, 1):
        echo(f"[{i}/{len(methods)}] {m.name} ({m.label})")
        if stop is not None:
            row = {"status": "not-run", "reason": f"the sweep was stopped ({stop['reason']})"}
        else:
            row = _one(s, m, out, run)
            stop = row if row["status"] == INTERRUPTED else None
        done = (out / m.name / output.MANIFEST).is_file()
        rows.append({"method": m.name, "label": m.label, **_empty(), **row, "out": m.name if done else None})
        echo("    " + _progress(rows[-1]))
        base = doc["baseline"] = relative(rows)
        doc["relative_to"] = f"{base}: relative_throughput is tokens_per_s / {base}'s" if base else None
        if s.paper:
            doc["paper"] = with_paper(rows, by_name, s.common.model, s.max_batch)
        doc |= {"rows": rows, "finished": now(), "units": UNITS}
        output.write_json(out / SWEEP_JSON, doc)
    (out / SWEEP_MD).write_text(markdown(doc))
    return doc


def _one(s: Settings, m: Method, out: Path, run: Runner) -> dict:
    """One method's row; a signal that reaches the sweep itself (in a capture's checks, before
    its ranks start) is that method's interrupted row, as one inside its capture is."""
    try:
        if s.max_batch:
            return largest(s, m, out, run)
        return capture_method(s, m, s.common.batch_size, out / m.name, run)
    except KeyboardInterrupt as e:
        code = 143 if type(e).__name__ == "Terminated" else 130  # tracekit.cli.io.Terminated: SIGTERM
        what = "terminated (SIGTERM)" if code == 143 else "interrupted (Ctrl-C)"
        reason = f"sweep {what} before the capture started"
        return {"status": INTERRUPTED, "reason": reason, "exit_code": code}


def _empty() -> dict:
    """A row's leading fields, in the order sweep.json shows them."""
    return dict.fromkeys(("status", "reason", *FIGURES[:4], "relative_throughput", "relative_memory"))


def _progress(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row['reason']}"
    tokens, peak = row["tokens_per_s"], row["peak_mem_mb"]
    return f"ok: {tokens:,.1f} tokens/s, peak {peak:,.1f} MiB ({row['seconds']:.0f} s)"


def _document(s: Settings, argv: list[str]) -> dict:
    c, t, gpu = s.common, s.train, s.gpu
    return {
        "tracekit_sweep": 1,
        "command": command_line(argv),
        "started": now(),
        "model": c.model,
        "device": "gpu" if gpu else "cpu",
        "batch_size": c.batch_size,
        "seq_len": t.seq_len,
        "warmup": 2 if c.warmup is None else c.warmup,
        "steps": t.steps,
        "nproc_per_node": t.nproc_per_node,
        "max_batch": s.max_batch,
        "memory_limit_mb": s.memory_limit_mb,
        "memory": "peak GPU memory allocated by torch (max_memory_allocated), MiB"
        if gpu
        else "peak RSS of each rank's process (VmHWM, reset per step), MiB",
    }
