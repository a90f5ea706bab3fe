"""Capture the gloo traces of tests/data/gloo (issue 37.3, 37.4): DDP, FSDP1 and FSDP2 on 2 CPU
processes, as a stranger would make them.

    python tests/gloo_captures.py tests/data/gloo ddp fsdp1 fsdp2

Each mode writes ``<out>/<mode>/rank{0,1}.json.gz``: a tiny MLP (random weights) trained with
AdamW under plain ``torch.profiler`` (``with_stack``, ``with_modules``, ``record_shapes``;
schedule wait 1, warmup 1, active 2) on gloo over a FileStore. FSDP1 needs
``device_id=torch.device("cpu")`` (without it, it asks for an accelerator); FSDP2's
``fully_shard`` runs on CPU as it is. Made with torch 2.13.0+cpu.
"""

from __future__ import annotations

import gzip
import shutil
import sys
import tempfile
from pathlib import Path


def _model():
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10))


def _wrap(m, mode: str):
    import torch
    from torch import nn

    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(m, bucket_cap_mb=0.02)  # two buckets per step
    if mode == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(m, device_id=torch.device("cpu"), use_orig_params=True)
    from torch.distributed.fsdp import fully_shard

    for layer in m:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    return fully_shard(m)


def _run(rank: int, mode: str, out: str, store: str) -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    m = _wrap(_model(), mode)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    torch.manual_seed(rank)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    raw = Path(out) / f"rank{rank}.json"
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2, repeat=1)
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=sched,
        with_stack=True,
        with_modules=True,
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
    ) as prof:
        for _ in range(4):
            opt.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()
    with open(raw, "rb") as src, gzip.open(f"{raw}.gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


def capture(mode: str, out: Path) -> None:
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_run, args=(mode, str(out), str(Path(tmp) / "store")), nprocs=2)


if __name__ == "__main__":
    for mode in sys.argv[2:]:
        capture(mode, Path(sys.argv[1]) / mode)
