"""tracekit: where did the time of this LLM step go?

``tracekit.load(path)`` analyses a PyTorch profiler trace (or a directory of per-rank traces)
into the tables of Zhang et al., "Dissecting the Runtime Performance of the Training,
Fine-tuning, and Inference of Large Language Models". The analysis never imports torch.
"""

from .analysis import Analysis, load
from .errors import TraceError

__version__ = "0.1.0"
__all__ = ["Analysis", "TraceError", "__version__", "load"]
