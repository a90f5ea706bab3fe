"""Tiny hand-built event frames (the columns tracekit.read.reader produces) for the pipeline's unit tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.pipeline.state import Trace
from tracekit.read.reader import (
    ANNOTATION,
    CPU_OP,
    FLOW_FWDBWD,
    KERNEL,
    MEMORY,
    PYTHON,
    RUNTIME,
    split_memory,
)

__all__ = ["ANNOTATION", "CPU_OP", "FLOW_FWDBWD", "KERNEL", "MEMORY", "PYTHON", "RUNTIME", "ev", "trace"]

_DEFAULTS = {
    "kind": KERNEL,
    "name": "",
    "pid": 1,
    "tid": 1,
    "ts": 0,
    "dur": 0,
    "flow_id": -1,
    "flow_ph": "",
    "corr": -1,
    "seq": -1,
    "fwd_tid": -1,
    "stream": -1,
    "collective": "",
    "bytes": np.nan,
    "input_dims": "",
    "input_types": "",
    "input_strides": "",
    "concrete_inputs": "",
    "device_type": -1,
    "device_id": -1,
    "total_allocated": np.nan,
    "total_reserved": np.nan,
    "addr": -1,
}
_STRINGS = ("name", "flow_ph", "collective", "input_dims", "input_types", "input_strides", "concrete_inputs")
_FLOATS = ("bytes", "total_allocated", "total_reserved")


def ev(kind: int, name: str, ts: int, dur: int, **kw) -> dict:
    """One event row; unspecified columns take read's "absent" values."""
    return {**_DEFAULTS, "kind": kind, "name": name, "ts": ts, "dur": dur, **kw}


def trace(*rows: dict) -> Trace:
    """A pipeline Trace over these events, in the given order (its MEMORY rows set apart, as
    :func:`tracekit.pipeline.link` sets them)."""
    df = pd.DataFrame(list(rows), columns=list(_DEFAULTS))
    for c in _STRINGS:
        df[c] = pd.Categorical(df[c].astype(str))
    for c in df.columns:
        if c not in (*_STRINGS, *_FLOATS):
            df[c] = df[c].astype(np.int64)
    df["kind"] = df["kind"].astype(np.int8)
    for c in _FLOATS:
        df[c] = df[c].astype(np.float64)
    events, memory = split_memory(df)
    return Trace(path="unit.json", events=events, memory=memory)
