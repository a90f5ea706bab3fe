"""Checks that stop a capture before it starts, each with one clear line (CaptureError)."""

from __future__ import annotations

import importlib.util
import os

from tracekit.errors import install_hint

from .errors import MISSING_DEPENDENCY, CaptureError

CAPTURE_PACKAGES = ("torch", "deepspeed", "transformers")


def require(packages=CAPTURE_PACKAGES, why: str = "tracekit capture") -> None:
    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        raise CaptureError(f"{why} needs {', '.join(missing)}: {install_hint('capture')}", MISSING_DEPENDENCY)


def gpu_count() -> int:
    """CUDA GPUs this process can use (imports torch, which capture needs anyway)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def devices() -> list[dict]:
    """The CUDA GPUs visible to this process, for the manifest."""
    import torch

    if not torch.cuda.is_available():
        return []
    return [
        {
            "index": i,
            "name": torch.cuda.get_device_name(i),
            "memory_bytes": torch.cuda.get_device_properties(i).total_memory,
        }
        for i in range(torch.cuda.device_count())
    ]


def ranks(nproc: int, gpus: int) -> None:
    """Refuse more ranks than the host has GPUs (GPU host) or CPU cores (CPU host)."""
    if nproc < 1:
        raise CaptureError(f"--nproc-per-node must be at least 1, got {nproc}")
    if gpus:
        if nproc > gpus:
            raise CaptureError(f"--nproc-per-node {nproc} needs {nproc} GPUs; this host has {gpus}")
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if nproc > cores:
        raise CaptureError(
            f"--nproc-per-node {nproc} exceeds the {cores} CPU cores this process may "
            "use (one rank per core on CPU hosts)"
        )
