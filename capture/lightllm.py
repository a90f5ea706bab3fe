"""``tracekit capture infer --engine lightllm``: LightLLM's Llama inference, profiled and annotated.

Written against LightLLM's model API as its own static-inference benchmark uses it
(``test/benchmark/static_inference/model_infer.py``, ModelTC/lightllm at fc72ffa, 2025-07):
``get_model(config, kvargs)`` builds a ``LlamaTpPartModel`` whose ``forward(ModelInput)`` runs a
prefill (``is_prefill=True``) or a decode step against LightLLM's token KV cache. Random weights
go in through the ``weight_dict`` kvarg (the HF tensor names), so nothing is downloaded; only
the model's config.json is written (under ``logs/lightllm_model``), because LightLLM reads it.

LightLLM's layers are not nn.Modules, so tracekit wraps the per-layer methods of the layer
objects with the module ranges an HF Llama would have (see ``annotate``). CUDA graphs are off:
a replayed graph runs no Python and would carry no ranges.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from . import measure
from .annotate import annotated_call, phase
from .errors import MISSING_DEPENDENCY, CaptureError
from .models import build_model, model_shape
from .profiling import WARMUP_DECODES, generation_steps, profiler


def check() -> None:
    """One line when LightLLM (or the Triton it runs on) is missing."""
    for package, what in (
        ("lightllm", "LightLLM (https://github.com/ModelTC/lightllm)"),
        ("triton", "Triton"),
    ):
        if importlib.util.find_spec(package) is None:
            raise CaptureError(
                f"--engine lightllm needs {what}, which is not installed here (use --engine hf)",
                MISSING_DEPENDENCY,
            )


def _wrap(obj, method: str, class_name: str, qualified: str) -> bool:
    fn = getattr(obj, method, None)
    if fn is None:
        return False
    setattr(obj, method, annotated_call(fn, class_name, qualified))
    return True


def _attention_range(layer, index: int) -> None:
    """One ``LlamaAttention`` range per layer call, from the KV buffer set-up (or the QKV
    projection) to the output projection: LightLLM has no single attention function, so the
    range opens on entry of the first and closes on return of the last (same thread, in order)."""
    from torch.profiler import record_function

    from tracekit.annotations import module_range

    name = module_range("LlamaAttention", f"model.layers.{index}.self_attn")
    opener = "_pre_cache_kv" if hasattr(layer, "_pre_cache_kv") else "_get_qkv"
    open_ranges: list = []
    first, last = getattr(layer, opener), layer._get_o

    def opened(*args, **kwargs):
        rf = record_function(name)
        rf.__enter__()
        open_ranges.append(rf)
        return first(*args, **kwargs)

    def closed(*args, **kwargs):
        try:
            return last(*args, **kwargs)
        finally:
            if open_ranges:
                open_ranges.pop().__exit__(None, None, None)

    setattr(layer, opener, opened)
    layer._get_o = closed


def annotate(model) -> None:
    """Module ranges on LightLLM's layer objects, named as the HF Llama modules they stand for."""
    for method in ("context_forward", "token_forward", "tpsp_context_forward", "tpsp_token_forward"):
        _wrap(model.pre_infer, method, "Embedding", "model.embed_tokens")
        _wrap(model.post_infer, method, "Linear", "lm_head")
    _wrap(model.post_infer, "_norm", "LlamaRMSNorm", "model.norm")
    for i, layer in enumerate(model.layers_infer):
        prefix = f"model.layers.{i}"
        for method in ("context_forward", "token_forward", "tpsp_context_forward", "tpsp_token_forward"):
            _wrap(layer, method, "LlamaDecoderLayer", prefix)
        _attention_range(layer, i)
        _wrap(layer, "_att_norm", "LlamaRMSNorm", f"{prefix}.input_layernorm")
        _wrap(layer, "_get_qkv", "Linear", f"{prefix}.self_attn.qkv_proj")
        _wrap(layer, "_tpsp_get_qkv", "Linear", f"{prefix}.self_attn.qkv_proj")
        _wrap(layer, "_get_o", "Linear", f"{prefix}.self_attn.o_proj")
        _wrap(layer, "_tpsp_get_o", "Linear", f"{prefix}.self_attn.o_proj")
        _wrap(layer, "_ffn_norm", "LlamaRMSNorm", f"{prefix}.post_attention_layernorm")
        _wrap(layer, "_ffn", "LlamaMLP", f"{prefix}.mlp")
        _wrap(layer, "_tpsp_ffn", "LlamaMLP", f"{prefix}.mlp")


def _hf_config(shape) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "vocab_size": shape.vocab_size,
        "max_position_embeddings": shape.max_position_embeddings,
        "rms_norm_eps": shape.rms_norm_eps,
        "rope_theta": shape.rope_theta,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }


def _random_weights(shape, seed: int) -> dict:
    """HF-named random bf16 tensors (built as transformers would initialise them), on the CPU."""
    model = build_model(shape, "sdpa", "bf16", seed=seed)
    weights = {k: v.detach() for k, v in model.state_dict().items()}
    del model
    return weights


def _kvargs(args, model_dir: Path, shape, spec: dict, max_len: int) -> dict:
    """The keyword arguments of LightLLM's ``get_model``, as its static-inference benchmark
    sets them, for one rank with no tensor parallelism and no CUDA graphs."""
    from .launch import free_port

    batch = spec["batch_size"]
    return {
        "args": args,
        "nccl_host": "127.0.0.1",
        "nccl_port": free_port(),
        "data_type": "bf16",
        "rank_id": 0,
        "world_size": 1,
        "dp_size": 1,
        "weight_dir": str(model_dir),
        "weight_dict": _random_weights(shape, spec["seed"]),
        "load_way": "HF",
        "max_total_token_num": batch * (max_len + 8) * 2,
        "graph_max_len_in_batch": max_len,
        "graph_max_batch_size": batch,
        "mem_fraction": 0.8,
        "max_req_num": 2 * batch + 8,
        "batch_max_tokens": max(batch * spec["prompt_len"], max_len),
        "run_mode": "normal",
        "max_seq_length": max_len,
        "disable_cudagraph": True,
    }


def _build(spec: dict, shape):
    """LightLLM's Llama with random weights (only config.json is written, under logs/)."""
    from lightllm.distributed import dist_group_manager
    from lightllm.models import get_model
    from lightllm.server.api_cli import make_argument_parser
    from lightllm.utils.dist_utils import init_distributed_env
    from lightllm.utils.envs_utils import set_env_start_args

    model_dir = Path(spec["out"]) / "logs" / "lightllm_model"
    model_dir.mkdir(parents=True, exist_ok=True)
    config = _hf_config(shape)
    (model_dir / "config.json").write_text(json.dumps(config, indent=2))
    max_len = spec["prompt_len"] + spec["gen_len"] + WARMUP_DECODES
    args = make_argument_parser().parse_args(
        ["--model_dir", str(model_dir), "--tp", "1", "--data_type", "bf16", "--disable_cudagraph"]
        + ["--max_req_total_len", str(max_len)]
    )
    set_env_start_args(args)
    kvargs = _kvargs(args, model_dir, shape, spec, max_len)
    init_distributed_env(kvargs)
    dist_group_manager.create_groups(group_size=1)
    try:
        model, _ = get_model(config, kvargs)
    except Exception as err:
        raise CaptureError(f"LightLLM could not build the model: {type(err).__name__}: {err}") from err
    annotate(model)
    return model


class _Requests:
    """A batch of requests against LightLLM's token KV cache: prefill, decode steps, release."""

    def __init__(self, model, spec: dict, vocab_size: int) -> None:
        import torch

        self.model, self.vocab_size = model, vocab_size
        self.batch, self.prompt_len = spec["batch_size"], spec["prompt_len"]
        self.generator = torch.Generator().manual_seed(spec["seed"] + 1000)

    def prefill(self):
        import torch
        from lightllm.common.basemodel.batch_objs import ModelInput

        batch, prompt_len, model = self.batch, self.prompt_len, self.model
        n = batch * prompt_len
        tokens = torch.randint(0, self.vocab_size, (n,), generator=self.generator).cuda()
        req = torch.tensor(
            [model.req_manager.alloc() for _ in range(batch)], dtype=torch.int32, device="cuda"
        )
        seq_len = torch.full((batch,), prompt_len, dtype=torch.int32, device="cuda")
        ready = torch.zeros(batch, dtype=torch.int32, device="cuda")
        mem = model.req_manager.mem_manager.alloc(tokens.shape[0]).cuda()
        logits = model.forward(
            ModelInput(
                batch, n, prompt_len, tokens, mem, req, seq_len, is_prefill=True, b_ready_cache_len=ready
            )
        ).logits
        state = {"req": req, "seq_len": seq_len, "total": n, "max_len": prompt_len}
        return state, torch.argmax(logits, dim=-1, keepdim=True)

    def decode(self, state, token):
        import torch
        from lightllm.common.basemodel.batch_objs import ModelInput

        state["seq_len"] += 1
        state["total"] += self.batch
        state["max_len"] += 1
        mem = self.model.req_manager.mem_manager.alloc(self.batch).cuda()
        step = ModelInput(
            self.batch,
            state["total"],
            state["max_len"],
            token.view(-1),
            mem,
            state["req"],
            state["seq_len"],
            is_prefill=False,
        )
        logits = self.model.forward(step).logits
        return state, torch.argmax(logits, dim=-1, keepdim=True)

    def release(self) -> None:
        self.model.req_manager.free_all()
        self.model.mem_manager.free_all()


def run(spec: dict, report) -> None:
    """Profile ``gen_len`` generation steps (a prefill, then decodes) after the warm-up."""
    import torch
    import torch.distributed as dist

    from .checks import devices

    report(devices=devices())
    shape = model_shape(spec["model"], spec["layers"])
    requests = _Requests(_build(spec, shape), spec, shape.vocab_size)
    warmup, steps = spec["warmup"], spec["gen_len"]
    out = Path(spec["out"])
    with (
        torch.no_grad(),
        profiler(
            out,
            0,
            warmup=warmup,
            steps=steps,
            gpu=True,
            with_stack=spec["with_stack"],
            profile_memory=spec.get("profile_memory", False),
        ) as prof,
    ):
        generation_steps(
            prof,
            report,
            warmup=warmup,
            steps=steps,
            prefill=requests.prefill,
            decode=requests.decode,
            phase=phase,
            meter=measure.StepMeter(
                cuda=torch.cuda, device=torch.device("cuda", 0), token=measure.infer_token()
            ),
            batch=(spec["batch_size"], spec["prompt_len"]),
            after_warmup=requests.release,
        )
    requests.release()
    dist.destroy_process_group()
