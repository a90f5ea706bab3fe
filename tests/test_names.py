"""Kernel names as people read them (issue 26 item 5) and in linear time (issue 31 item 2).

* The short form of real templated names (tests/data/kernel_corpus.csv: every distinct kernel
  of the shared traces) reads as the kernel: its own name and the argument that says what it
  does, never a fragment of its parameter list (``GenericPackedTensorAccessor``, ``Array``,
  ``ReduceOp``), which is what cutting a name to 300 characters before shortening it gave.
* Shortening comes first and bounding second, the same in the terminal, HTML and Markdown;
  JSON and CSV keep the full name, the HTML report shows it as the cell's tooltip.
* :func:`tracekit.pipeline.names.head` and :func:`short_name` are linear in the name's length whatever
  the nesting: a name nested 50,000 deep costs about what a flat name of its length costs
  (the former head took minutes: it removed one level of brackets per pass).
"""

from __future__ import annotations

import csv
import json
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.pipeline.names import head, short_name
from tracekit.render.common import SHORT_CHARS, display_name
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A

CORPUS = Path(__file__).parent / "data" / "kernel_corpus.csv"
NAMES = [r["name"] for r in csv.DictReader(CORPUS.open())]
FRAGMENTS = {"GenericPackedTensorAccessor", "Array", "ReduceOp", "native", "nativ\u2026", "gpu_kernel_impl"}


def _regex_head(name: str) -> str:
    """The former head: bracket pairs removed innermost first until none is left (quadratic
    in the depth; the reference on real names)."""
    rx = re.compile(r"<[^<>]*>|\([^()]*\)")
    prev, s = None, name
    while prev != s and ("<" in s or "(" in s):
        prev, s = s, rx.sub("", s)
    parts = s.split()
    return parts[-1] if parts else name


def test_head_is_the_former_head_on_every_real_name():
    assert [head(n) for n in NAMES] == [_regex_head(n) for n in NAMES]


@pytest.mark.parametrize(
    "prefix, short",
    [
        ("void at::native::batch_norm_backward_kernel<c10::BFloat16", "batch_norm_backward_kernel<BFloat16>"),
        (
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::MeanOps",
            "reduce_kernel<MeanOps>",
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy",
            "elementwise_kernel<direct_copy_kernel_cuda>",
        ),
        (
            "void at::native::index_elementwise_kernel<128, 4, at::native::gpu_index_kernel<at::native::index_put",
            "index_elementwise_kernel<index_put_kernel_impl>",
        ),
        (
            "void at::native::elementwise_kernel_manual_unroll<128, 4, at::native::gpu_kernel_impl_nocast<at::native::(anonymous namespace)::GroupNormBackward",
            "elementwise_kernel_manual_unroll<GroupNormBackwardKernelImplInternal>",
        ),
        (
            "void split_embedding_backward_codegen_rowwise_adagrad_weighted_kernel_cta_per_row_1<float",
            "split_embedding_backward_codegen_rowwise_adagrad_weighted_kernel_cta_per_row_1",
        ),
    ],
)
def test_short_forms_of_real_templated_names(prefix, short):
    full = next(n for n in NAMES if n.startswith(prefix))
    assert len(full) > 300 or "reduce_kernel" in full  # the names that became fragments
    assert short_name(full) == short


def test_no_real_name_shortens_to_a_fragment():
    for n in NAMES:
        if "<" not in n and "::" not in n:
            continue
        s = short_name(n)
        own = head(n).rsplit("::", 1)[-1]
        assert s.startswith(own[:20]), (n[:120], s)  # the kernel's own name comes first
        assert s not in FRAGMENTS and s.split("<")[0] not in FRAGMENTS, (n[:120], s)
        shown = display_name(n, short_name)
        assert len(shown) <= SHORT_CHARS and shown.startswith(s[: SHORT_CHARS - 1]), (s, shown)


def _elapsed(fn, arg) -> float:
    t = time.perf_counter()
    fn(arg)
    return time.perf_counter() - t


@pytest.mark.parametrize("fn", [head, short_name])
def test_nesting_costs_nothing_beyond_length(fn):
    """50,000 levels of ( ) and < > against a name of the same length and brackets, one level
    deep: the same order of time (the former head: thousands of times longer). Relative, so the machine's speed
    does not matter; each call is well under a second."""
    d = 50_000
    nested = [
        "void k" + "<a" * d + ">" * d + "(int)",
        "void f" + "(" * d + "x" + ")" * d,
        "g" + "<(" * d + ")>" * d,
    ]
    for name in nested:
        flat = "void k" + "<a>(b) " * (len(name) // 7)  # as many brackets, one level deep
        base = min(_elapsed(fn, flat) for _ in range(3))
        took = min(_elapsed(fn, name) for _ in range(3))
        assert took < max(50 * base, 0.05), (fn.__name__, len(name), took, base)


def _deep_trace(tmp_path: Path) -> Path:
    b = TraceBuilder()
    with b.step():
        b.kernel("void k" + "<a(" * 50_000 + "x" + ")>" * 50_000 + "(int)", 5, op="aten::mm")
        b.kernel(GEMM_A, 5, op="aten::mm")
    return b.write(tmp_path / "deep.json")


def test_a_trace_of_names_nested_50000_deep_analyses(tmp_path):
    """issue 31 item 2: such a 0.5 MB trace gave no result after 130 s."""
    path = _deep_trace(tmp_path)
    t = time.perf_counter()
    r = CliRunner().invoke(main, ["analyze", str(path), "--no-cache", "--format", "json"])
    assert r.exit_code == 0, r.output
    names = {row["name"] for row in json.loads(r.stdout)["tables"]["top_kernels"]}
    assert any(len(n) > 250_000 for n in names)  # JSON keeps the full name
    assert time.perf_counter() - t < 120


REAL = next(n for n in NAMES if n.startswith("void at::native::batch_norm_backward_kernel<c10::BFloat16"))


@pytest.fixture(scope="module")
def long_name_trace(tmp_path_factory) -> Path:
    b = TraceBuilder()
    for _ in range(2):
        with b.step():
            b.kernel(REAL, 50, op="aten::native_batch_norm_backward")
            b.kernel(GEMM_A, 5, op="aten::mm")
    return b.write(tmp_path_factory.mktemp("names") / "t.json")


def test_every_human_output_shows_the_same_short_form(long_name_trace, tmp_path):
    short = "batch_norm_backward_kernel<BFloat16>"
    run = CliRunner()
    base = ["analyze", str(long_name_trace), "--no-cache", "--table", "top_kernels"]
    term = run.invoke(main, base, env={"COLUMNS": "160"})
    assert short in term.output and "GenericPackedTensorAccessor" not in term.output
    md = run.invoke(main, [*base, "--format", "md"])
    assert short.replace("_", "\\_").replace("<", "\\<").replace(">", "\\>") in md.output
    assert "GenericPackedTensorAccessor" not in md.output
    r = run.invoke(main, [*base, "--format", "html", "--out", str(tmp_path / "r.html")])
    page = (tmp_path / "r.html").read_text()
    assert r.exit_code == 0 and "<td title=" in page
    cell = re.search(r'<td title="([^"]*)">(batch_norm_backward_kernel&lt;BFloat16&gt;)</td>', page)
    assert cell and "GenericPackedTensorAccessor" in cell.group(1)  # the full name as tooltip
    wide = run.invoke(main, [*base, "--wide"], env={"COLUMNS": "160"})
    assert "GenericPackedTensorAccessor" in wide.output  # --wide: the full name, not cut at 300
    js = json.loads(run.invoke(main, [*base, "--format", "json"]).stdout)
    assert REAL in {row["name"] for row in js["tables"]["top_kernels"]}


def test_the_api_keeps_full_names(long_name_trace):
    top = tracekit.load(long_name_trace, cache=False, jobs=1).table("top_kernels")
    assert REAL in set(top["name"])


def test_terminal_breaks_names_between_words_and_uses_a_wide_terminal(long_name_trace):
    """At 80 columns a name breaks after ``_``/``<`` (words are never cut mid-way, and a
    category's longest word stays whole); a 200-column terminal shows a short name whole."""
    from tracekit.render.terminal import name_cap, wrap_name

    assert (
        wrap_name("batch_norm_backward_kernel<BFloat16>", 12) == "batch_norm_\nbackward_\nkernel<\nBFloat16>"
    )
    assert name_cap(80) == 28 and name_cap(200) == SHORT_CHARS
    base = ["analyze", str(long_name_trace), "--no-cache", "--table", "top_kernels"]
    narrow = CliRunner().invoke(main, base, env={"COLUMNS": "80"}).output
    assert "Normalization" in narrow and "│ batch_norm_" in narrow and "│ backward_" in narrow
    wide = CliRunner().invoke(main, base, env={"COLUMNS": "200"}).output
    assert "│ batch_norm_backward_kernel<BFloat16> " in wide
