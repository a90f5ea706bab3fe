"""``--module`` names module categories (issue 14 "Filters"): the exact name first, a unique
prefix or substring otherwise, several only as a comma list, and an unknown or ambiguous name
is a one-line error naming the choices. The output says which categories were selected."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_traces import SHARED

import tracekit
from tracekit.cli import main
from tracekit.filters import FilterError, Filters, known_categories, select_modules
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_B, K_FLASH_FWD, K_MUL

KNOWN = known_categories()


@pytest.mark.parametrize(
    "text, chosen",
    [
        ("attention", ("Attention",)),  # exact beats the prefix of "Attention other"
        ("ATTENTION OTHER", ("Attention other",)),
        ("rms", ("RMSNorm",)),  # unique prefix
        ("norm", ("RMSNorm",)),  # unique substring
        ("bmm0, softmax,bmm1", ("Bmm0", "Softmax", "Bmm1")),
        ("attention,attention other", ("Attention", "Attention other")),
        ("mlp,MLP", ("MLP",)),
    ],
)
def test_module_names_select_categories(text, chosen):
    assert select_modules(text, KNOWN) == chosen


@pytest.mark.parametrize(
    "text, message",
    [
        ("att", "'att' matches Attention, Attention other: name one, or several separated by commas"),
        ("bmm", "'bmm' matches Bmm0, Bmm1"),
        ("attn", "'attn': no such module category; known: Embedding, QKV, RoPE, Bmm0"),
        (" , ", "name a module category"),
    ],
)
def test_unknown_or_ambiguous_names_fail(text, message):
    with pytest.raises(FilterError, match=message.replace("(", r"\(")) as e:
        select_modules(text, KNOWN)
    assert "\n" not in str(e.value)


def test_a_users_category_is_known():
    assert select_modules("lora", known_categories(["LoRA adapter", "MLP", ""])) == ("LoRA adapter",)


def _attention_step(b: TraceBuilder) -> None:
    """Layer 0: q_proj GEMM 12-16 (QKV), the attention block's own mul 18-19 (Attention
    other), flash attention 20-26 (Attention), MLP GEMM 30-38."""
    with b.step():
        with b.module("LlamaDecoderLayer", "model.layers.0"):
            with b.module("LlamaAttention", "model.layers.0.self_attn"):
                with b.module("Linear", "model.layers.0.self_attn.q_proj"):
                    b.kernel(GEMM_A, 4, op="aten::mm", at_us=12)
                b.kernel(K_MUL, 1, op="aten::mul", at_us=18)
                b.kernel(K_FLASH_FWD, 6, op="aten::_flash_attention_forward", at_us=20)
            with b.module("LlamaMLP", "model.layers.0.mlp"):
                b.kernel(GEMM_B, 8, op="aten::mm", at_us=30)


def test_attention_selects_only_attention(tmp_path: Path):
    b = TraceBuilder(modules="both")
    _attention_step(b)
    a = tracekit.load(b.write(tmp_path / "t.pt.trace.json"), cache=False, jobs=1)
    whole = a.table("modules").groupby("module", observed=True)["time_ms"].sum()
    assert whole["Attention other"] == pytest.approx(0.001) and whole["Attention"] == pytest.approx(0.006)
    assert whole["QKV"] == pytest.approx(0.004)
    f = a.filtered(Filters(module="attention"))
    t = f.table("modules")
    assert set(t["module"].astype(str)) == {"Attention"} and t["time_ms"].sum() == pytest.approx(0.006)
    assert set(f.table("top_kernels")["module"]) == {"Attention"}
    assert f.meta["filters"]["module"] == ["Attention"]
    both = a.filtered(Filters(module="attention, attention other"))
    assert both.table("modules")["time_ms"].sum() == pytest.approx(0.007)
    assert both.meta["filters"]["module"] == ["Attention", "Attention other"]


def test_cli_prints_the_selection_and_fails_in_one_line(tmp_path: Path):
    b = TraceBuilder(modules="both")
    _attention_step(b)
    path = str(b.write(tmp_path / "t.pt.trace.json"))
    r = CliRunner().invoke(main, ["analyze", path, "--module", "attention", "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "filters: module Attention (not applicable to" in r.output
    # Asked for a table the filter applies to: no other table is named as left out.
    r = CliRunner().invoke(main, ["analyze", path, "--module", "attention", "--table", "modules", "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "filters: module Attention\n" in r.output and "not applicable" not in r.output
    r = CliRunner().invoke(main, ["analyze", path, "--module", "bmm0,softmax", "--format", "md"])
    assert "- **filters**: module Bmm0 + Softmax" in r.output
    r = CliRunner().invoke(main, ["analyze", path, "--module", "att", "-j", "1"])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert lines == [
        "tracekit: error: Invalid value for --module: 'att' matches Attention, Attention other: "
        "name one, or several separated by commas"
    ]


@pytest.mark.shared
def test_real_trace_attention_is_not_its_glue():
    """TraceLens's B200 eager trace: 0.649 ms of fused attention and 0.225 ms of the attention
    block's glue per step; ``attention`` keeps only the former."""
    src = SHARED / "tracelens" / "b200__eager_trace.json.gz"
    if not src.is_file():
        pytest.skip(f"shared traces not found at {SHARED}")
    a = tracekit.load(src, cache=False, jobs=1)
    whole = a.table("modules").groupby("module", observed=True)["time_ms"].sum()
    f = a.filtered(Filters(module="attention")).table("modules")
    assert set(f["module"].astype(str)) == {"Attention"}
    assert f["time_ms"].sum() == pytest.approx(whole["Attention"]) and whole["Attention other"] > 0.2
