"""generate() under a profiler schedule: every step's first model pass is its prefill."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

import tracekit
from tracekit.pipeline.stages import from_passes
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_MUL

N_STEPS, N_PASSES, N_LAYERS = 2, 3, 2


def _pass(b: TraceBuilder, layers: int) -> None:
    with b.module("LlamaForCausalLM", "model_wrapper"):
        with b.module("LlamaModel", "model"):
            for i in range(layers):
                with b.module("LlamaDecoderLayer", f"model.layers.{i}"):
                    with b.module("LlamaAttention", f"model.layers.{i}.self_attn"):
                        b.kernel(GEMM_A, 4, op="aten::mm", gap_us=1)
                    with b.module("LlamaMLP", f"model.layers.{i}.mlp"):
                        b.kernel(GEMM_A, 6, op="aten::mm", gap_us=1)
        with b.module("Linear", "lm_head"):
            b.kernel(GEMM_A, 3, op="aten::mm", gap_us=1)
    b.kernel(K_MUL, 1, op="aten::argmax", gap_us=1)  # sampling, between passes


def generate_trace(path: Path) -> Path:
    """N_STEPS ProfilerSteps, each a generate(): input preparation, then N_PASSES passes."""
    b = TraceBuilder()
    for _ in range(N_STEPS):
        with b.step():
            b.kernel(K_MUL, 2, op="aten::copy_", gap_us=1)  # input preparation
            for _ in range(N_PASSES):
                _pass(b, N_LAYERS)
            b.synchronize()
        b.cpu(20)
    return b.write(path)


def test_every_step_has_its_prefill(tmp_path: Path) -> None:
    a = tracekit.load(generate_trace(tmp_path / "gen.pt.trace.json"), cache=False, jobs=1)
    iv = a.intervals
    per = iv.groupby(["step", "stage"], observed=True).size().unstack(fill_value=0)
    # per pass: 2 layers x 2 GEMMs + lm_head + sampling = 6; prefill also holds the preparation
    assert per.loc[:, "prefill"].tolist() == [1 + 6] * N_STEPS
    assert per.loc[:, "decode"].tolist() == [6 * (N_PASSES - 1)] * N_STEPS
    tl = a.table("timeline", per_step=True)
    att = tl[tl["block"] == "attention"].set_index(["step", "stage"])
    for step in (1, 2):
        assert att.loc[(step, "prefill"), "passes"] == 1
        assert att.loc[(step, "prefill"), "count"] == N_LAYERS
        assert att.loc[(step, "decode"), "passes"] == N_PASSES - 1
    mean = a.table("timeline").set_index(["stage", "block"])
    assert mean.loc[("prefill", "attention"), "count"] == N_LAYERS


def test_from_passes_resets_per_step() -> None:
    """Pass k of step 2 starts after step 1's last pass; step 2's preparation comes first."""
    mods = pd.DataFrame(
        {
            "parent": [-1, 0, -1, 2, -1, 4, -1, 6],
            "is_layer": [False, True] * 4,
            "start": [100, 110, 300, 310, 600, 610, 800, 810],
            "end": [200, 190, 400, 390, 700, 690, 900, 890],
        }
    )
    ts = np.array([50, 120, 320, 550, 620, 820])
    step = np.array([1, 1, 1, 2, 2, 2])
    out = from_passes(mods, ts, step, np.array(["forward"] * 6, dtype=object))
    assert out.tolist() == ["prefill", "prefill", "decode", "prefill", "prefill", "decode"]
