"""tracekit's capture layer: profiled DeepSpeed Llama 2 training steps and LLM inference steps.

Installed as ``tracekit.capture``. Nothing here imports torch, deepspeed or transformers at
module import time: those are imported inside the functions that run a capture, so the analysis
side (and ``tracekit --help``) never pays for them. See docs/capture.md.
"""
