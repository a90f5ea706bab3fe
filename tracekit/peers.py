"""Cross-checks against HolisticTraceAnalysis (the ``peers`` extra), on the same file.

HTA's temporal breakdown covers every kernel of the trace from the first kernel start to the last
kernel end (gaps between steps count as idle), and classifies memcpy/memset and communication
together as "non-compute". :func:`tracekit_like_hta` computes tracekit's numbers over that same
span from tracekit's own labelled interval table, so the two can be compared directly; the
remaining differences are classification differences, explained per trace in docs/peers.md.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from .analysis import Analysis
from .pipeline.intervals import intersection_measure, measure, union


def tracekit_like_hta(analysis: Analysis) -> dict:
    """idle / compute / non-compute (µs) and comm-compute overlap (%) over the whole span."""
    iv = analysis.intervals
    s, e = iv["start"].to_numpy(), iv["end"].to_numpy()
    if len(iv) == 0:
        return {}
    span = int(e.max() - s.min())
    busy = measure(s, e)
    comp = iv["group"].astype(str) == "compute"
    comm = iv["group"].astype(str) == "comm"
    cu = union(s[comp.to_numpy()], e[comp.to_numpy()])
    mu = union(s[comm.to_numpy()], e[comm.to_numpy()])
    compute = int((cu[1] - cu[0]).sum())
    comm_total = int((mu[1] - mu[0]).sum())
    overlap = intersection_measure(cu, mu)
    return {
        "idle_us": (span - busy) / 1e3,
        "compute_us": compute / 1e3,
        "non_compute_us": (busy - compute) / 1e3,
        "comm_comp_overlap_pct": 100.0 * overlap / comm_total if comm_total else np.nan,
    }


def hta_numbers(trace: str | Path) -> dict:
    """HTA's temporal breakdown and comm/comp overlap for one trace file (rank 0)."""
    from hta.trace_analysis import TraceAnalysis  # the peers extra

    tmp = Path(tempfile.mkdtemp(prefix="tracekit-hta-"))
    try:
        name = Path(trace).name
        shutil.copy(trace, tmp / (name if name.endswith((".json", ".json.gz")) else name + ".json"))
        ta = TraceAnalysis(trace_dir=str(tmp), include_last_profiler_step=True)
        tb = ta.get_temporal_breakdown(visualize=False).iloc[0]
        ov = ta.get_comm_comp_overlap(visualize=False)
        overlap = float(ov["comp_comm_overlap_pctg"].iloc[0]) if len(ov) else np.nan
        return {
            "idle_us": float(tb["idle_time(us)"]),
            "compute_us": float(tb["compute_time(us)"]),
            "non_compute_us": float(tb["non_compute_time(us)"]),
            "comm_comp_overlap_pct": overlap,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
