"""Table XIII: GEMM share of compute-kernel time per phase.

* ``gemm_ms``: measure of the union of GEMM kernels (cuBLAS/cuBLASLt/CUTLASS/hipBLASLt names, by
  the kernel rules) launched by the phase's ops;
* ``compute_ms``: measure of the union of all compute kernels launched by the phase's ops;
* ``percent``: gemm_ms / compute_ms x 100.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.windows import Windows

from ._common import WINDOW_PHASES, labelled_spans, phases_present
from ._groups import unions_ms_at
from ._registry import MS, PCT, Ratio, register


@register(
    "gemm",
    title="GEMM share of compute-kernel time",
    paper="XIII",
    keys=("phase",),
    values={"gemm_ms": MS, "compute_ms": MS, "percent": PCT},
    ratios={"percent": Ratio("gemm_ms", "compute_ms")},
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    key = ["step", "phase"]
    is_compute = (intervals["group"] == "compute").to_numpy()
    compute = labelled_spans(intervals, is_compute)
    done = windows.steps["step"].to_numpy()
    idx = pd.MultiIndex.from_product([done, phases_present(intervals, windows)], names=key)
    gemm = intervals["is_gemm"].to_numpy(bool)[is_compute]
    g, t = unions_ms_at(compute, key, list(idx), [gemm, np.ones(len(compute), bool)])
    out = pd.DataFrame(
        {
            "step": idx.get_level_values(0),
            "phase": idx.get_level_values(1),
            "gemm_ms": g,
            "compute_ms": t,
        }
    )
    out["phase"] = pd.Categorical(out["phase"], categories=WINDOW_PHASES)
    return out
