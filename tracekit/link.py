"""Link: who launched each device activity, from which CPU op stack, module, step and phase.

* device activity -> launching runtime call, by the ``correlation`` arg;
* runtime call -> enclosing CPU op stack on its thread (time containment, one sweep per thread);
* -> enclosing module range (capture's ``tracekit.module:`` ranges when present, else
  ``nn.Module: X_N`` python_function events) and the ``ProfilerStep#N`` step (by time);
* backward ops -> their forward op by sequence number (on the forward thread), falling back to
  ``fwdbwd`` flow pairs -> the forward op's module.

On CPU-only traces the activities are the CPU leaf ops (and gloo/nccl collective ranges), each
its own launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import annotations as ann
from . import stages as _stages
from .read import (ANNOTATION, CPU_OP, FLOW_FWDBWD, KERNEL, MEMCPY, MEMSET, PYTHON, RUNTIME,
                   RawTrace)
from .taxonomy import ModuleTaxonomy

from .nesting import (F_BWD, F_COMM, F_EVAL, F_MODULE, F_OP, F_OPT, F_ROPE, MOD_IN_BWD,  # noqa: F401
                      sweep)
_STEP_PREFIX = "ProfilerStep#"
_OPT_PREFIX = "Optimizer.step#"
_EVAL_PREFIX = "autograd::engine::evaluate_function:"
_MODULE_PREFIX = "nn.Module: "
_COMM_PREFIXES = ("nccl:", "gloo:", "c10d::", "record_param_comms")


@dataclass
class LinkedTrace:
    """Activities with their launch context, the steps, and the module instances of one rank."""

    path: str
    mode: str  # "gpu" or "cpu"
    activities: pd.DataFrame
    steps: pd.DataFrame
    modules: pd.DataFrame
    meta: dict = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def take(arr: np.ndarray, idx: np.ndarray, default):
    """``arr[idx]`` where ``idx >= 0``, else ``default`` (also when ``arr`` is empty)."""
    idx = np.asarray(idx)
    out = np.full(idx.shape, default, dtype=object if isinstance(default, str) or
                  np.asarray(arr).dtype == object else np.result_type(np.asarray(arr).dtype, type(default)))
    ok = idx >= 0
    if ok.any():
        out[ok] = np.asarray(arr)[idx[ok]]
    return out


def _as_str(col: pd.Series) -> np.ndarray:
    """A string column as an object array of str (categoricals: through their codes, fast)."""
    if isinstance(col.dtype, pd.CategoricalDtype) and not col.hasnans:
        cats = np.asarray(col.cat.categories.astype(str), dtype=object)
        return cats[col.cat.codes.to_numpy()] if len(cats) else np.full(len(col), "", object)
    return col.astype(str).to_numpy()


def _split_module_name(name: str) -> tuple[str, str]:
    """``nn.Module: LlamaMLP_3`` -> (``LlamaMLP``, ``LlamaMLP_3``)."""
    inst = name[len(_MODULE_PREFIX):]
    cls, sep, num = inst.rpartition("_")
    return (cls, inst) if sep and num.isdigit() else (inst, inst)


def _range_flags(names: np.ndarray, kinds: np.ndarray, seq: np.ndarray, fwd_tid: np.ndarray,
                 collective: np.ndarray, use_capture_modules: bool) -> np.ndarray:
    """Bit flags per range event (vectorised over the unique names)."""
    s = pd.Series(names)
    flags = np.zeros(len(names), dtype=np.int64)
    is_op = kinds == CPU_OP
    flags |= np.where(is_op, F_OP, 0)
    if use_capture_modules:
        is_mod = (kinds == ANNOTATION) & s.str.startswith(ann.MODULE_PREFIX).to_numpy()
    else:
        is_mod = (kinds == PYTHON) & s.str.startswith(_MODULE_PREFIX).to_numpy()
    flags |= np.where(is_mod, F_MODULE, 0)
    flags |= np.where(s.str.startswith(_OPT_PREFIX).to_numpy(), F_OPT, 0)
    is_eval = s.str.startswith(_EVAL_PREFIX).to_numpy()
    flags |= np.where(is_eval, F_EVAL, 0)
    # A backward node carries the forward thread's id (>0); forward ops carry none or 0.
    flags |= np.where(is_op & ((seq >= 0) & (fwd_tid > 0) | is_eval), F_BWD, 0)
    is_comm = s.str.startswith(_COMM_PREFIXES).to_numpy() | (collective != "")
    flags |= np.where(is_comm, F_COMM, 0)
    is_rope = (kinds == PYTHON) & s.str.contains("rotary", case=False).to_numpy()
    flags |= np.where(is_rope, F_ROPE, 0)
    return flags


def _sweep(pid, tid, start, end, is_range, flags):
    """Innermost enclosing range of each kind for every element (see tracekit.nesting), and the
    bit that says a module range is nested inside the innermost backward node (then the module,
    not the sequence number, says where the work belongs: recomputation)."""
    return (*sweep(pid, tid, start, end, is_range, flags), MOD_IN_BWD)


def _by_time(pid: np.ndarray, t: np.ndarray, r_pid: np.ndarray, r_start: np.ndarray,
             r_end: np.ndarray) -> np.ndarray:
    """Index of the range (of the same pid) containing each time, -1 when none.

    Ranges of one pid must not overlap (steps, phase ranges); the latest-starting one wins.
    """
    out = np.full(len(t), -1, dtype=np.int64)
    nr, nq = len(r_pid), len(t)
    if nr == 0 or nq == 0:
        return out
    # One sort of ranges and times together by (pid, time), ranges before times at an equal
    # time and equal starts in index order; the last range at or before each time is then the
    # candidate. O(n log n) however many pids (a loop per pid was quadratic on hostile traces).
    all_pid = np.concatenate([np.asarray(r_pid, np.int64), np.asarray(pid, np.int64)])
    all_t = np.concatenate([np.asarray(r_start, np.int64), np.asarray(t, np.int64)])
    is_q = np.concatenate([np.zeros(nr, bool), np.ones(nq, bool)])
    idx = np.concatenate([np.arange(nr), np.arange(nq)])
    order = np.lexsort((idx, is_q, all_t, all_pid))
    q_sorted = is_q[order]
    last = np.maximum.accumulate(np.where(q_sorted, -1, np.arange(len(order))))[q_sorted]
    qi = idx[order][q_sorted]
    cand = np.where(last >= 0, order[np.maximum(last, 0)], -1)
    c = np.maximum(cand, 0)
    inside = (cand >= 0) & (r_pid[c] == pid[qi]) & (t[qi] < r_end[c])
    out[qi] = np.where(inside, cand, -1)
    return out


def link(raw: RawTrace, taxonomy: ModuleTaxonomy) -> LinkedTrace:
    ev = raw.events
    warnings: list[str] = []
    kind = ev["kind"].to_numpy()
    names = _as_str(ev["name"])
    pid, tid = ev["pid"].to_numpy(), ev["tid"].to_numpy()
    ts, dur = ev["ts"].to_numpy(), ev["dur"].to_numpy()
    end = ts + dur
    corr, seq, fwd_tid = ev["corr"].to_numpy(), ev["seq"].to_numpy(), ev["fwd_tid"].to_numpy()
    collective_arg = _as_str(ev["collective"])

    is_device = np.isin(kind, (KERNEL, MEMCPY, MEMSET))
    mode = "gpu" if is_device.any() else "cpu"

    use_capture = bool((kind == ANNOTATION).any() and
                       pd.Series(names[kind == ANNOTATION]).str.startswith(ann.MODULE_PREFIX).any())
    is_range_ev = np.isin(kind, (CPU_OP, ANNOTATION, PYTHON))

    # --- steps and phase ranges (by time, per process) ---------------------------------------
    ann_names = pd.Series(names)
    is_step = (kind == ANNOTATION) & ann_names.str.startswith(_STEP_PREFIX).to_numpy()
    is_phase = (kind == ANNOTATION) & ann_names.str.startswith(ann.PHASE_PREFIX).to_numpy()
    step_idx = np.flatnonzero(is_step)
    step_num = pd.to_numeric(ann_names[step_idx].str[len(_STEP_PREFIX):], errors="coerce")
    step_num = step_num.fillna(-1).astype(np.int64).to_numpy()

    # --- activities and their anchors ----------------------------------------------------------
    if mode == "gpu":
        act = np.flatnonzero(is_device)
        rt = np.flatnonzero(kind == RUNTIME)
        rt_corr = pd.Series(rt, index=corr[rt])
        dup = rt_corr.index.duplicated(keep="first")
        if dup.any():
            warnings.append(f"{int(dup.sum())} duplicate correlation ids among runtime calls; "
                            "the first call of each id is used")
            rt_corr = rt_corr[~dup]
        launch = rt_corr.reindex(corr[act]).to_numpy(dtype="float64")
        launch = np.where(np.isnan(launch), -1, launch).astype(np.int64)
        no_launch = launch < 0
        if no_launch.any() and (kind == RUNTIME).any():
            warnings.append(f"{int(no_launch.sum())} of {len(act)} device activities have no "
                            "launching runtime call; they are placed by time only")
        a_pid = np.where(no_launch, -1, pid[np.maximum(launch, 0)])
        a_tid = np.where(no_launch, -1, tid[np.maximum(launch, 0)])
        a_ts = np.where(no_launch, ts[act], ts[np.maximum(launch, 0)])
        act_start, act_end = ts[act], end[act]
    else:
        # CPU leaf ops (ops with no op nested inside) and collective ranges.
        cand = np.flatnonzero((kind == CPU_OP) |
                              ((kind == ANNOTATION) &
                               ann_names.str.startswith(("gloo:", "nccl:")).to_numpy()))
        leaf = _leaves(pid[cand], tid[cand], ts[cand], end[cand])
        act = cand[leaf]
        launch = act.copy()
        no_launch = np.zeros(len(act), dtype=bool)
        a_pid, a_tid, a_ts = pid[act], tid[act], ts[act]
        act_start, act_end = ts[act], end[act]

    # --- the sweep: ranges + anchors, per thread ----------------------------------------------
    rng = np.flatnonzero(is_range_ev)
    flags = _range_flags(names[rng], kind[rng], seq[rng], fwd_tid[rng], collective_arg[rng],
                         use_capture)
    keep = flags != 0
    rng, flags = rng[keep], flags[keep]
    # Anchors: GPU mode: the runtime calls; CPU mode: a point just inside each leaf op.
    anc_ok = ~no_launch
    if mode == "gpu":
        anc_start = a_ts[anc_ok]
        anc_end = anc_start
    else:
        anc_start = a_ts + np.minimum(1, dur[act])  # strictly inside the leaf itself
        anc_end = anc_start
    n_r = len(rng)
    s_pid = np.concatenate([pid[rng], a_pid[anc_ok]])
    s_tid = np.concatenate([tid[rng], a_tid[anc_ok]])
    s_start = np.concatenate([ts[rng], anc_start])
    s_end = np.concatenate([end[rng], anc_end])
    s_isr = np.concatenate([np.ones(n_r, bool), np.zeros(int(anc_ok.sum()), bool)])
    s_flags = np.concatenate([flags, np.zeros(int(anc_ok.sum()), np.int64)])
    op, top, mod, bwd, comm, bits, MOD_IN_BWD = _sweep(s_pid, s_tid, s_start, s_end, s_isr, s_flags)

    # Map sweep element indices (local) back to event indices for ranges.
    def ev_of(local: np.ndarray) -> np.ndarray:
        return take(rng, local, -1)

    # --- modules -----------------------------------------------------------------------------
    mod_local = np.flatnonzero(s_flags & F_MODULE)
    modules = _module_table(mod_local, rng, names, ts, end, tid, mod, taxonomy, use_capture)

    # --- per-op context, for forward ops that backward ops link to ---------------------------
    op_local = np.flatnonzero((s_flags & F_OP) != 0)
    # Forward ops with a sequence number, on the forward thread, keyed by sequence number.
    fwd_mask = (seq[rng[op_local]] >= 0) & (fwd_tid[rng[op_local]] <= 0) & \
               ((s_flags[op_local] & F_BWD) == 0)
    fwd_local = op_local[fwd_mask]
    seq_map = pd.Series(dtype=np.int64)
    if fwd_local.size:
        f_tid = tid[rng[fwd_local]]
        main_tid = pd.Series(f_tid).value_counts().idxmax()
        fl = fwd_local[f_tid == main_tid]
        fl = fl[np.argsort(ts[rng[fl]], kind="stable")]
        sm = pd.Series(fl, index=seq[rng[fl]])
        seq_map = sm[~sm.index.duplicated(keep="first")]
    # fwdbwd flows: start on the forward op, finish on the backward op (matched by thread+ts).
    flow_map = _fwdbwd_pairs(kind, ev, rng, op_local, pid, tid, ts)

    # --- per-activity context ----------------------------------------------------------------
    n_act = len(act)
    anc_pos = np.full(n_act, -1, np.int64)
    anc_pos[anc_ok] = n_r + np.arange(int(anc_ok.sum()))

    def at(arr, default=-1):
        out = np.full(n_act, default, dtype=arr.dtype)
        out[anc_ok] = arr[anc_pos[anc_ok]]
        return out

    a_op, a_top, a_mod, a_bwd, a_comm = (at(x) for x in (op, top, mod, bwd, comm))
    a_bits = at(bits, 0)
    if mode == "cpu":  # a leaf op is its own launching op
        self_local = _local_index_of(rng, act)
        a_op = np.where(self_local >= 0, self_local, a_op)
        a_top = np.where(a_top < 0, self_local, a_top)

    # Backward activities: take the forward op's module and top op through the sequence number.
    use_seq = (a_bwd >= 0) & ((a_bits & MOD_IN_BWD) == 0)
    f_op = np.full(n_act, -1, np.int64)
    if use_seq.any():
        bseq = seq[rng[a_bwd[use_seq]]]
        f = seq_map.reindex(bseq).to_numpy(dtype="float64")
        f = np.where(np.isnan(f), -1, f).astype(np.int64)
        if flow_map is not None:
            missing = f < 0
            if missing.any():
                fb = flow_map.reindex(a_bwd[use_seq][missing]).to_numpy(dtype="float64")
                f[missing] = np.where(np.isnan(fb), -1, fb).astype(np.int64)
        f_op[use_seq] = f
    linked = f_op >= 0
    sem_mod = np.where(use_seq, take(mod, f_op, -1), a_mod)
    # The forward op's outermost op inside its module: its recorded context, or itself.
    f_top = take(top, f_op, -1)
    f_top = np.where((f_top < 0) & (f_op >= 0), f_op, f_top)
    sem_top = np.where(use_seq, f_top, a_top)
    sem_rope = np.where(use_seq, take(bits, f_op, 0) & F_ROPE, a_bits & F_ROPE) != 0

    # --- step and phase -------------------------------------------------------------------------
    step_of = _by_time(a_pid, a_ts, pid[step_idx], ts[step_idx], end[step_idx])
    # Placed by time against any process's steps: activities with no launch, and launches from
    # a process that recorded no ProfilerStep of its own (merged or odd traces).
    any_pid = no_launch | ~np.isin(a_pid, pid[step_idx])
    if any_pid.any() and step_idx.size:
        t = np.where(no_launch, act_start, a_ts)[any_pid]
        step_of[any_pid] = _by_time(np.zeros(t.size, np.int64), t,
                                    np.zeros(step_idx.size, np.int64), ts[step_idx], end[step_idx])
    outside = int((step_of < 0).sum()) if step_idx.size else 0
    if outside:
        warnings.append(f"{outside} of {n_act} activities were launched outside every "
                        "ProfilerStep and are left out")
    a_step = take(step_num, step_of, -1)
    if step_idx.size == 0:
        a_step = np.zeros(n_act, dtype=np.int64)

    phase_idx = np.flatnonzero(is_phase)
    phase_names = np.array([ann.parse_phase_range(x) or "" for x in names[phase_idx]], dtype=object)
    ph_of = _by_time(a_pid, a_ts, pid[phase_idx], ts[phase_idx], end[phase_idx])
    annotated = take(phase_names, ph_of, "")

    autograd_tids = _autograd_threads(kind, names, pid, tid, is_step)
    on_autograd = pd.MultiIndex.from_arrays([a_pid, a_tid]).isin(list(autograd_tids)) \
        if autograd_tids else np.zeros(n_act, bool)
    phase = np.full(n_act, "forward", dtype=object)
    phase[(a_bits & F_EVAL) != 0] = "backward"
    phase[(a_bwd >= 0)] = "backward"
    phase[on_autograd] = "backward"
    phase[(a_bits & F_OPT) != 0] = "optimizer"
    stage = np.full(n_act, "", dtype=object)
    for p in ("forward", "backward", "optimizer"):
        phase[annotated == p] = p
    for p in ("prefill", "decode"):
        m = annotated == p
        phase[m] = "forward"
        stage[m] = p
    if not (stage != "").any():  # serving step ranges, else HF generate's passes
        srv = (kind == ANNOTATION) & ~is_step & ~is_phase
        stage = _stages.from_ranges(names[srv], pid[srv], ts[srv], end[srv], a_pid, a_ts)
        if not (stage != "").any():
            stage = _stages.from_passes(modules, a_ts, a_step, phase)

    # --- collective ---------------------------------------------------------------------------
    comm_ev = ev_of(a_comm)
    comm_text = np.where(comm_ev >= 0,
                         np.where(collective_arg[np.maximum(comm_ev, 0)] != "",
                                  collective_arg[np.maximum(comm_ev, 0)], names[np.maximum(comm_ev, 0)]),
                         "")
    op_ev = ev_of(a_op)
    top_ev = ev_of(sem_top)

    activities = pd.DataFrame({
        "start": act_start.astype(np.int64),
        "end": act_end.astype(np.int64),
        "name": pd.Categorical(names[act]),
        "kind": kind[act],
        "stream": ev["stream"].to_numpy()[act] if mode == "gpu" else tid[act],
        "bytes": ev["bytes"].to_numpy()[act],
        "launch_pid": a_pid,
        "launch_tid": a_tid,
        "launch_ts": a_ts,
        "launched": ~no_launch,
        "op": pd.Categorical(take(names, op_ev, "")),
        "top_op": pd.Categorical(take(names, top_ev, "")),
        "top_op_ts": take(ts, top_ev, -1),
        "top_op_id": top_ev,
        "module_id": np.where(sem_mod >= 0, _module_row(modules, sem_mod), -1),
        "rope_frame": sem_rope,
        "backward_linked": linked,
        "backward_node": use_seq,
        "step": a_step,
        "phase": pd.Categorical(phase, categories=["forward", "backward", "optimizer"]),
        "stage": pd.Categorical(stage),
        "comm_text": pd.Categorical(comm_text),
    })
    # AccumulateGrad nodes have no forward op by nature (gradients into leaf tensors).
    bwd_name = pd.Series(take(names, ev_of(a_bwd), ""))
    accumulate = bwd_name.str.contains("AccumulateGrad", regex=False).to_numpy()
    n_unlinked = int((use_seq & ~linked & ~accumulate).sum())
    if n_unlinked and len(modules):
        warnings.append(f"{n_unlinked} backward activities could not be linked to a forward op "
                        "(no sequence number or fwdbwd flow); their module is Other")

    steps = _step_table(step_idx, step_num, ts, end, pid)
    meta = {"mode": mode, "module_source": "capture annotations" if use_capture else
            ("nn.Module events" if len(modules) else "none"),
            "has_profiler_steps": bool(step_idx.size)}
    return LinkedTrace(path=raw.path, mode=mode, activities=activities, steps=steps,
                       modules=modules, meta=meta, warnings=warnings)


def _leaves(pid, tid, start, end) -> np.ndarray:
    """Mask of intervals that contain no other interval of the same thread."""
    n = len(start)
    order = np.lexsort((-end, start, tid, pid))
    leaf = np.ones(n, dtype=bool)
    p, t, s, e = pid[order], tid[order], start[order], end[order]
    # In (start, -end) order, i has a child iff the next interval of the thread starts before i ends.
    same = (p[1:] == p[:-1]) & (t[1:] == t[:-1])
    has_child = same & (s[1:] < e[:-1]) & (e[1:] <= e[:-1])
    leaf_sorted = np.ones(n, dtype=bool)
    leaf_sorted[:-1] = ~has_child
    leaf[order] = leaf_sorted
    return leaf


def _local_index_of(rng: np.ndarray, events: np.ndarray) -> np.ndarray:
    pos = np.searchsorted(rng, events)
    pos = np.minimum(pos, len(rng) - 1) if len(rng) else pos
    ok = (len(rng) > 0) & (rng[pos] == events) if len(rng) else np.zeros(len(events), bool)
    return np.where(ok, pos, -1)


def _fwdbwd_pairs(kind, ev, rng, op_local, pid, tid, ts) -> pd.Series | None:
    """Backward op (local index) -> forward op (local index) from ``fwdbwd`` flow pairs."""
    fl = np.flatnonzero(kind == FLOW_FWDBWD)
    if fl.size == 0 or op_local.size == 0:
        return None
    op_ev = rng[op_local]
    key = pd.Series(op_local, index=pd.MultiIndex.from_arrays([pid[op_ev], tid[op_ev], ts[op_ev]]))
    key = key[~key.index.duplicated(keep="first")]
    fph = ev["flow_ph"].astype(str).to_numpy()[fl]
    fid = ev["flow_id"].to_numpy()[fl]
    where = key.reindex(pd.MultiIndex.from_arrays([pid[fl], tid[fl], ts[fl]])).to_numpy(dtype="float64")
    df = pd.DataFrame({"id": fid, "ph": fph, "op": where}).dropna()
    s = df[df.ph == "s"].drop_duplicates("id").set_index("id")["op"]
    f = df[df.ph == "f"].drop_duplicates("id").set_index("id")["op"]
    pairs = pd.concat([f.rename("bwd"), s.rename("fwd")], axis=1, join="inner")
    if pairs.empty:
        return None
    return pd.Series(pairs["fwd"].astype(np.int64).to_numpy(), index=pairs["bwd"].astype(np.int64).to_numpy())


def _autograd_threads(kind, names, pid, tid, is_step) -> set:
    """Threads that run autograd's engine and never a ProfilerStep: backward threads."""
    ev_m = pd.Series(names).str.startswith(_EVAL_PREFIX).to_numpy() & (kind == CPU_OP)
    if not ev_m.any():
        return set()
    bw = set(zip(pid[ev_m].tolist(), tid[ev_m].tolist()))
    main = set(zip(pid[is_step].tolist(), tid[is_step].tolist()))
    return bw - main


def _module_table(mod_local, rng, names, ts, end, tid, mod_parent, taxonomy: ModuleTaxonomy,
                  use_capture: bool) -> pd.DataFrame:
    """One row per module instance (one forward call) and its place in the module tree
    (categories are assigned by :func:`tracekit.labels.assign_categories`)."""
    ev_i = rng[mod_local]
    raw = names[ev_i]
    if use_capture:
        parsed = [ann.parse_module_range(x) or ("", "") for x in raw]
        cls = [c for c, _ in parsed]
        qual = [q for _, q in parsed]
        inst = qual
    else:
        split = [_split_module_name(x) for x in raw]
        cls = [c for c, _ in split]
        inst = [i for _, i in split]
        qual = [""] * len(split)
    df = pd.DataFrame({
        "local": mod_local, "cls": cls, "instance": inst, "qualname": qual,
        "start": ts[ev_i], "end": end[ev_i], "tid": tid[ev_i],
        "parent_local": mod_parent[mod_local],
    })
    if df.empty:
        df["parent"] = pd.Series(dtype=np.int64)
        df["position"] = pd.Series(dtype=np.int64)
        df["siblings"] = pd.Series(dtype=np.int64)
        df["layer"] = pd.Series(dtype=np.int64)
        df["is_layer"] = pd.Series(dtype=bool)
        return df
    row_of = pd.Series(np.arange(len(df)), index=df["local"])
    df["parent"] = row_of.reindex(df["parent_local"]).fillna(-1).astype(np.int64).to_numpy()
    df = df.sort_values("start", kind="stable")
    df["position"] = df.groupby(["parent", "cls"]).cumcount()
    df["siblings"] = df.groupby(["parent", "cls"])["cls"].transform("size")
    df = df.sort_index()
    parent = df["parent"].to_numpy()
    # Decoder layers: each activity's enclosing layer instance, numbered in order of calls.
    is_layer = df["cls"].map(lambda c: bool(taxonomy.decoder_layer.fullmatch(c))).to_numpy()
    layer = np.full(len(df), -1, np.int64)
    for i in np.argsort(df["start"].to_numpy(), kind="stable"):
        layer[i] = i if is_layer[i] else (layer[parent[i]] if parent[i] >= 0 else -1)
    df["layer"] = layer
    df["is_layer"] = is_layer
    return df


def _module_row(modules: pd.DataFrame, local: np.ndarray) -> np.ndarray:
    if modules.empty:
        return np.full(len(local), -1, np.int64)
    row_of = pd.Series(np.arange(len(modules)), index=modules["local"].to_numpy())
    r = row_of.reindex(np.maximum(local, 0)).to_numpy(dtype="float64")
    return np.where(np.isnan(r) | (local < 0), -1, r).astype(np.int64)


def _step_table(step_idx, step_num, ts, end, pid) -> pd.DataFrame:
    return pd.DataFrame({"step": step_num, "cpu_start": ts[step_idx], "cpu_end": end[step_idx],
                         "pid": pid[step_idx]}).sort_values("cpu_start").reset_index(drop=True)
