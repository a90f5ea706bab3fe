"""Capture three CPU training setups under plain ``torch.profiler``, as a stranger would (no
tracekit code): ``python round4_captures.py OUT_DIR [NAME...]``; writes OUT_DIR/NAME.json.gz.

Names: ``ddp`` (a tiny Llama under DistributedDataParallel, gloo, 2 processes, FileStore; one
file per rank, ``ddp.rank<N>.json.gz``), ``accum`` (a plain MLP model, 4 micro-batches per
optimizer step), ``longstart`` (a model whose loss ends in a long chain of cheap ops, so
autograd spends a long time in the engine's start before the first heavy node). Random weights
from a config: nothing is downloaded. Schedule wait 1, warmup 1, active 2; with_stack,
with_modules, record_shapes.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule

STEPS = 4  # wait 1 + warmup 1 + active 2
LONG_STEPS = int(os.environ.get("LONG_STEPS", "700"))


def _profiler(out: Path) -> profile:
    def save(p: profile) -> None:
        raw = out.with_suffix("")  # NAME.json
        p.export_chrome_trace(str(raw))
        with open(raw, "rb") as f, gzip.open(out, "wb", compresslevel=9) as g:
            shutil.copyfileobj(f, g)
        raw.unlink()

    return profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=2),
        on_trace_ready=save,
        with_stack=True,
        with_modules=True,
        record_shapes=True,
    )


def _llama() -> nn.Module:
    import transformers as T

    cfg = T.LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        intermediate_size=128,
        vocab_size=256,
    )
    return T.LlamaForCausalLM(cfg)


def _ddp_rank(rank: int, store_path: str, out_dir: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    model = nn.parallel.DistributedDataParallel(_llama(), bucket_cap_mb=0.05)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 256, (2, 64))
    with _profiler(Path(out_dir) / f"ddp.rank{rank}.json.gz") as prof:
        for _ in range(STEPS):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()


def ddp(out_dir: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_ddp_rank, args=(os.path.join(tmp, "store"), str(out_dir)), nprocs=2, join=True)


class Plain(nn.Module):
    """A plain MLP stack (no transformers)."""

    def __init__(self, width: int = 256, depth: int = 4) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def accum(out_dir: Path) -> None:
    torch.manual_seed(0)
    model = Plain()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    micro = 4
    with _profiler(out_dir / "accum.json.gz") as prof:
        for _ in range(STEPS):
            for _ in range(micro):
                x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
                loss = nn.functional.cross_entropy(model(x), y) / micro
                loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step()


class LongStart(nn.Module):
    """A small linear model whose graph is long: a sequential scan over time steps (as a
    Mamba slow path runs one), thousands of tiny autograd nodes, so the engine walks a big
    graph before it runs the first node."""

    def __init__(self, width: int = 64, steps: int = LONG_STEPS) -> None:
        super().__init__()
        self.fc_in = nn.Linear(width, width)
        self.fc_out = nn.Linear(width, width)
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc_in(x)
        acc = torch.zeros_like(h[:, 0])
        for i in range(self.steps):
            acc = acc * 0.9 + h[:, i % h.shape[1]]
        return self.fc_out(acc)


def longstart(out_dir: Path) -> None:
    torch.manual_seed(0)
    model = LongStart()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with _profiler(out_dir / "longstart.json.gz") as prof:
        for _ in range(STEPS):
            opt.zero_grad()
            loss = model(torch.randn(8, 16, 64)).pow(2).mean()
            loss.backward()
            opt.step()
            prof.step()


CAPTURES = {"ddp": ddp, "accum": accum, "longstart": longstart}

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or list(CAPTURES):
        CAPTURES[name](out)
