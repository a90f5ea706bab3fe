"""Synthetic PyTorch profiler (Kineto) traces with planted, exactly known times.

``make_trace(...)`` builds the Chrome-trace dict of N training steps of a Llama-style decoder
(forward with module ranges, backward on an autograd thread, FusedAdam optimizer, NCCL
communication on its own stream, memcpy/memset, idle gaps) in the shape real PyTorch writes it
(see ../shared/traces), and returns it with a :class:`Truth`: the numbers every tracekit table
must show, computed here from the planted device intervals and the labels the generator meant
(phase, module category, timeline block, collective) with plain interval arithmetic. The truth
never looks at the trace events, so it is an independent route to the same numbers.

Times are planted as integer nanoseconds; the trace writes them as float microseconds with
nanosecond decimals (``ts_format="float"``, like modern Kineto) or as integer microseconds
(``ts_format="int"``, old Kineto; every planted time is then a whole microsecond).

Definitions implemented by the truth (tracekit must implement the same; see docs/metrics.md):

* device activity: kernel, memcpy, memset; comm kernel: nccl*/rccl* names; compute: other kernels.
* step GPU window: [first start, last end] of the activities launched inside ProfilerStep#N.
* phase wall: forward [window start, first backward activity), backward [.., first optimizer
  activity), optimizer [.., window end); missing phases collapse to 0.
* phases: compute_ms / comm_ms = union of the phase-*labelled* compute / comm kernels;
  exposed_comm_ms = |(all comm ∩ wall window) − all compute|; idle_ms = |wall window − all
  activities|.
* modules: per phase wall window, each compute kernel's 1/k share of every instant where k
  compute kernels run, summed by module category; Other adds memcpy/memset time under neither
  compute nor comm; Exposed communication and Idle rows close each column to 100 %.
* gemm: union of the phase-labelled GEMM kernels vs phases.compute_ms.
* comm: per (phase label, collective): count, sum of durations, |union − all compute|.
* idle: window, union of all activities, window − busy.
* timeline: forward wall window split at every activity start; each piece goes to the block of
  the activity starting it (the last piece runs to the window end).
* mean tables: the column-wise mean of the per-step rows.
"""

from __future__ import annotations

import copy
import random
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from tracekit.testing.document import document, write_trace
from tracekit.testing.events import (
    COMM_STREAM,
    COMPUTE_STREAM,
    COPY_STREAM,
    SIDE_STREAM,
    EventWriter,
)
from tracekit.testing.kernels import (
    BMM,
    GEMM_A,
    GEMM_B,
    GEMM_C,
    GEMM_NN,
    GEMM_NT,
    K_ADAM,
    K_ADD,
    K_CAT,
    K_COPY,
    K_COS,
    K_DIV,
    K_EMB_BW,
    K_EMB_SORT,
    K_FILL,
    K_FLASH_BWD,
    K_FLASH_BWD_DOT,
    K_FLASH_FWD,
    K_INDEX,
    K_LOGSOFTMAX,
    K_LOGSOFTMAX_BW,
    K_MEAN,
    K_MUL,
    K_NEG,
    K_NLL,
    K_NLL_BW,
    K_POW,
    K_RSQRT,
    K_SILU,
    K_SILU_BW,
    K_SIN,
    K_SOFTMAX,
    K_SOFTMAX_BW,
    K_SUM,
    MEMCPY_DTOD,
    MEMCPY_HTOD,
    MEMSET,
    NCCL_AG,
    NCCL_AR,
    NCCL_GENERIC,
)
from tracekit.testing.truth import Activity, intersect_window, measure, shares, subtract, union

__all__ = [
    "COMM_STREAM",
    "COMPUTE_STREAM",
    "COPY_STREAM",
    "MODULE_ROWS",
    "NCCL_GENERIC",
    "SIDE_STREAM",
    "TABLE_KEYS",
    "Activity",
    "Truth",
    "intersect_window",
    "make_trace",
    "measure",
    "shares",
    "subtract",
    "union",
    "write_trace",
]

NS_PER_MS = 1_000_000

MODULE_ROWS = (
    "Embedding",
    "QKV",
    "RoPE",
    "Bmm0",
    "Softmax",
    "Bmm1",
    "Attention",
    "Attention other",
    "Output",
    "MLP",
    "RMSNorm",
    "Linear",
    "Other",
    "Exposed communication",
    "Idle",
)
#: The key columns of each table the truth computes (a row per step and key).
TABLE_KEYS = {
    "phases": ("phase",),
    "modules": ("phase", "module"),
    "gemm": ("phase",),
    "comm": ("phase", "collective"),
    "idle": (),
    "timeline": ("block",),
}
PHASES = ("forward", "backward", "optimizer")
BLOCKS = ("before", "attention", "ffn", "after")


@dataclass
class Truth:
    """Expected tables. ``per_step[name]`` / ``mean[name]``: lists of records (times in ms)."""

    steps: list[int]
    n_layers: int
    activities: list[Activity]
    per_step: dict[str, list[dict]] = field(default_factory=dict)
    mean: dict[str, list[dict]] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    def records(self, name: str, per_step: bool = False) -> list[dict]:
        return (self.per_step if per_step else self.mean)[name]

    def frame(self, name: str, per_step: bool = False):
        import pandas as pd

        return pd.DataFrame(self.records(name, per_step))


def _ms(ns) -> float:
    return float(Fraction(ns) / NS_PER_MS)


def compute_truth(acts: list[Activity], steps: list[int], n_layers: int) -> tuple[dict, dict]:
    per: dict[str, list[dict]] = defaultdict(list)
    for step in steps:
        A = [a for a in acts if a.step == step]
        ws, we = min(a.start for a in A), max(a.end for a in A)
        window = we - ws
        comp = [a.iv for a in A if a.compute]
        comm = [a.iv for a in A if a.comm]
        copies = [a.iv for a in A if a.kind in ("memcpy", "memset")]
        allv = [a.iv for a in A]
        first = {p: min((a.start for a in A if a.phase == p), default=None) for p in PHASES}
        b0 = first["backward"]
        o0 = first["optimizer"]
        bounds = {}
        fwd_end = b0 if b0 is not None else (o0 if o0 is not None else we)
        bounds["forward"] = (ws, fwd_end)
        bounds["backward"] = (b0, o0 if o0 is not None else we) if b0 is not None else (fwd_end, fwd_end)
        bounds["optimizer"] = (o0, we) if o0 is not None else (we, we)

        per["idle"].append(
            dict(
                step=step,
                window_ms=_ms(window),
                busy_ms=_ms(measure(allv)),
                idle_ms=_ms(window - measure(allv)),
                percent=float(Fraction(window - measure(allv)) * 100 / window),
            )
        )
        for p in PHASES:
            lo, hi = bounds[p]
            wall = hi - lo
            pcomp = measure(a.iv for a in A if a.compute and a.phase == p)
            pcomm = measure(a.iv for a in A if a.comm and a.phase == p)
            exposed = measure(subtract(intersect_window(comm, lo, hi), comp))
            idle = wall - measure(intersect_window(allv, lo, hi))
            per["phases"].append(
                dict(
                    step=step,
                    phase=p,
                    wall_ms=_ms(wall),
                    percent=float(Fraction(wall) * 100 / window),
                    compute_ms=_ms(pcomp),
                    comm_ms=_ms(pcomm),
                    exposed_comm_ms=_ms(exposed),
                    idle_ms=_ms(idle),
                )
            )
            gemm = measure(a.iv for a in A if a.compute and a.gemm and a.phase == p)
            per["gemm"].append(
                dict(
                    step=step,
                    phase=p,
                    gemm_ms=_ms(gemm),
                    compute_ms=_ms(pcomp),
                    percent=float(Fraction(gemm) * 100 / pcomp) if pcomp else 0.0,
                )
            )
            # comm table (by label, not window)
            groups: dict[str, list[Activity]] = defaultdict(list)
            for a in A:
                if a.comm and a.phase == p:
                    groups[a.collective].append(a)
            for coll, g in sorted(groups.items()):
                per["comm"].append(
                    dict(
                        step=step,
                        phase=p,
                        collective=coll,
                        count=len(g),
                        time_ms=_ms(sum(a.end - a.start for a in g)),
                        exposed_ms=_ms(measure(subtract([a.iv for a in g], comp))),
                    )
                )
            # modules (window based)
            if wall > 0:
                ck = [a for a in A if a.compute]
                sh = shares([a.iv for a in ck], lo, hi)
                rows: dict[str, Fraction] = defaultdict(Fraction)
                for a, s in zip(ck, sh):
                    if s:
                        rows[a.category or "Other"] += s
                copy_only = measure(subtract(intersect_window(copies, lo, hi), comp + comm))
                rows["Other"] += copy_only
                rows["Exposed communication"] += exposed
                rows["Idle"] += idle
                total = sum(rows.values())
                assert total == wall, (step, p, total, wall)
                for m in MODULE_ROWS:
                    if m in rows:
                        per["modules"].append(
                            dict(
                                step=step,
                                phase=p,
                                module=m,
                                time_ms=_ms(rows[m]),
                                percent=float(rows[m] * 100 / wall),
                            )
                        )
        # timeline: forward wall window partitioned at activity starts
        lo, hi = bounds["forward"]
        fa = sorted((a for a in A if lo <= a.start < hi), key=lambda a: a.start)
        tl: dict[str, int] = defaultdict(int)
        for i, a in enumerate(fa):
            nxt = fa[i + 1].start if i + 1 < len(fa) else hi
            tl[a.block] += nxt - a.start
        for blk in BLOCKS:
            if blk in tl:
                per["timeline"].append(
                    dict(
                        step=step,
                        block=blk,
                        count=n_layers if blk in ("attention", "ffn") else 1,
                        time_ms=_ms(tl[blk]),
                        percent=float(Fraction(tl[blk]) * 100 / (hi - lo)),
                    )
                )
    mean: dict[str, list[dict]] = {}
    for name, recs in per.items():
        k = TABLE_KEYS[name]
        grouped: dict[tuple, list[dict]] = {}
        for r in recs:
            grouped.setdefault(tuple(r[c] for c in k), []).append(r)
        out = []
        for key, rs in grouped.items():
            row = dict(zip(k, key))
            for col in rs[0]:
                if col in k or col == "step":
                    continue
                # missing in some step: that step contributes 0
                row[col] = sum(r[col] for r in rs) / len(steps)
            out.append(row)
        mean[name] = out
    _mean_percents(mean)
    return dict(per), mean


def _mean_percents(mean: dict[str, list[dict]]) -> None:
    """A mean table's percent is the ratio of its means (docs/metrics.md), never the mean of
    the steps' percents: of the mean step window (phases), the mean phase wall (modules), the
    mean compute time (gemm), the mean window (idle), the total of the rows (timeline)."""
    window = mean["idle"][0]["window_ms"] if mean.get("idle") else 0.0
    walls = {r["phase"]: r["wall_ms"] for r in mean.get("phases", [])}
    of = {
        "idle": lambda r: (r["idle_ms"], r["window_ms"]),
        "phases": lambda r: (r["wall_ms"], window),
        "gemm": lambda r: (r["gemm_ms"], r["compute_ms"]),
        "modules": lambda r: (r["time_ms"], walls.get(r["phase"], 0.0)),
        "timeline": lambda r: (r["time_ms"], sum(x["time_ms"] for x in mean["timeline"])),
    }
    for name, ratio in of.items():
        for r in mean.get(name, []):
            num, den = ratio(r)
            r["percent"] = num * 100 / den if den else 0.0


# ---------------------------------------------------------------------------------------------
# the builder: tracekit.testing's event writer plus the model's labels, scales and jitter


class _Builder(EventWriter):
    def __init__(self, cfg: dict):
        super().__init__(
            ts_format=cfg["ts_format"],
            big_ids=cfg["big_ids"],
            old_categories=cfg["old_categories"],
            rng=random.Random(cfg["seed"]),
            autograd_tid=48301 if cfg["backward_thread"] == "autograd" else None,
            unique_starts=True,
        )
        self.cfg = cfg
        self.rng: random.Random = random.Random(cfg["seed"])
        self.acts: list[Activity] = []
        self.lab: dict[str, Any] = dict(
            step=None, phase="forward", category=None, block=None, collective=None
        )
        self.seq = 4000
        self.mod_ids: dict[str, int] = {}
        self.cls_count: dict[str, int] = defaultdict(int)
        self.fwd_units: list[dict] = []
        self.step_scale = 1.0
        self.layer_scale = 1.0

    def d(self, us: float, jitter: bool = True) -> int:
        """A planted GPU duration: base microseconds scaled by step and layer, plus jitter."""
        ns = us * 1000 * self.step_scale * self.layer_scale
        if jitter:
            ns += self.rng.randint(0, 97)
        return self.qz(ns)

    @contextmanager
    def label(self, **kw):
        old = {k: self.lab[k] for k in kw}
        self.lab.update(kw)
        try:
            yield
        finally:
            self.lab.update(old)

    def launch(self, tid: int, name: str, dur: int, *, comm: bool = False, **kw: Any) -> Activity:  # type: ignore[override]
        """:meth:`EventWriter.launch` (same keywords), recorded as an :class:`Activity` with the
        current labels."""
        x = super().launch(tid, name, dur, **kw)
        a = Activity.launched(
            x,
            comm=comm,
            step=self.lab["step"],
            phase=self.lab["phase"],
            category=None if (comm or x.kind != "kernel") else self.lab["category"],
            block=self.lab["block"],
            collective=self.lab["collective"] if comm else None,
        )
        self.acts.append(a)
        return a


# ---------------------------------------------------------------------------------------------
# the model


def make_trace(
    n_layers: int = 2,
    n_steps: int = 2,
    attention: str = "eager",
    module_source: str = "nn_module",
    backward_thread: str = "autograd",
    fwd_thread_id: str = "real",
    comm: bool = True,
    forward_allgather: bool = True,
    side_stream: bool = True,
    rotary_module: bool = True,
    zero_grad: bool = True,
    optimizer: bool = True,
    ts_format: str = "float",
    big_ids: bool = False,
    old_categories: bool = False,
    shuffle: bool = False,
    seed: int = 0,
    first_step: int = 5,
) -> tuple[dict, Truth]:
    """Build a synthetic trace and its truth.

    attention: "eager" (Bmm0/Softmax/Bmm1) or "sdpa" (flash attention).
    module_source: "nn_module" (python_function ``nn.Module: X_N`` events), "capture"
    (``tracekit.module:``/``tracekit.phase:`` user annotations) or "both".
    backward_thread: "autograd" (a pt_autograd_0 thread) or "main" (CPU-style).
    fwd_thread_id: "real" (forward ops carry Fwd thread id 0, backward nodes 1, as real PyTorch
    writes them) or "tid" (forward ops carry none, backward nodes the main thread's OS tid).
    """
    assert attention in ("eager", "sdpa")
    assert module_source in ("nn_module", "capture", "both")
    assert backward_thread in ("autograd", "main")
    assert fwd_thread_id in ("real", "tid")
    assert ts_format in ("float", "int")
    assert n_layers >= 1 and n_steps >= 1
    cfg = dict(
        n_layers=n_layers,
        n_steps=n_steps,
        attention=attention,
        module_source=module_source,
        backward_thread=backward_thread,
        fwd_thread_id=fwd_thread_id,
        comm=comm,
        forward_allgather=forward_allgather,
        side_stream=side_stream,
        rotary_module=rotary_module,
        zero_grad=zero_grad,
        optimizer=optimizer,
        ts_format=ts_format,
        big_ids=big_ids,
        old_categories=old_categories,
        shuffle=shuffle,
        seed=seed,
        first_step=first_step,
    )
    b = _Builder(cfg)
    M = b.main
    nn_mod = module_source in ("nn_module", "both")
    cap = module_source in ("capture", "both")
    steps = list(range(first_step, first_step + n_steps))

    # --- helpers bound to this build ------------------------------------------------------------
    def fwd_tid_args(forward: bool) -> dict:
        if fwd_thread_id == "tid":  # forward ops: no thread id; backward nodes: the OS tid
            return {} if forward else {"Fwd thread id": M}
        return {"Fwd thread id": 0 if forward else 1}  # what real PyTorch writes

    @contextmanager
    def module(cls: str, qual: str):
        if qual not in b.mod_ids:
            b.mod_ids[qual] = b.cls_count[cls]
            b.cls_count[cls] += 1
        inst = b.mod_ids[qual]
        with _maybe(
            cap, lambda: b.rng_(M, f"tracekit.module:{cls}:{qual}", "user_annotation", pre=0.8, post=0.6)
        ):
            if nn_mod:
                with b.pyfunc(M, f"nn.Module: {cls}_{inst}", {"Python module id": inst}):
                    with b.pyfunc(M, "torch/nn/modules/module.py(1750): _call_impl"):
                        src = (
                            "torch/nn/modules/linear.py(125): forward"
                            if cls == "Linear"
                            else "torch/nn/modules/sparse.py(190): forward"
                            if cls == "Embedding"
                            else "torch/nn/modules/activation.py(432): forward"
                            if cls == "SiLU"
                            else f"transformers/models/llama/modeling_llama.py({100 + 17 * len(cls)}): forward"
                        )
                        with b.pyfunc(M, src):
                            yield
            else:
                yield

    @contextmanager
    def rotary():
        """apply_rotary_pos_emb's ops inside attention: RoPE where the trace records the python
        frame that says so (nn.Module events come with stacks), else attention glue."""
        if nn_mod:
            with (
                b.label(category="RoPE"),
                b.pyfunc(M, "transformers/models/llama/modeling_llama.py(151): apply_rotary_pos_emb"),
            ):
                yield
        else:
            with b.label(category="Attention other"):
                yield

    def unit(
        op: str,
        kernels: list,
        *,
        inner: list[str] = (),
        bwd: tuple | None = None,
        tid: int | None = None,
        extra_args: dict | None = None,
    ):
        """A forward op (with inner op chain) launching kernels; registers its backward node.

        kernels: [(name, dur_ns, kind)], bwd: (node, [(op, [(kernel, dur_ns)])]).
        """
        tid = M if tid is None else tid
        seq = None
        sargs: dict = dict(extra_args or {})
        if bwd is not None:
            b.seq += 1
            seq = b.seq
            sargs.update({"Sequence number": seq, **fwd_tid_args(True)})
        with b.rng_(tid, op, args=sargs) as outer:
            boxes = [outer]
            stack = []
            for name in inner:
                cm = b.rng_(tid, name, args=sargs)
                boxes.append(cm.__enter__())
                stack.append(cm)
            for kname, kdur, kind in kernels:
                b.launch(tid, kname, kdur, kind=kind)
            for cm in reversed(stack):
                cm.__exit__(None, None, None)
        if bwd is not None:
            b.fwd_units.append(
                dict(
                    seq=seq,
                    bwd=bwd,
                    category=b.lab["category"],
                    layer=cur_layer[0],
                    fwd_box=boxes[-1],
                    scale=b.layer_scale,
                )
            )

    def linear(qual: str, us: float, gemm: str, bgemms=(GEMM_NN, GEMM_NT)):
        with module("Linear", qual):
            with _maybe(nn_mod, lambda: b.pyfunc(M, "<built-in function linear>", pre=0.3, post=0.2)):
                unit(
                    "aten::linear",
                    [(gemm, b.d(us), "kernel")],
                    inner=["aten::matmul", "aten::mm"],
                    bwd=(
                        "MmBackward0",
                        [("aten::mm", [(bgemms[0], us)]), ("aten::mm", [(bgemms[1], us * 1.1)])],
                    ),
                )

    def ew(op: str, kname: str, us: float, bwd_node: str | None = None, bwd_k: list | None = None):
        """One elementwise op and kernel; bwd_k: [(backward op, kernel, us)] (default: the same op)."""
        bwd = None
        if bwd_node is not None:
            bwd = (bwd_node, [(o, [(k, u)]) for o, k, u in (bwd_k or [(op, kname, us)])])
        unit(op, [(kname, b.d(us), "kernel")], bwd=bwd)

    def rmsnorm(qual: str, us: float):
        with module("LlamaRMSNorm", qual):
            ew("aten::to", K_COPY, us * 0.6, "ToCopyBackward0")
            ew("aten::pow", K_POW, us * 0.5, "PowBackward0", [("aten::pow", K_POW, us * 0.6)])
            ew("aten::mean", K_MEAN, us, "MeanBackward1", [("aten::div", K_DIV, us * 0.4)])
            ew("aten::add", K_ADD, us * 0.4)
            ew(
                "aten::rsqrt",
                K_RSQRT,
                us * 0.4,
                "RsqrtBackward0",
                [("aten::rsqrt_backward", K_MUL, us * 0.5)],
            )
            ew("aten::mul", K_MUL, us * 0.5, "MulBackward0", [("aten::mul", K_MUL, us * 0.5)])
            unit(
                "aten::mul",
                [(K_MUL, b.d(us * 0.55), "kernel")],
                bwd=(
                    "MulBackward0",
                    [("aten::mul", [(K_MUL, us * 0.5)]), ("aten::sum", [(K_SUM, us * 0.9)])],
                ),
            )

    def attn_block(i: int):
        p = f"model.layers.{i}.self_attn"
        with module("LlamaAttention", p):
            with b.label(category="QKV"):
                linear(f"{p}.q_proj", 52, GEMM_A)
                linear(f"{p}.k_proj", 21, GEMM_B)
                linear(f"{p}.v_proj", 22, GEMM_B)
            with b.rng_(M, "aten::view", pre=0.5, post=0.3):
                pass
            with b.rng_(M, "aten::transpose", pre=0.5, post=0.3):
                pass
            if attention == "eager":
                with rotary():
                    for _ in ("q", "k"):
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        with b.rng_(M, "aten::slice", pre=0.4, post=0.3):
                            pass
                        ew("aten::neg", K_NEG, 3.5, "NegBackward0")
                        unit("aten::cat", [(K_CAT, b.d(5), "kernel")], bwd=("CatBackward0", []))
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        unit("aten::add", [(K_ADD, b.d(4.2), "kernel")], bwd=("AddBackward0", []))
                with b.label(category="Bmm0"):
                    unit(
                        "aten::matmul",
                        [(BMM, b.d(31), "kernel")],
                        inner=["aten::bmm"],
                        bwd=("BmmBackward0", [("aten::bmm", [(BMM, 30)]), ("aten::bmm", [(BMM, 29)])]),
                    )
                with b.label(category="Softmax"):
                    ew("aten::mul", K_MUL, 8, "MulBackward0")
                    unit("aten::add", [(K_ADD, b.d(8.5), "kernel")], bwd=("AddBackward0", []))
                    unit(
                        "aten::softmax",
                        [(K_SOFTMAX, b.d(19), "kernel")],
                        inner=["aten::_softmax"],
                        bwd=("SoftmaxBackward0", [("aten::_softmax_backward_data", [(K_SOFTMAX_BW, 23)])]),
                    )
                    ew("aten::to", K_COPY, 7, "ToCopyBackward0")
                with b.label(category="Bmm1"):
                    unit(
                        "aten::matmul",
                        [(BMM, b.d(28), "kernel")],
                        inner=["aten::bmm"],
                        bwd=("BmmBackward0", [("aten::bmm", [(BMM, 27)]), ("aten::bmm", [(BMM, 26)])]),
                    )
                with b.label(category="Attention other"):
                    unit(
                        "aten::contiguous",
                        [(K_COPY, b.d(9), "kernel")],
                        inner=["aten::clone", "aten::copy_"],
                        bwd=("CloneBackward0", []),
                    )
            else:
                with rotary():
                    for _ in ("q", "k"):
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        ew("aten::neg", K_NEG, 3.5, "NegBackward0")
                        unit("aten::cat", [(K_CAT, b.d(5), "kernel")], bwd=("CatBackward0", []))
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        unit("aten::add", [(K_ADD, b.d(4.2), "kernel")], bwd=("AddBackward0", []))
                with b.label(category="Attention"):
                    unit(
                        "aten::scaled_dot_product_attention",
                        [(K_FLASH_FWD, b.d(64), "kernel")],
                        inner=["aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward"],
                        bwd=(
                            "ScaledDotProductFlashAttentionBackward0",
                            [
                                (
                                    "aten::_scaled_dot_product_flash_attention_backward",
                                    [(K_FLASH_BWD_DOT, 6), (K_FLASH_BWD, 150)],
                                )
                            ],
                        ),
                    )
                with b.label(category="Attention other"):
                    unit(
                        "aten::contiguous",
                        [(K_COPY, b.d(9), "kernel")],
                        inner=["aten::clone", "aten::copy_"],
                        bwd=("CloneBackward0", []),
                    )
            with b.label(category="Output"):
                linear(f"{p}.o_proj", 47, GEMM_C)

    def mlp_block(i: int):
        p = f"model.layers.{i}.mlp"
        with module("LlamaMLP", p):
            with b.label(category="MLP"):
                linear(f"{p}.gate_proj", 131, GEMM_A)
                with module("SiLU", f"{p}.act_fn"):
                    unit(
                        "aten::silu",
                        [(K_SILU, b.d(11), "kernel")],
                        bwd=("SiluBackward0", [("aten::silu_backward", [(K_SILU_BW, 14)])]),
                    )
                linear(f"{p}.up_proj", 128, GEMM_A)
                ew("aten::mul", K_MUL, 12, "MulBackward0")
                linear(f"{p}.down_proj", 125, GEMM_B)

    cur_layer = [None]
    layer_gap_us = [7.3, 12.9, 4.1, 9.7, 15.2, 3.3]

    # --- the steps -------------------------------------------------------------------------------
    for si, step in enumerate(steps):
        b.step_scale = 1.0 + 0.17 * si
        b.layer_scale = 1.0
        b.fwd_units = []
        b.lab.update(step=step, phase="forward", category=None, block="before", collective=None)
        b.adv(M, 40)
        with b.rng_(M, f"ProfilerStep#{step}", "user_annotation", pre=9, post=4) as ps_box:
            step_first_launch = len(b.acts)
            if zero_grad:
                with b.rng_(M, "Optimizer.zero_grad#FusedAdam.zero_grad", "user_annotation"):
                    unit("aten::zero_", [(K_FILL, b.d(3.1), "kernel")], inner=["aten::fill_"])
            with _maybe(
                cap, lambda: b.rng_(M, "tracekit.phase:forward", "user_annotation", pre=0.5, post=0.5)
            ):
                # input ids to the device
                with b.rng_(M, "aten::to"), b.rng_(M, "aten::_to_copy"), b.rng_(M, "aten::copy_"):
                    b.launch(M, MEMCPY_HTOD, b.d(4.4), kind="memcpy", gap=b.qz(1900))
                if comm and forward_allgather:
                    # ZeRO-3 style parameter gather: starts in an idle gap, runs into the embedding
                    with b.label(collective="AllGather"):
                        with b.rng_(
                            M,
                            "record_param_comms",
                            args={
                                "Collective name": "_allgather_base",
                                "dtype": "BFloat16",
                                "Process Group Name": "0",
                                "Group size": 8,
                            },
                        ):
                            b.runtime_only(M, "cudaEventRecord", 1.2, 135)
                            b.runtime_only(M, "cudaStreamWaitEvent", 1.1, 147)
                            b.launch(
                                M,
                                NCCL_AG,
                                b.d(38),
                                stream=COMM_STREAM,
                                comm=True,
                                start=b.stream_end[COMPUTE_STREAM] + b.qz(2100),
                            )
                with module("LlamaForCausalLM", ""):
                    with module("LlamaModel", "model"):
                        with b.label(category="Embedding"):
                            with module("Embedding", "model.embed_tokens"):
                                unit(
                                    "aten::embedding",
                                    [(K_INDEX, b.d(24), "kernel")],
                                    inner=["aten::index_select"],
                                    bwd=(
                                        "EmbeddingBackward0",
                                        [
                                            (
                                                "aten::embedding_dense_backward",
                                                [("memset", 2.2), (K_EMB_SORT, 6), (K_EMB_BW, 21)],
                                            )
                                        ],
                                    ),
                                )
                        # stream 7 gap 16.4 us after the embedding: memcpy on the copy stream
                        # starts under the embedding kernel and runs into the gap
                        emb_end = b.stream_end[COMPUTE_STREAM]
                        with b.rng_(M, "aten::copy_"):
                            b.launch(
                                M,
                                MEMCPY_DTOD,
                                b.d(11.5),
                                kind="memcpy",
                                stream=COPY_STREAM,
                                start=emb_end - b.qz(4300),
                            )
                        if rotary_module:
                            with b.label(category="RoPE"), module("LlamaRotaryEmbedding", "model.rotary_emb"):
                                st = SIDE_STREAM if side_stream else COMPUTE_STREAM
                                with b.rng_(M, "aten::matmul"), b.rng_(M, "aten::bmm"):
                                    pass
                                with b.rng_(M, "aten::cat"):
                                    b.launch(
                                        M,
                                        K_CAT,
                                        b.d(4.5),
                                        stream=st,
                                        start=(emb_end - b.qz(9700)) if side_stream else None,
                                        gap=b.qz(16400),
                                    )
                                with b.rng_(M, "aten::cos"):
                                    b.launch(M, K_COS, b.d(3.9), stream=st)
                                with b.rng_(M, "aten::sin"):
                                    b.launch(M, K_SIN, b.d(3.7), stream=st)
                        if comm and forward_allgather:
                            with b.label(collective="AllGather"):
                                with b.rng_(M, "nccl:all_gather", "user_annotation"):
                                    b.launch(
                                        M,
                                        NCCL_GENERIC,
                                        b.d(27),
                                        stream=COMM_STREAM,
                                        comm=True,
                                        api="cuLaunchKernelEx",
                                        start=max(b.stream_end[COMPUTE_STREAM], b.stream_end[SIDE_STREAM])
                                        + b.qz(1300),
                                    )
                        first_gap = True
                        for i in range(n_layers):
                            cur_layer[0] = i
                            b.layer_scale = 1.0 + 0.09 * i
                            # planted idle gap between layers
                            b.stream_end[COMPUTE_STREAM] += (
                                b.qz(layer_gap_us[i % len(layer_gap_us)] * 1000 * b.step_scale)
                                if not first_gap
                                else b.qz(16400)
                            )
                            first_gap = False
                            with b.label(block="attention"), module("LlamaDecoderLayer", f"model.layers.{i}"):
                                with b.label(category="RMSNorm"):
                                    rmsnorm(f"model.layers.{i}.input_layernorm", 5)
                                attn_block(i)
                                with b.label(category=None):
                                    unit("aten::add", [(K_ADD, b.d(7), "kernel")], bwd=("AddBackward0", []))
                                with b.label(block="ffn"):
                                    with b.label(category="RMSNorm"):
                                        rmsnorm(f"model.layers.{i}.post_attention_layernorm", 5.5)
                                    mlp_block(i)
                                    with b.label(category=None):
                                        unit(
                                            "aten::add",
                                            [(K_ADD, b.d(7.5), "kernel")],
                                            bwd=("AddBackward0", []),
                                        )
                        cur_layer[0] = None
                        b.layer_scale = 1.0
                        with b.label(block="after", category="RMSNorm"):
                            rmsnorm("model.norm", 5.2)
                    with b.label(block="after", category="Linear"):
                        linear("lm_head", 290, GEMM_C)
                # loss: outside every module
                with b.label(block="after", category=None):
                    with b.rng_(M, "aten::cross_entropy_loss"):
                        unit(
                            "aten::log_softmax",
                            [(K_LOGSOFTMAX, b.d(26), "kernel")],
                            inner=["aten::_log_softmax"],
                            bwd=(
                                "LogSoftmaxBackward0",
                                [("aten::_log_softmax_backward_data", [(K_LOGSOFTMAX_BW, 24)])],
                            ),
                        )
                        unit(
                            "aten::nll_loss_nd",
                            [(K_NLL, b.d(9), "kernel")],
                            inner=["aten::nll_loss_forward"],
                            bwd=("NllLossBackward0", [("aten::nll_loss_backward", [(K_NLL_BW, 8)])]),
                        )
            b.t[M]

            # ---------------- backward
            b.lab.update(phase="backward", block=None, category=None)
            with _maybe(
                cap, lambda: b.rng_(M, "tracekit.phase:backward", "user_annotation", pre=0.5, post=0.5)
            ):
                with _maybe(nn_mod, lambda: b.pyfunc(M, "torch/_tensor.py(648): backward")):
                    with _maybe(
                        nn_mod,
                        lambda: b.pyfunc(
                            M,
                            "<built-in method run_backward of torch._C._EngineBase object at 0x7f3a2c1b0e40>",
                        ),
                    ):
                        A = b.auto
                        if A != M:
                            b.t[A] = b.t[M] + b.qz(6000)
                        b.stream_end[COMPUTE_STREAM] += b.qz(23700 * b.step_scale)  # idle before backward
                        prev_layer = "head"
                        layer_seen = []
                        for u in reversed(b.fwd_units):
                            if u["layer"] != prev_layer and prev_layer not in ("head",):
                                _after_layer(b, A, prev_layer, comm, layer_seen, n_layers)
                            if u["layer"] != prev_layer:
                                layer_seen.append(u["layer"])
                            prev_layer = u["layer"]
                            node, ops = u["bwd"]
                            b.layer_scale = u["scale"]
                            with b.label(category=u["category"]):
                                with b.rng_(
                                    A,
                                    f"autograd::engine::evaluate_function: {node}",
                                    args={"Sequence number": u["seq"], **fwd_tid_args(False)},
                                ):
                                    with b.rng_(
                                        A, node, args={"Sequence number": u["seq"], **fwd_tid_args(False)}
                                    ) as nb:
                                        for opname, ks in ops:
                                            with b.rng_(A, opname):
                                                for kname, us in ks:
                                                    if kname == "memset":
                                                        b.launch(A, MEMSET, b.d(us), kind="memset")
                                                    else:
                                                        b.launch(A, kname, b.d(us))
                                    # fwdbwd flow: forward op -> backward node
                                    b.n_flow += 1
                                    fid = b._id(b.n_flow)
                                    fb = u["fwd_box"]
                                    b.events.append(
                                        {
                                            "ph": "s",
                                            "id": fid,
                                            "pid": b.pid,
                                            "tid": M,
                                            "ts": b.ts(fb["start"]),
                                            "cat": "fwdbwd",
                                            "name": "fwdbwd",
                                        }
                                    )
                                    b.events.append(
                                        {
                                            "ph": "f",
                                            "id": fid,
                                            "pid": b.pid,
                                            "tid": A,
                                            "ts": b.ts(nb["start"]),
                                            "cat": "fwdbwd",
                                            "name": "fwdbwd",
                                            "bp": "e",
                                        }
                                    )
                        b.layer_scale = 1.0
                        _after_layer(b, A, prev_layer, comm, layer_seen, n_layers, last=True)
                        if A != M:
                            b.t[M] = max(b.t[M], b.t[A]) + b.qz(4000)

            # ---------------- optimizer
            if optimizer:
                b.lab.update(phase="optimizer", category=None, block=None)
                with _maybe(
                    cap, lambda: b.rng_(M, "tracekit.phase:optimizer", "user_annotation", pre=0.5, post=0.5)
                ):
                    with b.rng_(M, "Optimizer.step#FusedAdam.step", "user_annotation"):
                        with b.rng_(M, "aten::zero_"), b.rng_(M, "aten::fill_"):
                            b.launch(M, MEMSET, b.d(1.9), kind="memset", gap=b.qz(61300 * b.step_scale))
                        with b.rng_(M, "aten::_fused_adam_"):
                            b.launch(M, K_ADAM, b.d(41))
                            b.launch(M, K_ADAM, b.d(39), gap=b.qz(2200))
            # end of step: wait for the device
            b.lab.update(phase="forward")
            dev_end = max(a.end for a in b.acts[step_first_launch:])
            with b.rng_(M, "aten::item"), b.rng_(M, "aten::_local_scalar_dense"):
                s0 = b.t[M]
                b.t[M] = max(b.t[M] + b.qz(3000), dev_end + b.qz(2000))
                b.emit(
                    "X",
                    "cuda_runtime",
                    "cudaStreamSynchronize",
                    b.pid,
                    M,
                    s0,
                    b.t[M],
                    {"External id": b.ext_stack[M][-1], "cbid": 131, "correlation": b.corr()},
                )
        # device-side projection of the step range (gpu_user_annotation), like real traces
        mine = [a for a in b.acts if a.step == step]
        b.emit(
            "X",
            "gpu_user_annotation",
            f"ProfilerStep#{step}",
            b.device,
            COMPUTE_STREAM,
            min(a.start for a in mine),
            max(a.end for a in mine),
            {"External id": 0},
        )
        for u in b.fwd_units:
            u.pop("fwd_box", None)
        del ps_box

    trace = _finish(b, cfg)
    per, mean = compute_truth(b.acts, steps, n_layers)
    truth = Truth(
        steps=steps, n_layers=n_layers, activities=list(b.acts), per_step=per, mean=mean, config=cfg
    )
    return trace, truth


def _after_layer(b: _Builder, A: int, layer, comm: bool, seen: list, n_layers: int, last: bool = False):
    """Gradient hooks after a layer's backward: AccumulateGrad, whose post hook (DDP/ZeRO style)
    launches the gradient communication, nested in the node's evaluate_function range."""
    with b.label(category=None):
        with b.rng_(A, "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"):
            with b.rng_(A, "torch::autograd::AccumulateGrad"), b.rng_(A, "aten::add_"):
                b.launch(A, K_ADD, b.d(5.5))
            if comm:
                _grad_comm(b, A, layer, n_layers, last)


def _grad_comm(b: _Builder, A: int, layer, n_layers: int, last: bool) -> None:
    rpc = {"dtype": "BFloat16", "Process Group Name": "0", "Group size": 8}
    if layer == n_layers - 1 and not last:
        # fully overlapped with the next layer's backward compute
        with b.label(collective="AllReduce"):
            with b.rng_(A, "record_param_comms", args={"Collective name": "allreduce", **rpc}):
                with b.rng_(A, "nccl:all_reduce", "user_annotation"):
                    b.launch(
                        A,
                        NCCL_AR,
                        b.d(36),
                        stream=COMM_STREAM,
                        comm=True,
                        start=b.stream_end[COMPUTE_STREAM] + b.qz(800),
                    )
    elif layer == 0 and not last:
        # generic kernel: collective only from record_param_comms; partly exposed
        with b.label(collective="ReduceScatter"):
            with b.rng_(A, "record_param_comms", args={"Collective name": "reduce_scatter", **rpc}):
                b.launch(
                    A,
                    NCCL_GENERIC,
                    b.d(44),
                    stream=COMM_STREAM,
                    comm=True,
                    api="cuLaunchKernelEx",
                    start=max(b.stream_end[COMPUTE_STREAM], b.stream_end[COMM_STREAM]) + b.qz(600),
                )
    elif last:
        # the last gradient bucket: exposed, and runs on into the optimizer
        with b.label(collective="AllReduce"):
            with b.rng_(A, "record_param_comms", args={"Collective name": "allreduce", **rpc}):
                b.launch(
                    A,
                    NCCL_AR,
                    b.d(112),
                    stream=COMM_STREAM,
                    comm=True,
                    start=max(b.stream_end[COMPUTE_STREAM], b.stream_end[COMM_STREAM]) + b.qz(3100),
                )


@contextmanager
def _maybe(cond: bool, factory):
    if cond:
        with factory() as x:
            yield x
    else:
        yield None


def _finish(b: _Builder, cfg: dict) -> dict:
    return document(b, rank=0, world_size=8, shuffle_seed=cfg["seed"] + 1 if cfg["shuffle"] else None)


def clone(trace: dict) -> dict:
    return copy.deepcopy(trace)
