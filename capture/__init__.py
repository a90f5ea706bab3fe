"""tracekit's capture layer: profiled DeepSpeed Llama 2 training steps and LLM inference steps.

Installed as ``tracekit.capture``. Nothing here imports torch, deepspeed or transformers at
module import time: those are imported inside the functions that run a capture, so the analysis
side (and ``tracekit --help``) never pays for them. See docs/capture.md.

Takes in: a model and workload description (``tracekit capture train | infer | sweep`` and
their options). Gives out: a run directory of per-rank profiler traces annotated for tracekit
(:mod:`tracekit.annotations`) with its ``manifest.json``. Open first:
:mod:`tracekit.capture.cli` (the commands), then :mod:`~tracekit.capture.launch` (processes per
rank) and :mod:`~tracekit.capture.worker` (what one rank runs: train, infer or lightllm).
"""
