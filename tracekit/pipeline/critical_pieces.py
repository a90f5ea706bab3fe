"""The critical path's walked segments (:mod:`tracekit.pipeline.critical`) as labelled pieces.

Each piece is one kind (:data:`KINDS`) over ``[start, end)`` with a phase and a module category:

* a device activity on the path: ``kernel``, ``memcpy`` (copies and sets) or ``comm`` (a
  collective), with its own phase and module; the gap before the next activity of its run is
  ``idle``, labelled as that next activity;
* a launch (the call's start to its activity's start): ``launch``, labelled as its activity;
* a CPU stretch, cut at its thread's top-level ranges: the time inside a sync call ``sync``,
  inside a call that launched device work ``launch``, inside any other op or call ``cpu``, in
  no op ``idle`` (within one range drawn in that order; the sums are exact); each range labelled
  as the first activity it launched, or, launching none, as a launch at its midpoint would be
  (the functions :mod:`tracekit.pipeline.host_idle` uses); a gap as the range after it;
* a sync's wait (the waited activity's end to the call's end): ``sync``, labelled as its range;
* where the walk stopped before the window's start: ``idle``, labelled as the piece after it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..read.schema import MEMCPY, MEMSET
from . import labels
from .critical import IDLE, RUN, SEG_LAUNCH, STRETCH, SYNC
from .critical_host import SHIFT, Host
from .points import launch_view
from .state import Trace, as_str
from .taxonomy import ModuleTaxonomy


class Vocab:
    """Labels as integer codes (-1: none yet), each distinct text once; ``default`` stands
    for the empty label."""

    def __init__(self, default: str):
        self.default, self.index = default, {default: 0}

    def encode(self, values) -> np.ndarray:
        codes, uniq = pd.factorize(np.asarray(values, dtype=object), use_na_sentinel=True)
        own = np.array(
            [self.index.setdefault(str(u) or self.default, len(self.index)) for u in uniq], np.int64
        )
        return np.where(codes >= 0, own[np.maximum(codes, 0)] if len(own) else -1, -1)

    def categorical(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes, categories=pd.Index(list(self.index), dtype=object))


KINDS = np.array(["cpu", "launch", "kernel", "memcpy", "sync", "comm", "idle"], dtype=object)
CPU, LAUNCH_K, KERNEL, MEMCPY_K, SYNC_K, COMM, IDLE_K = range(7)


def _device_kind(a: pd.DataFrame) -> np.ndarray:
    kind = a["kind"].to_numpy()
    comm = as_str(a["group"]) == "comm" if "group" in a else np.zeros(len(a), bool)
    return np.where(comm, COMM, np.where(np.isin(kind, (MEMCPY, MEMSET)), MEMCPY_K, KERNEL))


def run_pieces(segs: np.ndarray, a: pd.DataFrame, order: np.ndarray) -> dict:
    """The activities of the ``RUN`` segments and the idle gaps between them (and before the
    first, where a run was cut at the window's start): ``lo``, ``hi``, ``kind``, ``act`` (the
    row of ``a`` whose labels the piece takes), ``seg``."""
    first, last, top = segs[:, 3], segs[:, 4], segs[:, 2]
    n = last - first + 1
    place = np.repeat(first, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
    seg = np.repeat(np.arange(len(segs)), n)
    row = order[place]
    start, end = a["start"].to_numpy(np.int64)[row], a["end"].to_numpy(np.int64)[row]
    is_last = place == last[seg]
    nxt = np.where(
        is_last, top[seg], a["start"].to_numpy(np.int64)[order[np.minimum(place + 1, len(order) - 1)]]
    )
    own_hi = np.minimum(end, nxt)
    gap_row = order[np.minimum(place + 1, len(order) - 1)]
    kind = _device_kind(a)[row]
    head = order[first]  # a run cut at the window's start: idle from there to its first activity
    lead = np.minimum(segs[:, 1], a["start"].to_numpy(np.int64)[head])
    return {
        "lo": np.concatenate([start, own_hi, lead]),
        "hi": np.concatenate([own_hi, np.where(is_last, own_hi, nxt), a["start"].to_numpy(np.int64)[head]]),
        "kind": np.concatenate([kind, np.full(len(row) + len(segs), IDLE_K)]),
        "act": np.concatenate([row, gap_row, head]),
        "seg": np.concatenate([seg, seg, np.arange(len(segs))]),
    }


def stretch_pieces(segs: np.ndarray, host: Host) -> dict:
    """The ``STRETCH`` segments (thread, lo, hi) cut at the thread's top-level ranges: per piece
    its segment (``seg``), keyed ``lo``/``hi``, the range whose labels it takes (``rng``: its
    own, or for a gap the range after it; -1 none) and its ns in each kind."""
    th, k_lo, k_hi = segs[:, 3], host.key(segs[:, 3], segs[:, 1]), host.key(segs[:, 3], segs[:, 2])
    i0 = np.searchsorted(host.v, k_lo, "right")
    i1 = np.searchsorted(host.u, k_hi, "left")
    n = np.maximum(i1 - i0, 0)
    m = 2 * n + 1  # per range: the gap before it and the range; then the gap after the last
    seg = np.repeat(np.arange(len(segs)), m)
    j = np.arange(m.sum()) - np.repeat(np.cumsum(m) - m, m)
    r = i0[seg] + j // 2
    top = max(len(host.u) - 1, 0)
    # no top-level range on any thread (every op of no duration): each stretch is one gap, and
    # the ranges read below are never used; one zero stands in for them
    hu, hv = (host.u, host.v) if len(host.u) else (np.zeros(1, np.int64), np.zeros(1, np.int64))
    u, v = hu[np.minimum(r, top)], hv[np.minimum(r, top)]
    v_prev = hv[np.clip(r - 1, 0, top)]
    body = j % 2 == 1
    gap_lo = np.where(j == 0, k_lo[seg], v_prev)
    gap_hi = np.where(j == 2 * n[seg], k_hi[seg], u)
    lo = np.where(body, np.maximum(u, k_lo[seg]), np.maximum(gap_lo, k_lo[seg]))
    hi = np.where(body, np.minimum(v, k_hi[seg]), np.minimum(gap_hi, k_hi[seg]))
    same = (r < len(host.u)) & ((host.u[np.minimum(r, top)] >> SHIFT) == th[seg]) if len(host.u) else r < 0
    keep = hi > lo
    launch, sync, busy = host.times(lo[keep], hi[keep])
    return {
        "seg": seg[keep],
        "lo": lo[keep],
        "hi": hi[keep],
        "rng": np.where(same, r, -1)[keep],
        "kinds": {LAUNCH_K: launch, SYNC_K: sync, CPU: busy - launch - sync, IDLE_K: (hi - lo)[keep] - busy},
    }


def range_labels(
    t: Trace, taxonomy: ModuleTaxonomy, host: Host, ranges: np.ndarray, a: pd.DataFrame, g: dict
):
    """Phase and module of each top-level range of ``ranges``: its first launched activity's,
    else a launch's at its midpoint."""
    out_p = np.full(len(ranges), -1, np.int64)
    out_m = np.full(len(ranges), -1, np.int64)
    if not len(ranges):
        return out_p, out_m
    launched = np.flatnonzero(a["launched"].to_numpy(bool))
    rng = host.range_of(g["a_th"][launched], a["launch_ts"].to_numpy(np.int64)[launched])
    ok = rng >= 0
    first_rng, first = np.unique(rng[ok], return_index=True)
    at = np.searchsorted(first_rng, ranges)
    hit = (at < len(first_rng)) & (first_rng[np.minimum(at, max(len(first_rng) - 1, 0))] == ranges)
    act = (
        launched[ok][first[np.minimum(at, max(len(first) - 1, 0))]]
        if len(first)
        else np.zeros(len(ranges), int)
    )
    out_p[hit], out_m[hit] = g["a_phase"][act[hit]], g["a_module"][act[hit]]
    rest = ranges[~hit]
    th = host.u[rest] >> SHIFT
    mid = ((host.u[rest] + host.v[rest]) // 2) - (th << SHIFT) + host.t0
    phase, module, _ = label_points(t, taxonomy, g["threads"][0][th], g["threads"][1][th], mid)
    out_p[~hit], out_m[~hit] = g["phases"].encode(phase), g["modules"].encode(module)
    return out_p, out_m


def label_points(
    t: Trace, taxonomy: ModuleTaxonomy, pid, tid, ts
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Phase, module category and whether an op is open, at each point (pid, tid, ts), as a
    launch there would get them."""
    if not len(ts):
        none = np.zeros(0, object)
        return none, none, np.zeros(0, bool)
    pts = pd.DataFrame({"pid": pid, "tid": tid, "ts": ts})
    view = launch_view(t, pts)
    mod = labels.module_categories(view, taxonomy)[0]
    return as_str(view.acts["phase"]), mod.values[mod.codes], view.acts["op_r"].to_numpy() >= 0


def pieces(t: Trace, taxonomy: ModuleTaxonomy, walked: list, a: pd.DataFrame, g: dict) -> pd.DataFrame:
    """Every piece of every step's path: a frame ``step``, ``kind``, ``phase``, ``module``,
    ``start``, ``end`` (ns), clipped to the step's window, in time order per step."""
    if not walked:
        return merged()
    s = np.asarray([seg for w in walked for seg in w[3]], dtype=np.int64).reshape(-1, 5)
    of = np.repeat(np.arange(len(walked)), [len(w[3]) for w in walked])
    wlo, whi = (np.array([w[i] for w in walked], np.int64) for i in (1, 2))
    got: list[tuple] = []  # (segment, lo, hi, kind, phase, module)
    m = np.flatnonzero(s[:, 0] == RUN)
    run = run_pieces(s[m], a, g["pred"]["order"])
    got.append(
        (
            m[run["seg"]],
            run["lo"],
            run["hi"],
            run["kind"],
            g["a_phase"][run["act"]],
            g["a_module"][run["act"]],
        )
    )
    del run  # its columns live on in ``got`` only, which _clipped empties
    for typ, kind in ((SEG_LAUNCH, LAUNCH_K), (IDLE, IDLE_K)):
        m = np.flatnonzero((s[:, 0] == typ) & (s[:, 3] >= 0))
        got.append(
            (m, s[m, 1], s[m, 2], np.full(len(m), kind), g["a_phase"][s[m, 3]], g["a_module"][s[m, 3]])
        )
    got += _host_pieces(t, taxonomy, s, a, g)
    m = np.flatnonzero((s[:, 0] == IDLE) & (s[:, 3] < 0))
    none = np.full(len(m), -1, np.int64)
    got.append((m, s[m, 1], s[m, 2], np.full(len(m), IDLE_K), none, none))
    step, kinds, labels, lo, hi = _clipped(got, of, wlo, whi, np.array([w[0] for w in walked], np.int64))
    return merged(step, kinds, labels, lo, hi, g)


def _clipped(
    got: list[tuple], of: np.ndarray, wlo: np.ndarray, whi: np.ndarray, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray, np.ndarray]:
    """``(step, kind, (phase, module), lo, hi)`` of the pieces in ``got`` (emptied: the peak of
    a large trace's critical path was here, every piece held twice), clipped to their step's
    window, without the empty ones, in time order per step, missing labels filled back."""
    cols = [np.concatenate([np.asarray(x[i]) for x in got]) for i in range(6)]
    got.clear()
    step_i = of[cols[0]]
    lo, hi = np.clip(cols[1], wlo[step_i], whi[step_i]), np.clip(cols[2], wlo[step_i], whi[step_i])
    keep = np.flatnonzero(hi > lo)
    keep = keep[np.lexsort((lo[keep], step_i[keep]))]
    step = steps[step_i[keep]]
    labels = [_fill_back(cols[i][keep].astype(np.int64), step) for i in (4, 5)]
    return step, cols[3][keep].astype(np.int64), labels, lo[keep], hi[keep]


def _fill_back(code: np.ndarray, step: np.ndarray) -> np.ndarray:
    """Each missing code (-1) takes the next present code of its step (0, the default, if none).
    Only the missing rows are looked at: each finds the next present row by a binary search."""
    miss = np.flatnonzero(code < 0)
    if not len(miss):
        return code
    present = np.flatnonzero(code >= 0)
    at = np.searchsorted(present, miss)
    nxt = present[np.minimum(at, max(len(present) - 1, 0))] if len(present) else miss
    ok = (at < len(present)) & (step[nxt] == step[miss])
    out = code.copy()
    out[miss] = np.where(ok, code[nxt], 0)
    return out


def _host_pieces(t: Trace, taxonomy: ModuleTaxonomy, s: np.ndarray, a: pd.DataFrame, g: dict) -> list:
    """The CPU stretches' pieces (one per kind present in each range or gap, in the order cpu,
    launch, sync, idle) and the syncs' waits, labelled by their ranges."""
    host = g["host"]
    m = np.flatnonzero(s[:, 0] == STRETCH)
    st = stretch_pieces(s[m], host)
    sy = np.flatnonzero(s[:, 0] == SYNC)
    sy_rng = host.range_of(s[sy, 4], s[sy, 2] - 1)
    ranges, inv = np.unique(np.r_[st["rng"], sy_rng], return_inverse=True)
    phase, module = range_labels(t, taxonomy, host, ranges[ranges >= 0], a, g)
    phase = np.r_[np.full(int((ranges < 0).sum()), -1, np.int64), phase][inv]
    module = np.r_[np.full(int((ranges < 0).sum()), -1, np.int64), module][inv]
    n = len(st["lo"])
    out, at = [], st["lo"] - (s[m][st["seg"], 3] << SHIFT) + host.t0
    for kind in (CPU, LAUNCH_K, SYNC_K, IDLE_K):
        ns = st["kinds"][kind]
        k = ns > 0
        out.append(
            (m[st["seg"]][k], at[k], (at + ns)[k], np.full(int(k.sum()), kind), phase[:n][k], module[:n][k])
        )
        at = at + ns
    out.append((sy, s[sy, 1], s[sy, 2], np.full(len(sy), SYNC_K), phase[n:], module[n:]))
    return out


def merged(step=None, kind=None, labels=None, lo=None, hi=None, g=None) -> pd.DataFrame:
    """The pieces (in time order per step) with neighbours of the same step, kind, phase and
    module joined: ``step``, ``kind``, ``phase``, ``module`` (categoricals), ``start``, ``end``."""
    cols = ["step", "kind", "phase", "module", "start", "end"]
    if step is None or not len(step) or g is None or labels is None:
        empty = pd.Categorical(np.zeros(0, object))
        z = np.zeros(0, np.int64)
        return pd.DataFrame({"step": z, "kind": empty, "phase": empty, "module": empty, "start": z, "end": z})
    same = np.ones(len(step), bool)
    for v in (step, kind, labels[0], labels[1]):
        same &= np.r_[False, v[1:] == v[:-1]]
    same &= np.r_[False, lo[1:] == hi[:-1]]
    first = np.flatnonzero(~same)
    last = np.r_[first[1:] - 1, len(same) - 1]
    return pd.DataFrame(
        {
            "step": step[first],
            "kind": pd.Categorical.from_codes(kind[first], categories=pd.Index(list(KINDS), dtype=object)),
            "phase": g["phases"].categorical(labels[0][first]),
            "module": g["modules"].categorical(labels[1][first]),
            "start": lo[first],
            "end": hi[last],
        },
        columns=cols,
        copy=False,  # fresh arrays, each kept as it is (not consolidated: copied again)
    )
