"""Module rules by class and position for the common HF families (issue 12.9).

Each family plants one decoder layer as a tree of ``nn.Module`` events (class names only, as
with_stack traces record them; no qualified names) with one kernel per leaf, and checks the
Table VI row each kernel lands in. Then the same with capture's qualified names.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_ADD

# A tree node: (class, attribute name, expected row or None for "no kernel here", children).
L = "Linear"


def leaf(cls: str, attr: str, row: str) -> tuple:
    return (cls, attr, row, [])


FAMILIES = {
    "gpt2": (
        "GPT2Block",
        "transformer.h.0",
        [
            leaf("LayerNorm", "ln_1", "RMSNorm"),
            (
                "GPT2Attention",
                "attn",
                None,
                [leaf("Conv1D", "c_attn", "QKV"), leaf("Conv1D", "c_proj", "Output")],
            ),
            leaf("LayerNorm", "ln_2", "RMSNorm"),
            (
                "GPT2MLP",
                "mlp",
                None,
                [
                    leaf("Conv1D", "c_fc", "MLP"),
                    leaf("NewGELUActivation", "act", "MLP"),
                    leaf("Conv1D", "c_proj", "MLP"),
                ],
            ),
        ],
    ),
    "opt": (
        "OPTDecoderLayer",
        "model.decoder.layers.0",
        [
            leaf("LayerNorm", "self_attn_layer_norm", "RMSNorm"),
            (
                "OPTAttention",
                "self_attn",
                None,
                [
                    leaf(L, "q_proj", "QKV"),
                    leaf(L, "k_proj", "QKV"),
                    leaf(L, "v_proj", "QKV"),
                    leaf(L, "out_proj", "Output"),
                ],
            ),
            leaf("LayerNorm", "final_layer_norm", "RMSNorm"),
            leaf(L, "fc1", "MLP"),
            leaf("ReLU", "activation_fn", "MLP"),
            leaf(L, "fc2", "MLP"),
        ],
    ),
    "phi": (
        "PhiDecoderLayer",
        "model.layers.0",
        [
            leaf("LayerNorm", "input_layernorm", "RMSNorm"),
            (
                "PhiAttention",
                "self_attn",
                None,
                [
                    leaf(L, "q_proj", "QKV"),
                    leaf(L, "k_proj", "QKV"),
                    leaf(L, "v_proj", "QKV"),
                    leaf(L, "dense", "Output"),
                ],
            ),
            (
                "PhiMLP",
                "mlp",
                None,
                [
                    leaf(L, "fc1", "MLP"),
                    leaf("NewGELUActivation", "activation_fn", "MLP"),
                    leaf(L, "fc2", "MLP"),
                ],
            ),
        ],
    ),
    "falcon": (
        "FalconDecoderLayer",
        "transformer.h.0",
        [
            leaf("LayerNorm", "input_layernorm", "RMSNorm"),
            (
                "FalconAttention",
                "self_attention",
                None,
                [
                    leaf("FalconRotaryEmbedding", "rotary_emb", "RoPE"),
                    leaf("FalconLinear", "query_key_value", "QKV"),
                    leaf("FalconLinear", "dense", "Output"),
                ],
            ),
            (
                "FalconMLP",
                "mlp",
                None,
                [
                    leaf("FalconLinear", "dense_h_to_4h", "MLP"),
                    leaf("GELU", "act", "MLP"),
                    leaf("FalconLinear", "dense_4h_to_h", "MLP"),
                ],
            ),
        ],
    ),
    "gpt_neox": (
        "GPTNeoXLayer",
        "gpt_neox.layers.0",
        [
            leaf("LayerNorm", "input_layernorm", "RMSNorm"),
            (
                "GPTNeoXAttention",
                "attention",
                None,
                [
                    leaf("GPTNeoXRotaryEmbedding", "rotary_emb", "RoPE"),
                    leaf(L, "query_key_value", "QKV"),
                    leaf(L, "dense", "Output"),
                ],
            ),
            leaf("LayerNorm", "post_attention_layernorm", "RMSNorm"),
            ("GPTNeoXMLP", "mlp", None, [leaf(L, "dense_h_to_4h", "MLP"), leaf(L, "dense_4h_to_h", "MLP")]),
        ],
    ),
    "gemma": (
        "GemmaDecoderLayer",
        "model.layers.0",
        [
            leaf("GemmaRMSNorm", "input_layernorm", "RMSNorm"),
            (
                "GemmaAttention",
                "self_attn",
                None,
                [
                    leaf(L, "q_proj", "QKV"),
                    leaf(L, "k_proj", "QKV"),
                    leaf(L, "v_proj", "QKV"),
                    leaf(L, "o_proj", "Output"),
                ],
            ),
            leaf("GemmaRMSNorm", "post_attention_layernorm", "RMSNorm"),
            (
                "GemmaMLP",
                "mlp",
                None,
                [leaf(L, "gate_proj", "MLP"), leaf(L, "up_proj", "MLP"), leaf(L, "down_proj", "MLP")],
            ),
        ],
    ),
    "mixtral": (
        "MixtralDecoderLayer",
        "model.layers.0",
        [
            leaf("MixtralRMSNorm", "input_layernorm", "RMSNorm"),
            (
                "MixtralAttention",
                "self_attn",
                None,
                [
                    leaf(L, "q_proj", "QKV"),
                    leaf(L, "k_proj", "QKV"),
                    leaf(L, "v_proj", "QKV"),
                    leaf(L, "o_proj", "Output"),
                ],
            ),
            leaf("MixtralRMSNorm", "post_attention_layernorm", "RMSNorm"),
            (
                "MixtralSparseMoeBlock",
                "block_sparse_moe",
                None,
                [
                    leaf(L, "gate", "MoE routing"),
                    (
                        "MixtralBlockSparseTop2MLP",
                        "experts.0",
                        None,
                        [leaf(L, "w1", "MLP"), leaf(L, "w3", "MLP"), leaf(L, "w2", "MLP")],
                    ),
                ],
            ),
        ],
    ),
    # an MoE family's model class (Qwen3MoeForCausalLM) is not an MoE block: its Linear is the LM
    # head, not a router
    "qwen3_moe": (
        "Qwen3MoeForCausalLM",
        "model",
        [
            (
                "Qwen3MoeDecoderLayer",
                "model.layers.0",
                None,
                [
                    (
                        "Qwen3MoeSparseMoeBlock",
                        "mlp",
                        None,
                        [
                            leaf(L, "gate", "MoE routing"),
                            (
                                "Qwen3MoeMLP",
                                "experts.0",
                                None,
                                [
                                    leaf(L, "gate_proj", "MLP"),
                                    leaf(L, "up_proj", "MLP"),
                                    leaf(L, "down_proj", "MLP"),
                                ],
                            ),
                        ],
                    ),
                ],
            ),
            leaf("Qwen3MoeRMSNorm", "model.norm", "RMSNorm"),
            leaf(L, "lm_head", "Linear"),
        ],
    ),
    # multi-head latent attention: low-rank q and kv projections with their own norms
    "deepseek_v3": (
        "DeepseekV3DecoderLayer",
        "model.layers.0",
        [
            (
                "DeepseekV3Attention",
                "self_attn",
                None,
                [
                    leaf(L, "q_a_proj", "QKV"),
                    leaf("DeepseekV3RMSNorm", "q_a_layernorm", "RMSNorm"),
                    leaf(L, "q_b_proj", "QKV"),
                    leaf(L, "kv_a_proj_with_mqa", "QKV"),
                    leaf("DeepseekV3RMSNorm", "kv_a_layernorm", "RMSNorm"),
                    leaf(L, "kv_b_proj", "QKV"),
                    leaf(L, "o_proj", "Output"),
                ],
            ),
            (
                "DeepseekV3MoE",
                "mlp",
                None,
                [
                    leaf("DeepseekV3TopkRouter", "gate", "MoE routing"),
                    leaf("DeepseekV3NaiveMoe", "experts", "MLP"),
                ],
            ),
        ],
    ),
    # Megatron-Core with TransformerEngine: the input norms are fused into the first GEMMs
    "megatron_te": (
        "TransformerLayer",
        "decoder.layers.0",
        [
            (
                "SelfAttention",
                "self_attention",
                None,
                [
                    leaf("TELayerNormColumnParallelLinear", "linear_qkv", "QKV"),
                    leaf("TERowParallelLinear", "linear_proj", "Output"),
                ],
            ),
            (
                "MLP",
                "mlp",
                None,
                [
                    leaf("TELayerNormColumnParallelLinear", "linear_fc1", "MLP"),
                    leaf("TERowParallelLinear", "linear_fc2", "MLP"),
                ],
            ),
        ],
    ),
    # serving stacks (vLLM, SGLang): the LM head is applied inside LogitsProcessor
    "serving": (
        "Qwen3ForCausalLM",
        "model",
        [
            leaf("RMSNorm", "norm", "RMSNorm"),
            leaf("LogitsProcessor", "logits_processor", "Linear"),
        ],
    ),
    "bert": (
        "BertLayer",
        "bert.encoder.layer.0",
        [
            (
                "BertAttention",
                "attention",
                None,
                [
                    (
                        "BertSelfAttention",
                        "self",
                        None,
                        [leaf(L, "query", "QKV"), leaf(L, "key", "QKV"), leaf(L, "value", "QKV")],
                    ),
                    (
                        "BertSelfOutput",
                        "output",
                        None,
                        [leaf(L, "dense", "Output"), leaf("LayerNorm", "LayerNorm", "RMSNorm")],
                    ),
                ],
            ),
            ("BertIntermediate", "intermediate", None, [leaf(L, "dense", "MLP")]),
            (
                "BertOutput",
                "output",
                None,
                [leaf(L, "dense", "MLP"), leaf("LayerNorm", "LayerNorm", "RMSNorm")],
            ),
        ],
    ),
    # Issue 28.5: MLPs of vision, encoder and research models, outside any *DecoderLayer.
    "vit": (
        "ViTLayer",
        "vit.encoder.layer.0",
        [
            leaf("LayerNorm", "layernorm_before", "RMSNorm"),
            (
                "ViTAttention",
                "attention",
                None,
                [
                    (
                        "ViTSelfAttention",
                        "attention",
                        None,
                        [leaf(L, "query", "QKV"), leaf(L, "key", "QKV"), leaf(L, "value", "QKV")],
                    ),
                    ("ViTSelfOutput", "output", None, [leaf(L, "dense", "Output")]),
                ],
            ),
            leaf("LayerNorm", "layernorm_after", "RMSNorm"),
            ("ViTIntermediate", "intermediate", None, [leaf(L, "dense", "MLP")]),
            ("ViTOutput", "output", None, [leaf(L, "dense", "MLP")]),
        ],
    ),
    "timm_block": (
        "Block",
        "blocks.0",
        [
            leaf("LayerNorm", "norm1", "RMSNorm"),
            ("Attention", "attn", None, [leaf(L, "qkv", "QKV"), leaf(L, "proj", "Output")]),
            leaf("LayerNorm", "norm2", "RMSNorm"),
            ("Mlp", "mlp", None, [leaf(L, "fc1", "MLP"), leaf("GELU", "act", "MLP"), leaf(L, "fc2", "MLP")]),
        ],
    ),
    "nanogpt": (
        "Block",
        "transformer.h.0",
        [
            leaf("LayerNorm", "ln_1", "RMSNorm"),
            ("CausalSelfAttention", "attn", None, [leaf(L, "c_attn", "QKV"), leaf(L, "c_proj", "Output")]),
            leaf("LayerNorm", "ln_2", "RMSNorm"),
            (
                "MLP",
                "mlp",
                None,
                [leaf(L, "c_fc", "MLP"), leaf("GELU", "gelu", "MLP"), leaf(L, "c_proj", "MLP")],
            ),
        ],
    ),
    # a research model's layer: nn.MultiheadAttention and a Sequential MLP
    "sequential_mlp": (
        "TransformerLayer",
        "layers.0",
        [
            leaf("LayerNorm", "norm1", "RMSNorm"),
            leaf("MultiheadAttention", "attn", "Attention other"),
            leaf("LayerNorm", "norm2", "RMSNorm"),
            ("Sequential", "mlp", None, [leaf(L, "0", "MLP"), leaf("GELU", "1", "MLP"), leaf(L, "2", "MLP")]),
        ],
    ),
    "torch_encoder_layer": (
        "TransformerEncoderLayer",
        "encoder.layers.0",
        [
            leaf("MultiheadAttention", "self_attn", "Attention other"),
            leaf(L, "linear1", "MLP"),
            leaf(L, "linear2", "MLP"),
            leaf("LayerNorm", "norm1", "RMSNorm"),
            leaf("LayerNorm", "norm2", "RMSNorm"),
        ],
    ),
    "whisper_encoder": (
        "WhisperEncoderLayer",
        "model.encoder.layers.0",
        [
            (
                "WhisperAttention",
                "self_attn",
                None,
                [
                    leaf(L, "k_proj", "QKV"),
                    leaf(L, "v_proj", "QKV"),
                    leaf(L, "q_proj", "QKV"),
                    leaf(L, "out_proj", "Output"),
                ],
            ),
            leaf("LayerNorm", "self_attn_layer_norm", "RMSNorm"),
            leaf("GELUActivation", "activation_fn", "MLP"),
            leaf(L, "fc1", "MLP"),
            leaf(L, "fc2", "MLP"),
            leaf("LayerNorm", "final_layer_norm", "RMSNorm"),
        ],
    ),
    "t5": (
        "T5Block",
        "encoder.block.0",
        [
            (
                "T5LayerSelfAttention",
                "layer.0",
                None,
                [
                    (
                        "T5Attention",
                        "SelfAttention",
                        None,
                        [
                            leaf(L, "q", "QKV"),
                            leaf(L, "k", "QKV"),
                            leaf(L, "v", "QKV"),
                            leaf(L, "o", "Output"),
                        ],
                    ),
                    leaf("T5LayerNorm", "layer_norm", "RMSNorm"),
                ],
            ),
            (
                "T5LayerFF",
                "layer.1",
                None,
                [
                    ("T5DenseActDense", "DenseReluDense", None, [leaf(L, "wi", "MLP"), leaf(L, "wo", "MLP")]),
                    leaf("T5LayerNorm", "layer_norm", "RMSNorm"),
                ],
            ),
        ],
    ),
    # False positives: a convolutional block's Sequential (ResNet's downsample) is no MLP.
    "resnet_block": (
        "BasicBlock",
        "layer1.0",
        [
            leaf("Conv2d", "conv1", "Other"),
            ("Sequential", "downsample", None, [leaf("Conv2d", "0", "Other")]),
        ],
    ),
}


def _plant(b: TraceBuilder, node: tuple, prefix: str, want: dict, us: list[int]) -> None:
    cls, attr, row, children = node
    qual = f"{prefix}.{attr}" if prefix else attr
    with b.module(cls, qual):
        if row is not None:
            us[0] += 1  # distinct durations
            b.kernel(GEMM_A if cls.endswith(("Linear", "Conv1D")) else K_ADD, us[0], op="aten::mm")
            want[row] += us[0]
        for ch in children:
            _plant(b, ch, qual, want, us)


@pytest.mark.parametrize("modules", ["nn_module", "capture"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_rows(tmp_path, family, modules):
    cls, qual, children = FAMILIES[family]
    want: dict[str, float] = defaultdict(float)
    b = TraceBuilder(modules=modules)
    with b.step():
        _plant(b, (cls, qual, None, children), "", want, [0])
    a = tracekit.load(b.write(tmp_path / "rank0.pt.trace.json"), cache=False)
    got = {
        r["module"]: r["time_ms"]
        for r in a.table("modules").to_dict("records")
        if r["phase"] == "forward" and r["time_ms"] > 0 and r["module"] != "Idle"
    }
    assert got == pytest.approx({k: v / 1000 for k, v in want.items()})
