"""Capture the round-4 module shapes (issue 37, items 6 and 7 and OPT's activation) on CPU
under plain torch.profiler, as a stranger would (no tracekit code):
``python module_captures.py OUT_DIR NAME...``; writes OUT_DIR/NAME.json.gz per capture.

Names: ``plain`` (an nn.Module transformer built on ``nn.MultiheadAttention``, non-reentrant
checkpointing of every block, an output projection named ``head``), ``bert`` (BertForMaskedLM),
``vit`` (ViTForImageClassification), ``t5`` (T5ForConditionalGeneration), ``opt``
(OPTForCausalLM). Random weights from a config built here: nothing is downloaded. Each: 4 AdamW
training steps, schedule wait 1, warmup 1, active 2, ``with_stack``, ``with_modules``,
``record_shapes``. The stored captures are in tests/data/captures/ (tests/test_module_rows.py).
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import torch
import transformers as T
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class Plain(nn.Module):
    """Embedding, two blocks (each checkpointed, non-reentrant), a final norm and ``head``."""

    def __init__(self, vocab: int = 256, d: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False)
        return self.head(self.norm(x))


SMALL = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128)


def _model(name: str) -> tuple[nn.Module, dict]:
    ids = torch.randint(0, 256, (2, 16))
    if name == "plain":
        return Plain(), {"ids": ids}
    if name == "bert":
        cfg = T.BertConfig(**SMALL, vocab_size=256, max_position_embeddings=64)
        return T.BertForMaskedLM(cfg), {"input_ids": ids, "labels": ids}
    if name == "vit":
        cfg = T.ViTConfig(**SMALL, image_size=32, patch_size=8, num_labels=10)
        return T.ViTForImageClassification(cfg), {
            "pixel_values": torch.randn(2, 3, 32, 32),
            "labels": torch.tensor([1, 3]),
        }
    if name == "t5":
        cfg = T.T5Config(
            vocab_size=256,
            d_model=64,
            d_kv=16,
            d_ff=128,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=4,
            decoder_start_token_id=0,
            pad_token_id=0,
        )
        return T.T5ForConditionalGeneration(cfg), {"input_ids": ids, "labels": ids}
    if name == "opt":
        cfg = T.OPTConfig(
            hidden_size=64,
            num_attention_heads=4,
            num_hidden_layers=2,
            ffn_dim=128,
            vocab_size=256,
            word_embed_proj_dim=64,
            max_position_embeddings=128,
        )
        return T.OPTForCausalLM(cfg), {"input_ids": ids, "labels": ids}
    raise SystemExit(f"unknown capture {name!r}")


def _step_fn(name: str):
    torch.manual_seed(0)
    model, batch = _model(name)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train() -> None:
        out = model(**batch)
        loss = out.sum() if isinstance(out, torch.Tensor) else out.loss
        loss.backward()
        opt.step()
        opt.zero_grad()

    return train


def capture(name: str, out: Path) -> None:
    step = _step_fn(name)
    raw = out.with_suffix("")  # NAME.json
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
        with_stack=True,
        with_modules=True,
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(raw)),
    ) as prof:
        for _ in range(4):
            step()
            prof.step()
    with open(raw, "rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    raw.unlink()


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    for n in sys.argv[2:]:
        capture(n, out_dir / f"{n}.json.gz")
