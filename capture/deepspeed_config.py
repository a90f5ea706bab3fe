"""The DeepSpeed config a ``tracekit capture train`` run uses, generated from its options.

Pure data: no deepspeed import. The config is written to the output as
``logs/deepspeed_config.json`` and copied into the manifest.
"""

from __future__ import annotations


def deepspeed_config(
    *, batch_size: int, zero: int, offload: bool, dtype: str, gpu: bool, lr: float = 1e-4
) -> dict:
    """DeepSpeed config for one micro-batch of ``batch_size`` per rank per step.

    * ``zero`` -> ``zero_optimization.stage``.
    * ``offload`` -> ``offload_optimizer`` to CPU (stages 1-3) and ``offload_param`` to CPU
      (stage 3 only: DeepSpeed offloads parameters only under ZeRO-3).
    * ``dtype`` -> ``bf16.enabled``.
    * The optimizer is AdamW. On GPU hosts DeepSpeed picks its fused Adam (or its CPU Adam when
      offloading), the kernels the paper measures. On CPU hosts ``torch_adam`` selects
      ``torch.optim.AdamW`` so no C++ optimizer op has to be compiled before the first step.
    """
    if zero not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage must be 0-3, got {zero}")
    if offload and zero == 0:
        raise ValueError("offload needs ZeRO stage 1, 2 or 3")
    optimizer_params: dict = {"lr": lr, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.0}
    if not gpu:
        optimizer_params["torch_adam"] = True
    zero_section: dict = {"stage": zero}
    if zero >= 1:
        zero_section.update({"overlap_comm": gpu, "contiguous_gradients": True})
    if offload:
        zero_section["offload_optimizer"] = {"device": "cpu", "pin_memory": gpu}
        if zero == 3:
            zero_section["offload_param"] = {"device": "cpu", "pin_memory": gpu}
    config: dict = {
        "train_micro_batch_size_per_gpu": batch_size,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": "AdamW", "params": optimizer_params},
        "zero_optimization": zero_section,
        "bf16": {"enabled": dtype == "bf16"},
        "gradient_clipping": 1.0,
        "steps_per_print": 1_000_000,
        "wall_clock_breakdown": False,
    }
    if offload and not gpu:
        # ZeRO-Offload insists on DeepSpeed's CPU Adam (a C++ op built on first use); on a
        # CPU-only host the "offloaded" optimizer runs on the same CPU either way.
        config["zero_force_ds_cpu_optimizer"] = False
    return config
