"""Model shapes for capture: Llama 2 7B/13B/70B and a tiny model, built with random weights.

Nothing is ever downloaded: the model is built from a ``transformers.LlamaConfig``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from importlib import resources

from .errors import CaptureError


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    vocab_size: int
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def as_dict(self) -> dict:
        return asdict(self)


def _load_models() -> dict[str, ModelShape]:
    """The shapes in configs/models.json (data, so a new shape needs no code)."""
    text = resources.files("tracekit.capture.configs").joinpath("models.json").read_text()
    return {
        name: ModelShape(**fields) for name, fields in json.loads(text).items() if not name.startswith("_")
    }


# tiny, llama2-7b, llama2-13b, llama2-70b (the published Llama 2 shapes).
MODELS: dict[str, ModelShape] = _load_models()

# --attention -> transformers' attn_implementation
ATTENTION_IMPLEMENTATIONS = {"eager": "eager", "sdpa": "sdpa", "flash": "flash_attention_2"}


def model_shape(name: str, layers: int | None = None) -> ModelShape:
    """The shape called ``name``, with ``layers`` decoder layers when given."""
    if name not in MODELS:
        raise CaptureError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    shape = MODELS[name]
    if layers is not None:
        if layers < 1:
            raise CaptureError(f"--layers must be at least 1, got {layers}")
        shape = replace(shape, num_hidden_layers=layers)
    return shape


def check_sequence_length(shape: ModelShape, tokens: int, what: str) -> None:
    if tokens < 1:
        raise CaptureError(f"{what} must be at least 1, got {tokens}")
    if tokens > shape.max_position_embeddings:
        raise CaptureError(
            f"{what} of {tokens} tokens exceeds the model's {shape.max_position_embeddings} positions"
        )


def llama_config(shape: ModelShape, attention: str, dtype: str):
    """A ``transformers.LlamaConfig`` for ``shape`` (imports transformers)."""
    from transformers import LlamaConfig

    fields = shape.as_dict()
    rope_theta = fields.pop("rope_theta")
    return LlamaConfig(
        **fields,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
        hidden_act="silu",
        tie_word_embeddings=False,
        attn_implementation=ATTENTION_IMPLEMENTATIONS[attention],
        dtype=dtype_name(dtype),
    )


def dtype_name(dtype: str) -> str:
    return {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}[dtype]


def build_model(shape: ModelShape, attention: str, dtype: str, seed: int = 0, device=None):
    """A ``LlamaForCausalLM`` with random weights, created in ``dtype`` (on ``device`` when given,
    else the CPU) so a large model never exists in fp32 first. Imports torch and transformers."""
    import contextlib

    import torch
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    config = llama_config(shape, attention, dtype)
    where = torch.device(device) if device is not None else contextlib.nullcontext()
    with where:
        model = LlamaForCausalLM._from_config(config, dtype=getattr(torch, dtype_name(dtype)))
    return model
