"""Capture tiny HF models on CPU under torch.profiler, as a stranger would (no tracekit code):
``python hf_cpu_captures.py OUT_DIR NAME...``; writes OUT_DIR/NAME.json per capture.

Names: an architecture (llama, gpt2, opt, phi, qwen2, mistral, gemma, bloom, gpt_neox, falcon,
qwen3_moe, deepseek_v3),
optionally suffixed ``+ckpt`` (non-reentrant checkpointing), ``+ckpt_reentrant``, ``+lora``,
``+compile``, ``+zero2`` or ``+zero3`` (a DeepSpeed engine on one gloo rank); or
``llama+generate``. A name ending ``@memory`` records with ``profile_memory=True``. Random
weights from a config: nothing is downloaded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import transformers as T
from torch.profiler import ProfilerActivity, profile, schedule

SMALL = dict(
    hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=128, vocab_size=256
)
CONFIGS = {
    "llama": lambda: T.LlamaConfig(**SMALL, num_key_value_heads=2),
    "gpt2": lambda: T.GPT2Config(n_embd=64, n_head=4, n_layer=2, vocab_size=256, n_positions=128),
    "opt": lambda: T.OPTConfig(
        hidden_size=64,
        num_attention_heads=4,
        num_hidden_layers=2,
        ffn_dim=128,
        vocab_size=256,
        word_embed_proj_dim=64,
        max_position_embeddings=128,
    ),
    "phi": lambda: T.PhiConfig(**SMALL),
    "qwen2": lambda: T.Qwen2Config(**SMALL, num_key_value_heads=2),
    "mistral": lambda: T.MistralConfig(**SMALL, num_key_value_heads=2),
    "gemma": lambda: T.GemmaConfig(**SMALL, num_key_value_heads=2, head_dim=16),
    "bloom": lambda: T.BloomConfig(hidden_size=64, n_head=4, n_layer=2, vocab_size=256),
    "gpt_neox": lambda: T.GPTNeoXConfig(**SMALL),
    "falcon": lambda: T.FalconConfig(
        hidden_size=64, num_attention_heads=4, num_hidden_layers=2, vocab_size=256
    ),
    "qwen3_moe": lambda: T.Qwen3MoeConfig(
        **SMALL,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
    ),
    # multi-head latent attention (low-rank q and kv), a dense first layer, then MoE
    "deepseek_v3": lambda: T.DeepseekV3Config(
        **SMALL,
        num_key_value_heads=4,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_rope_head_dim=8,
        qk_nope_head_dim=8,
        v_head_dim=16,
        moe_intermediate_size=32,
        n_routed_experts=4,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        n_group=1,
        topk_group=1,
    ),
}


def _step_fn(name: str):
    arch, _, variant = name.partition("+")
    torch.manual_seed(0)
    model = T.AutoModelForCausalLM.from_config(CONFIGS[arch]())
    x = torch.randint(0, 256, (2, 32))
    if variant == "generate":
        model.eval()

        def generate() -> None:
            with torch.no_grad():
                model.generate(x, max_new_tokens=3, do_sample=False, pad_token_id=0)

        return generate
    if variant.startswith("ckpt"):
        model.gradient_checkpointing_enable({"use_reentrant": variant == "ckpt_reentrant"})
    if variant == "lora":
        import peft

        model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    if variant == "compile":
        model = torch.compile(model)
    if variant.startswith("zero"):
        return _deepspeed_step(model, x, int(variant[4:]))
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)

    def train() -> None:
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()

    return train


def _deepspeed_step(model, x, stage: int):
    """A DeepSpeed engine with ZeRO ``stage`` on one CPU rank (gloo), AdamW in torch."""
    import os

    import deepspeed
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    for k, v in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        os.environ.setdefault(k, v)
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    # DeepSpeed would compile its shared-memory all-reduce op (minutes); training never uses it.
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        deepspeed.ops.__compatible_ops__[builder.NAME] = False
    if not deepspeed.comm.is_initialized():
        deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
        "zero_optimization": {"stage": stage},
        "gradient_clipping": 1.0,
        "steps_per_print": 1_000_000,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    engine.train()

    def train() -> None:
        engine.backward(engine(input_ids=x, labels=x).loss)
        engine.step()

    return train


def capture(name: str, out: Path) -> None:
    name, _, memory = name.partition("@")
    step = _step_fn(name)
    step()  # warm-up outside the profiler (compilation, allocator)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        with_stack=True,
        record_shapes=True,
        profile_memory=memory == "memory",
        on_trace_ready=lambda p: p.export_chrome_trace(str(out)),
    ) as prof:
        for _ in range(4):
            step()
            prof.step()


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    for n in sys.argv[2:]:
        capture(n, out_dir / f"{n}.json")
