"""LoRA and QLoRA fine-tuning setups (PEFT; bitsandbytes 4-bit for QLoRA)."""

from __future__ import annotations

import importlib.util

from .errors import MISSING_DEPENDENCY, NO_GPU, CaptureError

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_RANK = 16
LORA_ALPHA = 32
# PEFT wraps the model as PeftModel(base_model=LoraModel(model=LlamaForCausalLM)).
PEFT_PREFIXES = ("base_model.model.",)


def check(mode: str | None, gpu: bool) -> None:
    """Stop early with one line when ``mode`` ("lora"/"qlora") cannot run on this host."""
    if mode is None:
        return
    if mode == "qlora":
        if not gpu:
            raise CaptureError(
                "--qlora needs a CUDA GPU (bitsandbytes 4-bit kernels); none is visible", NO_GPU
            )
        if importlib.util.find_spec("bitsandbytes") is None:
            raise CaptureError(
                "--qlora needs the bitsandbytes package (pip install bitsandbytes)", MISSING_DEPENDENCY
            )
    if importlib.util.find_spec("peft") is None:
        raise CaptureError(f"--{mode} needs the peft package (pip install peft)", MISSING_DEPENDENCY)


def quantize_4bit(model, dtype):
    """Replace the decoder's nn.Linear layers (not the LM head) by bitsandbytes NF4 layers.

    The model has random weights already; each Linear4bit takes them and quantizes them when it
    moves to the GPU, as loading a checkpoint with ``load_in_4bit`` would.
    """
    import bitsandbytes as bnb
    import torch

    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            qualified = f"{parent_name}.{child_name}" if parent_name else child_name
            if not isinstance(child, torch.nn.Linear) or qualified.endswith("lm_head"):
                continue
            q = bnb.nn.Linear4bit(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                compute_dtype=dtype,
                quant_type="nf4",
                device="meta",
            )
            q.weight = bnb.nn.Params4bit(child.weight.data.to("cpu"), requires_grad=False, quant_type="nf4")
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(parent, child_name, q)
    return model.cuda()


def apply(model, mode: str | None, dtype):
    """``model`` set up for ``mode``: None (full training), "lora" or "qlora"."""
    if mode is None:
        return model
    from peft import LoraConfig, get_peft_model

    if mode == "qlora":
        from peft import prepare_model_for_kbit_training

        model = quantize_4bit(model, dtype)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    config = LoraConfig(
        r=LORA_RANK,
        lora_alpha=LORA_ALPHA,
        lora_dropout=0.0,
        target_modules=LORA_TARGETS,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)
