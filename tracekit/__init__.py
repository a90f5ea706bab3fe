"""tracekit: where did the time of this LLM step go?

``tracekit.load(path)`` analyses a PyTorch profiler trace (or a directory of per-rank traces)
into the tables of Zhang et al., "Dissecting the Runtime Performance of the Training,
Fine-tuning, and Inference of Large Language Models". The analysis never imports torch.
"""

# (No ``from __future__ import annotations`` here: it would bind ``tracekit.annotations``,
# the name of a submodule.)
import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__
from .errors import TraceError

if TYPE_CHECKING:
    from .analysis import Analysis, load

__all__ = ["Analysis", "TraceError", "__version__", "load"]


if not TYPE_CHECKING:  # hidden from mypy: it would type every missing attribute as Any

    def __getattr__(name: str) -> Any:
        """``Analysis`` and ``load`` (and any submodule) are imported when first asked for: the
        analysis needs pandas, numpy and pyarrow (about nine tenths of the work of importing the
        analysis), which ``tracekit --help``, ``--version`` and ``tracekit cache`` do not."""
        if name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if name in ("Analysis", "load"):
            value = getattr(importlib.import_module(".analysis", __name__), name)
            globals()[name] = value
            return value
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
