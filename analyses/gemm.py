"""Table XIII: GEMM share of compute-kernel time per phase.

* ``gemm_ms``: measure of the union of GEMM kernels (cuBLAS/cuBLASLt/CUTLASS/hipBLASLt names, by
  the kernel rules) launched by the phase's ops;
* ``compute_ms``: measure of the union of all compute kernels launched by the phase's ops;
* ``percent``: gemm_ms / compute_ms x 100.
"""

from __future__ import annotations

import pandas as pd

from ._common import PHASES, percent, union_ms


def table(intervals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    rows = []
    compute = intervals[intervals["group"] == "compute"]
    by = dict(tuple(compute.groupby(["step", "phase"], observed=True)))
    for step in steps.loc[steps["complete"], "step"]:
        for ph in PHASES:
            c = by.get((step, ph), compute.iloc[:0])
            g = union_ms(c[c["is_gemm"]])
            t = union_ms(c)
            rows.append({"step": step, "phase": ph, "gemm_ms": g, "compute_ms": t,
                         "percent": float(percent(g, t))})
    out = pd.DataFrame(rows, columns=["step", "phase", "gemm_ms", "compute_ms", "percent"])
    out["phase"] = pd.Categorical(out["phase"], categories=PHASES)
    return out
