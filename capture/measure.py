"""What a profiled step cost: its wall time, tokens and samples, and peak memory, per rank.

Each rank times its own steps (the loop's clock, not the trace) and reads its own memory peaks:

* wall time: ``time.perf_counter`` read just before the step's input is made and just after its
  last operation (the optimizer step; the sampled token in inference). On GPU hosts the device is
  synchronised (``torch.cuda.synchronize``) before each reading, so queued kernels are inside;
* GPU peaks: ``torch.cuda.reset_peak_memory_stats`` when the step starts, then
  ``torch.cuda.max_memory_allocated`` (tensors) and ``max_memory_reserved`` (the caching
  allocator's segments) when it ends;
* host peak RSS of the rank's process (Linux): ``VmHWM`` of ``/proc/self/status`` when the step
  ends, after writing ``5`` to ``/proc/self/clear_refs`` when it starts (which resets VmHWM to
  the current RSS). When the kernel refuses that reset the figure is the process's peak so far,
  and :meth:`StepMeter.about` says so; elsewhere it is ``ru_maxrss`` (the process peak).

:class:`StepMeter` keeps one record per profiled step (``step`` is the ``ProfilerStep#N`` number
of the trace) and :func:`job` sums a run's ranks into the figures a sweep compares. Nothing
here imports torch at module level: the choice of figures and their bookkeeping are tested on
any host, the CUDA calls through a stand-in (tests/unit/test_capture_measure.py).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MIB = 1 << 20
PROC_SELF = Path("/proc/self")

#: Per-step record fields -> unit (the manifest says these beside the numbers).
UNITS = {
    "step": "ProfilerStep number",
    "wall_ms": "ms",
    "tokens": "tokens",
    "samples": "sequences",
    "peak_rss_bytes": "bytes",
    "peak_allocated_bytes": "bytes",
    "peak_reserved_bytes": "bytes",
}

WALL_SOURCE = "time.perf_counter around the step in the capture loop"
GPU_WALL_SOURCE = WALL_SOURCE + ", torch.cuda.synchronize() before each reading"
ALLOCATED_SOURCE = "torch.cuda.max_memory_allocated, reset per step by torch.cuda.reset_peak_memory_stats"
RESERVED_SOURCE = "torch.cuda.max_memory_reserved, reset per step by torch.cuda.reset_peak_memory_stats"
RSS_SOURCE = "VmHWM of /proc/self/status, reset per step by writing 5 to /proc/self/clear_refs"


def status_field(text: str, field: str) -> int | None:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmHWM``, ``VmRSS``) in bytes, else None."""
    for line in text.splitlines():
        if line.startswith(field + ":"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024
    return None


def read_status_field(proc: Path, field: str) -> int | None:
    try:
        return status_field((proc / "status").read_text(), field)
    except OSError:
        return None


def rss_bytes(pid: int) -> int | None:
    """The current resident set of process ``pid`` (Linux), else None."""
    return read_status_field(Path("/proc") / str(pid), "VmRSS")


#: After a reset, VmHWM may exceed VmRSS by what the process touched between the two reads.
RESET_SLACK_BYTES = 16 * 1024 * 1024


def reset_peak_rss(proc: Path = PROC_SELF) -> str | None:
    """Reset the process's VmHWM to its current RSS; None when done, else why not.

    Some kernels (and sandboxes such as gVisor) accept the write and do nothing, so the reset
    is checked: right after it VmHWM must be back near VmRSS (within
    :data:`RESET_SLACK_BYTES`)."""
    try:
        (proc / "clear_refs").write_text("5")
    except OSError as err:
        return f"writing 5 to {proc / 'clear_refs'} was refused ({err.strerror or err})"
    status = (proc / "status").read_text() if (proc / "status").exists() else ""
    hwm, rss = status_field(status, "VmHWM"), status_field(status, "VmRSS")
    if hwm is not None and rss is not None and hwm > rss + RESET_SLACK_BYTES:
        mib = 1024 * 1024
        return (
            f"writing 5 to {proc / 'clear_refs'} was accepted but VmHWM stayed at "
            f"{hwm // mib} MiB above VmRSS {rss // mib} MiB (this kernel does not reset it)"
        )
    return None


class HostPeak:
    """The host peak RSS of this process per step: VmHWM reset per step where Linux allows it,
    else the process's peak so far (``reset`` says which, ``why`` why not per step)."""

    def __init__(self, proc: Path = PROC_SELF) -> None:
        self.proc = proc
        self.linux = read_status_field(proc, "VmHWM") is not None
        self.why: str | None = None if self.linux else f"no VmHWM in {proc / 'status'}"

    @property
    def reset(self) -> bool:
        return self.why is None

    def start(self) -> None:
        if self.linux and self.why is None:
            self.why = reset_peak_rss(self.proc)

    def peak(self) -> int | None:
        if self.linux:
            return read_status_field(self.proc, "VmHWM")
        return _ru_maxrss()

    def source(self) -> str:
        if self.linux and self.reset:
            return RSS_SOURCE
        if self.linux:
            return (
                f"VmHWM of {self.proc / 'status'}: the process peak so far, not reset per step ({self.why})"
            )
        return "resource.getrusage ru_maxrss: the process peak so far, not reset per step"


def _ru_maxrss() -> int | None:
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # macOS: bytes; else kB


class StepMeter:
    """Times and measures profiled steps: ``start()`` when a step starts, ``stop(step, ...)``
    when it ends; :meth:`record` is what the rank reports (:data:`UNITS`, sources, steps).

    ``cuda`` is ``torch.cuda`` on GPU hosts (None on CPU hosts), ``device`` its device;
    ``clock`` and ``host`` can be replaced (tests)."""

    def __init__(
        self,
        *,
        cuda: Any = None,
        device: Any = None,
        token: str,
        clock: Callable[[], float] = time.perf_counter,
        host: HostPeak | None = None,
    ) -> None:
        self.cuda, self.device, self.token = cuda, device, token
        self.clock = clock
        self.host = host if host is not None else HostPeak()
        self.steps: list[dict] = []
        self._t0: float | None = None

    def start(self) -> None:
        self.host.start()
        if self.cuda is not None:
            self.cuda.synchronize(self.device)
            self.cuda.reset_peak_memory_stats(self.device)
        self._t0 = self.clock()

    def stop(self, step: int, *, tokens: int, samples: int, stage: str | None = None) -> dict:
        if self._t0 is None:
            raise RuntimeError("StepMeter.stop() without start()")
        if self.cuda is not None:
            self.cuda.synchronize(self.device)
        wall = self.clock() - self._t0
        self._t0 = None
        rec: dict = {"step": step, "wall_ms": wall * 1e3, "tokens": tokens, "samples": samples}
        if stage is not None:
            rec["stage"] = stage
        rec["peak_rss_bytes"] = self.host.peak()
        if self.cuda is not None:
            rec["peak_allocated_bytes"] = int(self.cuda.max_memory_allocated(self.device))
            rec["peak_reserved_bytes"] = int(self.cuda.max_memory_reserved(self.device))
        self.steps.append(rec)
        return rec

    def about(self) -> dict:
        """Units and where each figure came from."""
        gpu = self.cuda is not None
        sources = {
            "wall_ms": GPU_WALL_SOURCE if gpu else WALL_SOURCE,
            "peak_rss_bytes": self.host.source(),
        }
        if gpu:
            sources |= {"peak_allocated_bytes": ALLOCATED_SOURCE, "peak_reserved_bytes": RESERVED_SOURCE}
        return {
            "units": {k: v for k, v in UNITS.items() if k in sources or k in ("step", "tokens", "samples")},
            "sources": sources,
            "token": self.token,
            "sample": "one sequence of the batch",
            "peak_rss_reset_per_step": self.host.reset,
            "device_memory": "gpu" if gpu else "host",
        }

    def record(self) -> dict:
        return {**self.about(), "steps": list(self.steps)}


def train_token() -> str:
    return "an input token: each step trains on batch_size x seq_len tokens per rank"


def infer_token() -> str:
    return (
        "prefill: a prompt token (batch_size x prompt_len per step); "
        "decode: a generated token (batch_size per step)"
    )


def device_peak(rec: dict) -> int | None:
    """The step's peak device memory: allocated on GPU hosts, host RSS on CPU hosts."""
    if rec.get("peak_allocated_bytes") is not None:
        return int(rec["peak_allocated_bytes"])
    v = rec.get("peak_rss_bytes")
    return None if v is None else int(v)


#: How :func:`job` combines the ranks' steps (the manifest says it beside the figures).
JOB_HOW = (
    "Steps are synchronous across data-parallel ranks, so a step of the job lasts as long as its "
    "slowest rank: step_ms is the mean over profiled steps of the slowest rank's wall time, "
    "step_median_ms, step_min_ms and step_max_ms their median, fastest and slowest (the noise); "
    "tokens_per_s and samples_per_s are every rank's tokens (samples) over those steps divided by "
    "the sum of those step times; peak_mem_mb is the highest per-step peak of any rank (GPU hosts: "
    "torch.cuda.max_memory_allocated; CPU hosts: peak RSS), peak_rss_mb the highest host peak RSS, "
    "both in MiB (2^20 bytes). Inference keeps the figures of each stage apart (stages)."
)


def job(ranks: list[dict]) -> dict | None:
    """The run's figures from its ranks' records (``ranks[i]["measures"]``), None without any;
    combined as :data:`JOB_HOW` says."""
    records = [r.get("measures") for r in ranks if isinstance(r.get("measures"), dict)]
    by_step: dict[tuple, list[dict]] = {}
    for m in records:
        for rec in m.get("steps", []):
            by_step.setdefault((rec.get("stage"), rec["step"]), []).append(rec)
    if not by_step:
        return None
    out = _figures(list(by_step.values()))
    stages = sorted({s for s, _ in by_step if s is not None})
    if stages:
        out["stages"] = {s: _figures([v for (st, _), v in by_step.items() if st == s]) for s in stages}
    first = records[0]
    out["peak_mem_source"] = first["sources"].get(
        "peak_allocated_bytes" if first.get("device_memory") == "gpu" else "peak_rss_bytes"
    )
    out["ranks"] = len(records)
    return out


def _figures(steps: list[list[dict]]) -> dict:
    """``steps``: per step, the records of every rank that ran it."""
    walls = [max(r["wall_ms"] for r in recs) for recs in steps]
    seconds = sum(walls) / 1e3
    tokens = sum(r["tokens"] for recs in steps for r in recs)
    samples = sum(r["samples"] for recs in steps for r in recs)
    peaks = [p for recs in steps for r in recs if (p := device_peak(r)) is not None]
    rss = [r["peak_rss_bytes"] for recs in steps for r in recs if r.get("peak_rss_bytes") is not None]
    reserved = [r["peak_reserved_bytes"] for recs in steps for r in recs if r.get("peak_reserved_bytes")]
    return {
        "steps": len(steps),
        "step_ms": sum(walls) / len(walls),
        "step_median_ms": statistics.median(walls),
        "step_min_ms": min(walls),
        "step_max_ms": max(walls),
        "tokens_per_s": tokens / seconds if seconds > 0 else None,
        "samples_per_s": samples / seconds if seconds > 0 else None,
        "peak_mem_mb": max(peaks) / MIB if peaks else None,
        "peak_rss_mb": max(rss) / MIB if rss else None,
        **({"peak_reserved_mb": max(reserved) / MIB} if reserved else {}),
    }


#: Units of :func:`job`'s figures.
JOB_UNITS = {
    "step_ms": "ms",
    "step_median_ms": "ms",
    "step_min_ms": "ms",
    "step_max_ms": "ms",
    "tokens_per_s": "tokens/s",
    "samples_per_s": "sequences/s",
    "peak_mem_mb": "MiB",
    "peak_rss_mb": "MiB",
    "peak_reserved_mb": "MiB",
}


def manifest_block(ranks: list[dict]) -> dict | None:
    """The manifest's ``measures``: the job's figures (:func:`job`), their units and how they
    were combined; None when no rank measured a step."""
    figures = job(ranks)
    if figures is None:
        return None
    return {"job": figures, "units": JOB_UNITS, "how": JOB_HOW, "token": _first(ranks, "token")}


def _first(ranks: list[dict], key: str) -> Any:
    return next((r["measures"].get(key) for r in ranks if isinstance(r.get("measures"), dict)), None)


def cuda_or_none(gpu: bool) -> Any:
    """``torch.cuda`` on GPU hosts, else None (what :class:`StepMeter` takes)."""
    if not gpu:
        return None
    import torch

    return torch.cuda
