"""``tracekit explain``'s perf section: the op whose model a chain's kernels belong to, its
shape, its FLOP formula, its kernels and their time, and the peak they were measured against.

:func:`section` reads the activity table of ``tracekit.pipeline.analyse`` (the ``perf_unit``
column :func:`tracekit.pipeline.flops.assign_flops` adds: which modelled op or backward node
owns each compute activity) and that step's units and peaks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .devices import Peaks


def of_chain(ev, row: pd.Series, members: pd.DataFrame) -> dict | None:
    """The section of a ``tracekit explain`` chain (``ev``: its :class:`tracekit.explain.Evidence`),
    for the file of its first activity."""
    f = int(row["file"])
    if f >= len(ev.units) or "perf_unit" not in ev.acts:
        return None
    acts = ev.acts[ev.acts["file"].to_numpy() == f]
    return section(acts, ev.units[f], ev.peaks[f], row, members[members["file"].to_numpy() == f])


def section(acts: pd.DataFrame, units, peaks: Peaks, row: pd.Series, members: pd.DataFrame) -> dict | None:
    """The perf section of a chain whose first activity is ``row`` and whose activities are
    ``members`` (rows of ``acts``, one file's); None when its op has no model."""
    from ..pipeline.peak_checks import over_peak

    unit = int(row.get("perf_unit", -1))
    model = units.model(unit) if units is not None and unit >= 0 else None
    if model is None:
        return None
    call = acts[acts["perf_unit"].to_numpy() == unit]  # a unit is one op call (or one node)
    dur = (members["end"] - members["start"]).to_numpy(np.float64)
    ideal = members["compute_ns"].to_numpy(np.float64)
    flops = float(members["flops"].sum())
    # the peak the time at peak was computed with (an fp32 GEMM on TF32 kernels: tf32's)
    peak = flops / ideal.sum() / 1e3 if np.isfinite(ideal).all() and ideal.sum() > 0 else None
    dtype = "tf32" if "dtype" in members and (members["dtype"].astype(str) == "tf32").any() else model.dtype
    return {
        "op": units.name_of(unit),
        "family": model.family,
        "dtype": model.dtype,
        "shape": model.shape,
        "formula": model.formula,
        "gflop_per_call": model.flops / 1e9,
        "gbyte_per_call": model.bytes / 1e9,
        "kernels": [
            {"name": str(n), "dur_us": float(e - s) / 1e3}
            for n, s, e in zip(call["name"], call["start"], call["end"])
        ],
        "chain": {
            "calls": float(members["op_calls"].sum()),
            "gflop": flops / 1e9,
            "kernel_ms": float(dur.sum()) / 1e6,
            "tflops": flops / dur.sum() / 1e3 if dur.sum() > 0 else None,
            "peak_pct": float(ideal.sum() / dur.sum() * 100)
            if dur.sum() > 0 and np.isfinite(ideal).all()
            else None,
            # above the peak: kept out of MFU and % of peak (tracekit.pipeline.peak_checks)
            "above_peak": bool(over_peak(ideal, dur).any()),
        },
        "peak": {
            "device": peaks.device or None,
            "matched": peaks.row or None,
            "dtype": dtype,
            "dtype_tflops": peak,
            "tbps": peaks.tbps,
            "source": peaks.source or None,
            "notice": peaks.notice or None,
        },
    }


def lines(p: dict | None, row) -> list[str]:
    """The section as text lines (``row(label, text)`` formats one)."""
    if p is None:
        return []
    c, pk = p["chain"], p["peak"]
    kernels = ", ".join(f"{k['name'][:60]} {k['dur_us']:,.1f} us" for k in p["kernels"][:4])
    more = f" (+{len(p['kernels']) - 4} more)" if len(p["kernels"]) > 4 else ""
    rate = "?" if c["tflops"] is None else f"{c['tflops']:,.3f} TFLOP/s"
    pct = "no peak" if c["peak_pct"] is None else f"{c['peak_pct']:,.1f}% of peak"
    if c.get("above_peak"):
        pct += " (above peak: not in MFU)"
    if pk["dtype_tflops"]:
        against = f"{pk['dtype_tflops']:g} TFLOP/s {pk['dtype']} ({pk['matched'] or 'given'}; {pk['source']})"
    else:
        against = pk["notice"] or f"no {p['dtype']} peak for {pk['matched'] or pk['device'] or 'this device'}"
    return [
        row("perf op", f"{p['op']} ({p['family']}, {p['dtype']}): {p['shape']}"),
        row("FLOPs", f"{p['formula']} = {p['gflop_per_call']:,.6g} GFLOP per call"),
        row("kernels", f"one call: {kernels}{more}"),
        row(
            "achieved",
            f"{c['calls']:,.4g} calls, {c['gflop']:,.6g} GFLOP in {c['kernel_ms']:,.3f} ms: {rate}, {pct}",
        ),
        row("peak", against),
    ]
