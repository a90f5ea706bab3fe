"""``tracekit capture infer --engine hf``: transformers generation with a KV cache, profiled.

One profiler step per forward: step W is the prefill (the whole prompt, then the first token is
sampled), each later step one decode (one token per sequence against the cache). Sampling is
greedy (argmax) and sits inside the step's phase range, like the LM head it follows.
"""

from __future__ import annotations

from pathlib import Path

from . import measure
from .annotate import annotate_modules, phase
from .checks import devices
from .models import build_model, model_shape
from .profiling import generation_steps, profiler


def run(spec: dict, report) -> None:
    import torch

    gpu = spec["gpu"]
    device = torch.device("cuda", 0) if gpu else torch.device("cpu")
    report(devices=devices())
    shape = model_shape(spec["model"], spec["layers"])
    model = build_model(shape, spec["attention"], spec["dtype"], seed=spec["seed"], device=device)
    model.eval()
    annotate_modules(model)

    generator = torch.Generator().manual_seed(spec["seed"] + 1000)
    prompt_shape = (spec["batch_size"], spec["prompt_len"])

    def prompt():
        return torch.randint(0, shape.vocab_size, prompt_shape, generator=generator).to(device)

    def prefill(tokens):
        out = model(input_ids=tokens, use_cache=True)
        return out.past_key_values, out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

    def decode(cache, token):
        out = model(input_ids=token, past_key_values=cache, use_cache=True)
        return out.past_key_values, out.logits[:, -1, :].argmax(dim=-1, keepdim=True)

    warmup, steps = spec["warmup"], spec["gen_len"]
    with (
        torch.inference_mode(),
        profiler(
            Path(spec["out"]),
            0,
            warmup=warmup,
            steps=steps,
            gpu=gpu,
            with_stack=spec["with_stack"],
            profile_memory=spec.get("profile_memory", False),
        ) as prof,
    ):
        # Each warm-up generation and the recorded prefill get a fresh prompt.
        generation_steps(
            prof,
            report,
            warmup=warmup,
            steps=steps,
            prefill=lambda: prefill(prompt()),
            decode=decode,
            phase=phase,
            meter=measure.StepMeter(
                cuda=measure.cuda_or_none(gpu), device=device, token=measure.infer_token()
            ),
            batch=prompt_shape,
        )
