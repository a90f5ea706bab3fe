"""The performance model: FLOPs and bytes of each op call, and the peaks of the device it ran on.

Takes in: an op's name and the JSON texts of its recorded shapes (``Input Dims``, ``Input type``,
``Concrete Inputs``, as the reader keeps them), and a trace's ``deviceProperties`` names.
Gives out: per op call an :class:`~tracekit.perf.model.OpModel` (family, FLOPs, bytes moved,
dtype, GEMM ``(batch, m, n, k)``, the formula with its numbers) or None ("unmodelled"); per
trace the matched device row (dense peak TFLOPS per dtype, memory bandwidth, its source), or
none: an unknown device is never guessed.

Open first: :mod:`tracekit.perf.ops` (which ops have a model, and :func:`~tracekit.perf.ops.model`);
then :mod:`.formulas` (one function per family), the readers (:mod:`.gemm`, :mod:`.attention`,
:mod:`.others`), :mod:`.shapes` (parsing the texts) and :mod:`.devices` (the peaks, from
``tracekit/data/devices.toml``). The pipeline step that puts the model on device activities is
:mod:`tracekit.pipeline.flops`; the formulas are written out in docs/metrics.md.
"""

from .model import FAMILIES, FLOP_FAMILIES, OpModel
from .ops import model

__all__ = ["FAMILIES", "FLOP_FAMILIES", "OpModel", "model"]
