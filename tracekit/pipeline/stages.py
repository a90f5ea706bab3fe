"""Inference stages: which device activities belong to prefill and which to decode.

A serving or generation trace mixes two very different kinds of forward pass: *prefill* (the
whole prompt at once; large GEMMs) and *decode* (one new token per sequence; small GEMMs,
KV-cache reads). Their tables mean little averaged together, so every activity gets a
``stage``: ``prefill``, ``decode``, ``mixed`` (a batch holding both, as chunked prefill
schedules them) or ``""`` (not an inference trace, or no way to tell).

Evidence, strongest first:

1. tracekit's own capture ranges ``tracekit.phase:prefill`` / ``tracekit.phase:decode``
   (handled in :mod:`tracekit.pipeline.phases`);
2. the step ranges that serving stacks record, applied by time to every thread of the process:

   * SGLang: ``step[EXTEND ...]`` (prefill), ``step[DECODE ...]``, ``step[MIXED ...]``;
   * vLLM (and SGLang on ROCm): ``execute_context_<n>(...)_generation_<m>(...)``, also
     ``execute_<tokens>_context_<n>(...)_generation_<m>(...)``: ``n`` prefill and ``m`` decode
     sequences in the batch: prefill when m = 0, decode when n = 0, mixed otherwise;
   * ranges named ``prefill`` / ``decode`` / ``generate``-style names containing one of those
     words;

3. HF ``generate`` with no ranges: in a trace with no backward work, each step that holds two
   or more forward passes of the model (outermost modules containing decoder layers) has its
   first pass as prefill and the others as decode. Work launched between passes (sampling,
   logits processing) belongs to the pass before it.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from .intervals import containing

STAGES = ("prefill", "decode", "mixed")

_SGLANG = re.compile(r"^step\[(EXTEND|PREFILL|DECODE|MIXED)\b", re.IGNORECASE)
_CONTEXT_GEN = re.compile(r"context_(\d+)\b.*generation_(\d+)\b", re.IGNORECASE)
_WORD = re.compile(r"(?<![a-z])(prefill|decode)(?![a-z])", re.IGNORECASE)


def stage_of_range(name: str) -> tuple[str, int]:
    """(stage, family) a serving range name marks; ``("", -1)`` when it marks none.

    Families rank the evidence: 2 SGLang step ranges, 1 context/generation counts, 0 a plain
    word; a range of a higher family overrides a lower one around the same launch.
    """
    m = _SGLANG.match(name)
    if m:
        word = m.group(1).upper()
        return {"EXTEND": "prefill", "PREFILL": "prefill", "DECODE": "decode"}.get(word, "mixed"), 2
    m = _CONTEXT_GEN.search(name)
    if m:
        ctx, gen = int(m.group(1)), int(m.group(2))
        if ctx and not gen:
            return "prefill", 1
        if gen and not ctx:
            return "decode", 1
        return ("mixed", 1) if ctx and gen else ("", -1)
    m = _WORD.search(name)
    return (m.group(1).lower(), 0) if m else ("", -1)


def from_ranges(
    range_names: np.ndarray,
    r_pid: np.ndarray,
    r_start: np.ndarray,
    r_end: np.ndarray,
    a_pid: np.ndarray,
    a_ts: np.ndarray,
) -> np.ndarray:
    """Stage per activity (by its launch time and process) from serving step ranges."""
    codes, uniq = pd.factorize(np.asarray(range_names, dtype=object))  # each distinct name once
    per_name = [stage_of_range(str(n)) for n in uniq]
    stage = np.array([x[0] for x in per_name], dtype=object)[codes]
    family = np.array([x[1] for x in per_name], dtype=np.int64)[codes]
    out = np.full(len(a_ts), "", dtype=object)
    for fam in (0, 1, 2):
        sel = np.flatnonzero(family == fam)
        k = containing(a_pid, a_ts, r_pid[sel], r_start[sel], r_end[sel])
        out[k >= 0] = stage[sel[k[k >= 0]]]
    return out


def pass_starts(modules: pd.DataFrame) -> np.ndarray:
    """Sorted start times of the model's forward passes: the outermost module instances that
    contain a decoder layer (empty when the trace has no decoder layers)."""
    return pass_ranges(modules)[0]


def pass_ranges(modules: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the model's forward passes, sorted by start."""
    if modules.empty or not modules["is_layer"].any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    parent = modules["parent"].to_numpy()
    root = np.arange(len(modules))
    for _ in range(256):  # climb to the outermost module (depth is small)
        up = parent[root]
        if (up < 0).all():
            break
        root = np.where(up >= 0, up, root)
    passes = np.unique(root[modules["is_layer"].to_numpy()])
    start = modules["start"].to_numpy()[passes]
    order = np.argsort(start, kind="stable")
    start = start[order]
    if "end" in modules:
        return start, modules["end"].to_numpy()[passes][order]
    # no ends recorded: a pass lasts until the next one starts
    return start, np.append(start[1:], np.iinfo(np.int64).max)


def pass_index(modules: pd.DataFrame, launch_ts: np.ndarray) -> np.ndarray:
    """Per activity, the forward pass in progress at its launch: the last pass that started
    before it (-1 before the first pass)."""
    starts = pass_starts(modules)
    return np.searchsorted(starts, launch_ts, side="right") - 1


def from_passes(
    modules: pd.DataFrame, a_ts: np.ndarray, a_step: np.ndarray, a_phase: np.ndarray
) -> np.ndarray:
    """HF ``generate``: first model pass of a step is prefill, later passes decode.

    ``modules`` is the module table of :mod:`tracekit.pipeline.modules` (``parent``, ``is_layer``,
    ``start``, ``end``); ``a_ts`` the activities' launch times. Returns ``""`` everywhere when
    the heuristic does not apply (backward work, no layers, one pass per step).

    The count restarts in every step (a profiler schedule records several ``generate`` calls):
    a step's first pass is the first pass one of its activities was launched *inside*, so work
    a step launches before its first pass (input preparation, after the previous step's last
    pass) is that step's prefill, never the previous step's pass.
    """
    out = np.full(len(a_ts), "", dtype=object)
    starts, ends = pass_ranges(modules)
    if (a_phase != "forward").any() or len(starts) < 2:
        return out
    k = np.searchsorted(starts, a_ts, side="right") - 1
    inside = (k >= 0) & (a_ts < ends[np.maximum(k, 0)])
    frame = pd.DataFrame({"k": k, "step": a_step})
    first = frame[inside].groupby("step")["k"].min()
    n_pass = frame[inside].groupby("step")["k"].nunique()
    multi = n_pass.reindex(a_step).fillna(0).to_numpy() >= 2
    f = first.reindex(a_step).to_numpy(dtype="float64")
    out[multi & (k >= 0) & (k == f)] = "prefill"
    out[multi & (k >= 0) & (k > f)] = "decode"
    # Launched in a step before its first pass (input preparation): the prefill.
    out[multi & ((k < f) | (k < 0))] = "prefill"
    return out
