"""The logic of ``tracekit capture sweep`` without running a capture: the largest-batch search,
method names, rows from what a capture returned or why it could not run, relative throughput,
the paper's values, and what is written and shown. Runs of real captures: tests/test_capture_sweep.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tracekit.capture import methods, output, runs, sweep, sweep_report
from tracekit.capture.batch_search import largest_fitting
from tracekit.capture.errors import MISSING_DEPENDENCY, NO_GPU, OOM, CaptureError
from tracekit.capture.options import Common

from tracekit import paper

# --- the largest batch that fits: doubling, then bisection ----------------------------------------


def _search(limit: int, start: int = 1, cap: int = 1024):
    asked: list[int] = []

    def fits(batch: int) -> bool:
        asked.append(batch)
        return batch <= limit

    return largest_fitting(fits, start=start, cap=cap), asked


def test_doubles_until_a_batch_does_not_fit_then_bisects():
    found, asked = _search(37)
    assert found.best == 37 and not found.capped
    assert asked == [1, 2, 4, 8, 16, 32, 64, 48, 40, 36, 38, 37]
    assert found.probes == [(b, b <= 37) for b in asked]


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 17, 64, 100, 1000])
def test_finds_every_limit_trying_each_batch_once_within_the_bound(limit):
    found, asked = _search(limit, cap=1024)
    assert found.best == limit
    assert len(asked) == len(set(asked)) <= 2 * math.log2(1024) + 1


def test_nothing_fits_and_the_cap_bound_it():
    assert _search(0)[0].best == 0 and _search(0)[1] == [1]
    found, asked = _search(10**6, cap=100)
    assert found.best == 100 and found.capped and asked == [1, 2, 4, 8, 16, 32, 64, 100]
    found, asked = _search(10, start=3, cap=100)
    assert found.best == 10 and asked[:3] == [3, 6, 12]
    with pytest.raises(ValueError):
        largest_fitting(lambda b: True, start=8, cap=4)


# --- methods ---------------------------------------------------------------------------------------


def test_methods_parse_to_captures_and_the_papers_labels():
    ms = methods.parse_methods("naive, zero3+offload+recompute,lora+flash+recompute+zero2+offload,offload")
    assert [m.name for m in ms] == [
        "naive",
        "zero3+offload+recompute",
        "lora+flash+recompute+zero2+offload",
        "offload",
    ]
    assert [m.label for m in ms] == ["Naive", "R+Z3+O", "L+F+R+Z2+O", "Z2+O"]
    t = ms[1].train(runs.Train(seq_len=64, steps=2))
    assert (t.zero, t.offload, t.recompute, t.finetune, t.seq_len, t.steps) == (3, True, True, None, 64, 2)
    assert ms[3].train(runs.Train()).zero == 2  # offload alone runs on ZeRO-2, as the paper's Z2+O
    assert ms[2].options() == ["--zero=2", "--offload", "--recompute", "--lora", "--attention=flash"]
    assert ms[2].attention("sdpa") == "flash" and ms[0].attention("eager") == "eager"
    assert [m.name for m in methods.parse_methods("zero2,zero2,qlora")] == ["zero2", "qlora"]


@pytest.mark.parametrize(
    "text, needle",
    [
        ("zero4", "unknown method 'zero4'"),
        ("naive+zero2", "naive stands alone"),
        ("zero2+zero3", "both zero2 and zero3"),
        ("lora+qlora", "both lora and qlora"),
        (" , ", "names no method"),
    ],
)
def test_bad_method_names_are_one_line_errors(text, needle):
    with pytest.raises(CaptureError) as err:
        methods.parse_methods(text)
    assert needle in err.value.format_message() and "\n" not in err.value.format_message()


# --- rows from a capture's result ------------------------------------------------------------------


def _settings(tmp_path: Path, **kw) -> sweep.Settings:
    c = Common("tiny", None, 1, "sdpa", None, 1, True, 0, tmp_path, True)
    return sweep.Settings(c, runs.Train(seq_len=32, steps=1), **kw)


def _manifest(tokens_per_s: float, peak_mb: float) -> dict:
    step = 1e3 * 32 / tokens_per_s
    job = {"steps": 1, "step_ms": step, "tokens_per_s": tokens_per_s}
    job |= {"step_median_ms": step, "step_min_ms": 0.9 * step, "step_max_ms": 1.2 * step}
    job |= {"samples_per_s": tokens_per_s / 32, "peak_mem_mb": peak_mb, "peak_rss_mb": peak_mb}
    return {"measures": {"job": job | {"peak_mem_source": "VmHWM", "ranks": 1}}}


class FakeRunner:
    """``runs.run_train`` stand-in: checks what the real one checks (or raises ``errors[m]``),
    writes a manifest, and returns figures from ``figures(c, t)``."""

    def __init__(self, figures, errors=None, check=False):
        self.figures, self.errors, self.check, self.calls = figures, errors or {}, check, []

    def __call__(self, c, t, *, argv, echo, memory_limit_mb, written_by="tracekit capture train"):
        self.calls.append((c, t, argv))
        if self.check:
            runs.check_train(c, t)
        name = c.out.name if not c.out.name.startswith("batch") else c.out.parent.name
        if name in self.errors:
            raise self.errors[name]
        c.out.mkdir(parents=True, exist_ok=True)
        result = self.figures(c, t)
        output.write_json(c.out / output.MANIFEST, result)
        return result


def test_a_method_that_cannot_run_is_a_row_with_its_reason_and_the_sweep_goes_on(tmp_path):
    runner = FakeRunner(
        lambda c, t: _manifest(2000.0 if t.zero else 4000.0, 500.0),
        errors={
            "qlora": CaptureError(
                "--qlora needs a CUDA GPU (bitsandbytes 4-bit kernels); none is visible", NO_GPU
            ),
            "lora": CaptureError("--lora needs the peft package (pip install peft)", MISSING_DEPENDENCY),
            "recompute": RuntimeError("something nobody foresaw\nwith a second line"),
            "zero3": CaptureError("capture failed on rank 0: OutOfMemoryError: CUDA out of memory", OOM),
        },
    )
    echoed: list[str] = []
    ms = methods.parse_methods("qlora,lora,naive,recompute,zero3,zero2")
    doc = sweep.run_sweep(_settings(tmp_path), ms, ["tracekit", "capture", "sweep"], echoed.append, runner)
    rows = {r["method"]: r for r in doc["rows"]}
    assert [r["method"] for r in doc["rows"]] == [m.name for m in ms]
    assert echoed[:2] == ["[1/6] qlora (QL)", "    no-gpu: " + rows["qlora"]["reason"]]
    assert echoed[5].startswith("    ok: 4,000.0 tokens/s, peak 500.0 MiB")
    assert rows["qlora"]["status"] == "no-gpu" and "CUDA GPU" in rows["qlora"]["reason"]
    assert rows["lora"]["status"] == "missing-dependency" and "peft" in rows["lora"]["reason"]
    assert (
        rows["recompute"]["status"] == "error"
        and rows["recompute"]["reason"] == "RuntimeError: something nobody foresaw"
    )
    assert rows["zero3"]["status"] == "oom"
    assert rows["naive"]["status"] == "ok" and rows["naive"]["relative_throughput"] == 1.0
    assert rows["zero2"]["relative_throughput"] == 0.5 and rows["zero2"]["peak_mem_mb"] == 500.0
    assert doc["baseline"] == "naive" and rows["qlora"]["out"] is None and rows["zero2"]["out"] == "zero2"
    for r in doc["rows"]:
        assert list(r)[:8] == [
            "method",
            "label",
            "status",
            "reason",
            "step_ms",
            "tokens_per_s",
            "samples_per_s",
            "peak_mem_mb",
        ]
    on_disk = json.loads((tmp_path / "sweep.json").read_text())
    assert [r["status"] for r in on_disk["rows"]] == [
        "no-gpu",
        "missing-dependency",
        "ok",
        "error",
        "oom",
        "ok",
    ]
    assert (tmp_path / "sweep.md").read_text().count("\n| ") == len(ms) + 1
    assert "argv" not in on_disk and on_disk["units"]["tokens_per_s"] == "tokens/s"
    # each capture is the one `tracekit capture train` would make, and its manifest says that command
    c, t, argv = runner.calls[-1]
    assert (
        argv[:3] == ["tracekit", "capture", "train"]
        and "--zero=2" in argv
        and f"--out={tmp_path / 'zero2'}" in argv
    )
    assert c.out == tmp_path / "zero2" and t.zero == 2 and t.seq_len == 32


def test_without_naive_the_first_method_that_ran_is_the_baseline():
    rows = [
        {"method": "qlora", "status": "no-gpu", "tokens_per_s": None, "peak_mem_mb": None},
        {"method": "zero2", "status": "ok", "tokens_per_s": 100.0, "peak_mem_mb": 50.0},
        {"method": "zero3", "status": "ok", "tokens_per_s": 50.0, "peak_mem_mb": 25.0},
    ]
    assert sweep_report.relative(rows) == "zero2"
    assert [r["relative_throughput"] for r in rows] == [None, 1.0, 0.5]
    assert [r["relative_memory"] for r in rows] == [None, 1.0, 0.5]


def test_a_run_over_the_memory_limit_does_not_fit(tmp_path):
    runner = FakeRunner(lambda c, t: _manifest(1000.0, 700.0))
    row = sweep.capture_method(
        _settings(tmp_path, memory_limit_mb=600), methods.parse_method("naive"), 1, tmp_path / "naive", runner
    )
    assert row["status"] == "oom" and "over --memory-limit 600 MiB" in row["reason"]


def test_max_batch_keeps_the_largest_fitting_capture_and_every_probe(tmp_path):
    runner = FakeRunner(lambda c, t: _manifest(100.0 * c.batch_size, 100.0 * c.batch_size))
    s = _settings(tmp_path, memory_limit_mb=1000, max_batch=True, batch_cap=64)
    row = sweep.largest(s, methods.parse_method("zero2"), tmp_path, runner)
    assert row["status"] == "ok" and row["batch_size"] == 10 and row["tokens_per_s"] == 1000.0
    assert [p["batch_size"] for p in row["probes"]] == [1, 2, 4, 8, 16, 12, 10, 11]
    assert [p["fits"] for p in row["probes"]] == [True, True, True, True, False, False, True, False]
    assert (tmp_path / "zero2" / output.MANIFEST).is_file()  # the capture at batch 10
    assert not (tmp_path / "probes" / "zero2" / "batch10").exists()
    assert (tmp_path / "probes" / "zero2" / "batch16" / output.MANIFEST).is_file()


def test_max_batch_stops_at_a_method_that_cannot_run(tmp_path):
    runner = FakeRunner(lambda c, t: _manifest(1.0, 1.0), errors={"flash": CaptureError("no GPU", NO_GPU)})
    s = _settings(tmp_path, memory_limit_mb=1000, max_batch=True)
    row = sweep.largest(s, methods.parse_method("flash"), tmp_path, runner)
    assert row["status"] == "no-gpu" and len(runner.calls) == 1


def test_the_sweep_directory_is_never_someone_elses(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CaptureError, match="not empty"):
        sweep.prepare(tmp_path, force=False)
    with pytest.raises(CaptureError, match="did not write"):
        sweep.prepare(tmp_path, force=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


# --- the paper's values and what a person reads -----------------------------------------------------


def test_paper_values_match_parts_in_any_order():
    assert paper.cost("Z3+O", "III") == {"tokens_per_s": 271.8, "std": 0.0, "memory_gb": 10.4}
    assert paper.cost("F+R", "III") == paper.cost("R+F", "III")  # printed as R+F
    assert paper.cost("R", "IV")["batch_size"] == 64
    assert paper.cost("L+F+R+Z3", "IX", "13B")["tokens_per_s"] == 1912.9
    assert paper.cost("Naive", "III", platform="RTX4090") is None  # printed '-': out of memory
    assert paper.cost("Naive", "III", "13B") is None  # no such row
    tables = paper.paper_costs()["tables"]
    assert [r["tokens_per_s"] for r in tables["II"]["rows"] if r["framework"] == "DeepSpeed"] == [
        7488.0,
        19348.0,
    ]


def test_markdown_and_terminal_show_every_method(tmp_path):
    runner = FakeRunner(
        lambda c, t: _manifest(3000.0, 450.0), errors={"qlora": CaptureError("needs a CUDA GPU", NO_GPU)}
    )
    ms = methods.parse_methods("naive,zero3+offload,qlora")
    doc = sweep.run_sweep(_settings(tmp_path, paper=True), ms, ["x"], lambda line: None, runner)
    md = (tmp_path / "sweep.md").read_text()
    assert "| Method | Step ms (median) | min-max | Tokens/s | M (MiB) | vs naive |" in md
    assert "| Naive | 10.7 | 9.6-12.8 | 3,000.0 | 450.0 | 1.00 | 7,488.3 | 66.7 | 1.00 | III | ok |" in md
    assert "| Z3+O | 10.7 | 9.6-12.8 | 3,000.0 | 450.0 | 1.00 | 271.8 | 10.4 | 0.04 | III | ok |" in md
    assert "| QL | - | - | - | - | - | 7,631.2 | 13.7 | 1.02 | IX | no-gpu: needs a CUDA GPU |" in md
    assert doc["paper"]["model"] == "Llama2-7B" and doc["rows"][2]["paper"]["table"] == "IX"
    doc["rows"][2]["reason"] = "needs a CUDA GPU " + "and a long explanation " * 8
    lines = sweep_report.terminal_lines(doc, 80)
    assert all(len(ln) <= 80 for ln in lines), lines
    assert lines[0].split() == [
        "method",
        "status",
        "step",
        "ms",
        "min-max",
        "tokens/s",
        "peak",
        "MiB",
        "vs",
        "base",
    ]
    assert lines[1].split()[:4] == ["Naive", "ok", "10.7", "9.6-12.8"]
    assert lines[3].split() == ["QL", "no-gpu", "-", "-", "-", "-", "-"]
    assert lines[4].startswith("qlora: needs a CUDA GPU") and lines[5].startswith("    ")
