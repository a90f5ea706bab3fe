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
import gzip
import json
import random
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Iterable

__all__ = [
    "Activity",
    "Truth",
    "make_trace",
    "write_trace",
    "union",
    "measure",
    "subtract",
    "intersect_window",
    "MODULE_ROWS",
]

NS_PER_MS = 1_000_000

# ---------------------------------------------------------------------------------------------
# kernel names (real ones, from real traces and cuBLAS/flash/nccl builds)

GEMM_A = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
          "_execute_segment_k_off_kernel__5x_cublas")
GEMM_B = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT"
GEMM_C = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
GEMM_NN = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_nn"
GEMM_NT = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x256x64_warpgroupsize2x1x1"
           "_execute_segment_k_off_kernel__5x_cublas")
BMM = ("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8>"
       "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_128x2_tn_align8::Params)")
GEMMS = frozenset({GEMM_A, GEMM_B, GEMM_C, GEMM_NN, GEMM_NT, BMM})


def _ew(functor: str, n: int = 3) -> str:
    t = "c10::BFloat16"
    f = f"at::native::BinaryFunctor<{t}, {t}, {t}, {functor}>"
    return (f"void at::native::vectorized_elementwise_kernel<4, {f}, std::array<char*, {n}ul> >"
            f"(int, {f}, std::array<char*, {n}ul>)")


def _un(functor: str) -> str:
    return (f"void at::native::vectorized_elementwise_kernel<4, {functor}, std::array<char*, 2ul> >"
            f"(int, {functor}, std::array<char*, 2ul>)")


K_MUL = _ew("at::native::binary_internal::MulFunctor<float>")
K_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
K_DIV = _ew("at::native::binary_internal::DivFunctor<float>")
K_NEG = _un("at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const"
            "::{lambda()#8}::operator()() const::{lambda(c10::BFloat16)#1}")
K_CAT = ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_aligned16_contig<at::native::"
         "(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 128, 1>(at::native::(anonymous namespace)"
         "::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::"
         "(anonymous namespace)::OpaqueType<2u>, unsigned int, 128, 1>, at::native::(anonymous namespace)"
         "::TensorSizeStride<unsigned int, 4u>, int, unsigned int)")
K_COPY = ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
          "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
          "{lambda()#7}::operator()() const::{lambda(float)#1}>(at::TensorIteratorBase&, at::native::"
          "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
          "{lambda()#7}::operator()() const::{lambda(float)#1} const&)::{lambda(int)#1}>(int, at::native::"
          "gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
          "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}>"
          "(at::TensorIteratorBase&, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::"
          "{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1} const&)"
          "::{lambda(int)#1})")
K_POW = _un("at::native::(anonymous namespace)::pow_tensor_scalar_kernel_impl<float, float>(at::"
            "TensorIteratorBase&, float)::{lambda(float)#2}")
K_MEAN = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, "
          "float, float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::"
          "MeanOps<float, float, float, float>, unsigned int, float, 4, 4>)")
K_SUM = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t"
         "<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
         "{lambda(float, float)#1}>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::"
         "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()(at::"
         "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4>)")
K_RSQRT = _un("at::native::rsqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const"
              "::{lambda()#2}::operator()() const::{lambda(float)#1}")
K_SILU = _un("at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::{lambda()#1}::"
             "operator()() const::{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}")
K_SILU_BW = _ew("at::native::(anonymous namespace)::silu_backward_kernel(at::TensorIteratorBase&)::"
                "{lambda()#1}::operator()() const::{lambda()#4}::operator()() const::"
                "{lambda(c10::BFloat16, c10::BFloat16)#1}")
K_COS = _un("at::native::cos_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
            "{lambda()#2}::operator()() const::{lambda(float)#1}")
K_SIN = _un("at::native::sin_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::"
            "{lambda()#2}::operator()() const::{lambda(float)#1}")
K_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::BFloat16>, "
          "std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, std::array<char*, 1ul>)")
K_SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
             "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
K_SOFTMAX_BW = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
                "at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, "
                "float const*, long)")
K_INDEX = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned "
           "int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::"
           "detail::TensorInfo<c10::BFloat16 const, unsigned int>, at::cuda::detail::TensorInfo<long const, "
           "unsigned int>, int, int, unsigned int, unsigned int, long)")
K_EMB_BW = ("void at::native::(anonymous namespace)::embedding_backward_feature_kernel<c10::BFloat16, "
            "float, long>(long const*, c10::BFloat16 const*, c10::BFloat16*, int, long, int, int)")
K_EMB_SORT = ("void at::native::(anonymous namespace)::compute_num_of_partial_segments<long>(long const*, "
              "long const*, long const*, long*)")
K_LOGSOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)")
K_LOGSOFTMAX_BW = ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
                   "at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, "
                   "float const*, long)")
K_NLL = ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, "
         "long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)")
K_NLL_BW = ("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>"
            "(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)")
K_FLASH_FWD = ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, "
               "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, "
               "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::"
               "Flash_fwd_params)")
K_FLASH_BWD_DOT = ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits"
                   "<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::"
                   "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::"
                   "Flash_bwd_params)")
K_FLASH_BWD = ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
               "Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
               "pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, true, "
               "false, false, false, true, true, false>(pytorch_flash::Flash_bwd_params)")
K_ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
          "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, "
          "4, (at::native::ADAM_MODE)0, false>, double*, double, double, double, double, double, bool, "
          "float const*, float const*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::"
          "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)0, false>, double*, "
          "double, double, double, double, double, bool, float const*, float const*)")
NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"
NCCL_GENERIC = "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"

MEMCPY_HTOD = "Memcpy HtoD (Pinned -> Device)"
MEMCPY_DTOD = "Memcpy DtoD (Device -> Device)"
MEMSET = "Memset (Device)"

MODULE_ROWS = ("Embedding", "QKV", "RoPE", "Bmm0", "Softmax", "Bmm1", "Attention", "Output", "MLP",
               "RMSNorm", "Linear", "Other", "Exposed communication", "Idle")
PHASES = ("forward", "backward", "optimizer")
BLOCKS = ("before", "attention", "ffn", "after")

COMPUTE_STREAM = 7
COMM_STREAM = 20
COPY_STREAM = 13
SIDE_STREAM = 22

_OLD_CATS = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "cuda_driver": "Driver",
             "kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}


# ---------------------------------------------------------------------------------------------
# interval arithmetic (half-open [start, end) in integer ns)

def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def measure(intervals: Iterable[tuple[int, int]]) -> int:
    return sum(e - s for s, e in union(intervals))


def intersect_window(intervals: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in intervals if min(e, hi) > max(s, lo)]


def subtract(a: Iterable[tuple[int, int]], b: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Union of ``a`` minus union of ``b``."""
    out = []
    bu = union(b)
    for s, e in union(a):
        cur = s
        for bs, be in bu:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


def shares(intervals: list[tuple[int, int]], lo: int, hi: int) -> list[Fraction]:
    """Each interval's share of [lo, hi): at an instant with k intervals active each gets 1/k."""
    pts = sorted({lo, hi} | {min(max(x, lo), hi) for s, e in intervals for x in (s, e)})
    out = [Fraction(0)] * len(intervals)
    for a, b in zip(pts, pts[1:]):
        if b <= a:
            continue
        active = [i for i, (s, e) in enumerate(intervals) if s <= a and e >= b]
        for i in active:
            out[i] += Fraction(b - a, len(active))
    return out


# ---------------------------------------------------------------------------------------------
# the planted truth

@dataclass
class Activity:
    """One planted device activity with the labels the generator meant it to have."""

    step: int
    start: int  # ns
    end: int  # ns
    kind: str  # kernel | memcpy | memset
    name: str
    stream: int
    correlation: int
    phase: str  # forward | backward | optimizer
    category: str | None  # module category (compute kernels), None: Other
    block: str | None  # timeline block (forward activities)
    collective: str | None  # comm kernels
    comm: bool = False
    gemm: bool = False
    launch_ts: int = 0  # ns, start of the runtime call

    @property
    def compute(self) -> bool:
        return self.kind == "kernel" and not self.comm

    @property
    def iv(self) -> tuple[int, int]:
        return (self.start, self.end)


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

        per["idle"].append(dict(step=step, window_ms=_ms(window), busy_ms=_ms(measure(allv)),
                                idle_ms=_ms(window - measure(allv)),
                                percent=float(Fraction(window - measure(allv)) * 100 / window)))
        for p in PHASES:
            lo, hi = bounds[p]
            wall = hi - lo
            pcomp = measure(a.iv for a in A if a.compute and a.phase == p)
            pcomm = measure(a.iv for a in A if a.comm and a.phase == p)
            exposed = measure(subtract(intersect_window(comm, lo, hi), comp))
            idle = wall - measure(intersect_window(allv, lo, hi))
            per["phases"].append(dict(step=step, phase=p, wall_ms=_ms(wall),
                                      percent=float(Fraction(wall) * 100 / window),
                                      compute_ms=_ms(pcomp), comm_ms=_ms(pcomm),
                                      exposed_comm_ms=_ms(exposed), idle_ms=_ms(idle)))
            gemm = measure(a.iv for a in A if a.compute and a.gemm and a.phase == p)
            per["gemm"].append(dict(step=step, phase=p, gemm_ms=_ms(gemm), compute_ms=_ms(pcomp),
                                    percent=float(Fraction(gemm) * 100 / pcomp) if pcomp else 0.0))
            # comm table (by label, not window)
            groups: dict[str, list[Activity]] = defaultdict(list)
            for a in A:
                if a.comm and a.phase == p:
                    groups[a.collective].append(a)
            for coll, g in sorted(groups.items()):
                per["comm"].append(dict(step=step, phase=p, collective=coll, count=len(g),
                                        time_ms=_ms(sum(a.end - a.start for a in g)),
                                        exposed_ms=_ms(measure(subtract([a.iv for a in g], comp)))))
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
                        per["modules"].append(dict(step=step, phase=p, module=m, time_ms=_ms(rows[m]),
                                                   percent=float(rows[m] * 100 / wall)))
        # timeline: forward wall window partitioned at activity starts
        lo, hi = bounds["forward"]
        fa = sorted((a for a in A if lo <= a.start < hi), key=lambda a: a.start)
        tl: dict[str, int] = defaultdict(int)
        for i, a in enumerate(fa):
            nxt = fa[i + 1].start if i + 1 < len(fa) else hi
            tl[a.block] += nxt - a.start
        for blk in BLOCKS:
            if blk in tl:
                per["timeline"].append(dict(step=step, block=blk,
                                            count=n_layers if blk in ("attention", "ffn") else 1,
                                            time_ms=_ms(tl[blk]),
                                            percent=float(Fraction(tl[blk]) * 100 / (hi - lo))))
    mean: dict[str, list[dict]] = {}
    keys = {"phases": ("phase",), "modules": ("phase", "module"), "gemm": ("phase",),
            "comm": ("phase", "collective"), "idle": (), "timeline": ("block",)}
    for name, recs in per.items():
        k = keys[name]
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
    return dict(per), mean


# ---------------------------------------------------------------------------------------------
# the builder

class _Builder:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.rng = random.Random(cfg["seed"])
        self.q = 1000 if cfg["ts_format"] == "int" else 1  # quantum in ns
        self.big = cfg["big_ids"]
        self.pid = 48213
        self.main = 48213
        self.auto = 48301 if cfg["backward_thread"] == "autograd" else self.main
        self.device = 0
        self.t = {self.main: 1_700_000_000_123_456 if self.q == 1 else 1_700_000_000_123_000}
        self.t[self.auto] = self.t[self.main]
        self.stream_end: dict[int, int] = defaultdict(int)
        self.events: list[dict] = []
        self.acts: list[Activity] = []
        self.lab: dict[str, Any] = dict(step=None, phase="forward", category=None, block=None,
                                        collective=None)
        self.ext_stack: dict[int, list[int]] = defaultdict(list)
        self.py_stack: dict[int, list[int]] = defaultdict(list)
        self.n_corr = 0
        self.n_ext = 0
        self.n_py = 0
        self.n_flow = 0
        self.seq = 4000
        self.mod_ids: dict[str, int] = {}
        self.cls_count: dict[str, int] = defaultdict(int)
        self.fwd_units: list[dict] = []
        self.step_scale = 1.0
        self.layer_scale = 1.0
        self.gap_budget = 0
        self.used_starts: set[int] = set()

    # ids -------------------------------------------------------------------------------------
    def _id(self, n: int) -> int:
        return (2**62 + n) if self.big else n

    def corr(self) -> int:
        self.n_corr += 1
        return self._id(100_000 + self.n_corr * 3)

    def ext(self) -> int:
        self.n_ext += 1
        return self._id(self.n_ext)

    def pyid(self) -> int:
        self.n_py += 1
        return self._id(900_000 + self.n_py)

    # time ------------------------------------------------------------------------------------
    def qz(self, ns: float) -> int:
        return max(self.q, int(round(ns / self.q)) * self.q)

    def d(self, us: float, jitter: bool = True) -> int:
        """A planted GPU duration: base microseconds scaled by step and layer, plus jitter."""
        ns = us * 1000 * self.step_scale * self.layer_scale
        if jitter:
            ns += self.rng.randint(0, 97)
        return self.qz(ns)

    def cpu(self, us: float) -> int:
        return self.qz(us * 1000 + self.rng.randint(0, 9))

    def adv(self, tid: int, us: float) -> None:
        self.t[tid] += self.cpu(us)

    # events ----------------------------------------------------------------------------------
    def cat(self, c: str) -> str:
        return _OLD_CATS.get(c, c) if self.cfg["old_categories"] else c

    def ts(self, ns: int):
        if self.cfg["ts_format"] == "int":
            assert ns % 1000 == 0
            return ns // 1000
        return ns / 1000

    def emit(self, ph: str, cat: str, name: str, pid, tid, start: int, end: int | None = None,
             args: dict | None = None) -> dict:
        ev = {"ph": ph, "cat": self.cat(cat), "name": name, "pid": pid, "tid": tid, "ts": self.ts(start)}
        if end is not None:
            ev["dur"] = self.ts(end - start)
        if args is not None:
            ev["args"] = args
        self.events.append(ev)
        return ev

    @contextmanager
    def rng_(self, tid: int, name: str, cat: str = "cpu_op", args: dict | None = None,
             pre: float = 0.6, post: float = 0.4, ext: bool = True):
        start = self.t[tid]
        a = dict(args or {})
        if ext and cat in ("cpu_op", "user_annotation"):
            e = self.ext()
            a = {"External id" if not self.cfg["old_categories"] else "external id": e,
                 "Record function id": 0, **a}
            self.ext_stack[tid].append(e)
        self.adv(tid, pre)
        box: dict = {"start": start}
        try:
            yield box
        finally:
            self.adv(tid, post)
            if ext and cat in ("cpu_op", "user_annotation"):
                self.ext_stack[tid].pop()
            box["event"] = self.emit("X", cat, name, self.pid, tid, start, self.t[tid], a)

    @contextmanager
    def pyfunc(self, tid: int, name: str, args: dict | None = None, pre: float = 0.6, post: float = 0.4):
        pid_ = self.pyid()
        parent = self.py_stack[tid][-1] if self.py_stack[tid] else None
        start = self.t[tid]
        self.adv(tid, pre)
        self.py_stack[tid].append(pid_)
        try:
            yield pid_
        finally:
            self.py_stack[tid].pop()
            self.adv(tid, post)
            a = {"Python parent id": parent, "Python id": pid_, **(args or {})}
            self.emit("X", "python_function", name, self.pid, tid, start, self.t[tid], a)

    @contextmanager
    def label(self, **kw):
        old = {k: self.lab[k] for k in kw}
        self.lab.update(kw)
        try:
            yield
        finally:
            self.lab.update(old)

    # launches --------------------------------------------------------------------------------
    def launch(self, tid: int, name: str, dur: int, *, stream: int = COMPUTE_STREAM, gap: int = 0,
               start: int | None = None, kind: str = "kernel", api: str | None = None,
               comm: bool = False) -> Activity:
        self.adv(tid, 0.3)
        rt_start = self.t[tid]
        rt_dur = self.cpu(1.6 if kind == "kernel" else 2.9)
        c = self.corr()
        if api is None or (self.cfg["old_categories"] and api.startswith("cuLaunch")):
            # old Kineto recorded no driver API calls
            api = {"kernel": "cudaLaunchKernel", "memcpy": "cudaMemcpyAsync", "memset": "cudaMemsetAsync"}[kind]
        cbid = {"cudaLaunchKernel": 211, "cudaMemcpyAsync": 41, "cudaMemsetAsync": 51,
                "cuLaunchKernelEx": 652, "cudaLaunchKernelExC": 430}[api]
        rcat = "cuda_driver" if api.startswith("cu") and not api.startswith("cuda") else "cuda_runtime"
        ext = self.ext_stack[tid][-1] if self.ext_stack[tid] else 0
        extkey = "External id" if not self.cfg["old_categories"] else "external id"
        self.emit("X", rcat, api, self.pid, tid, rt_start, rt_start + rt_dur,
                  {extkey: ext, "cbid": cbid, "correlation": c})
        if start is None:
            start = max(self.stream_end[stream] + gap, rt_start + self.qz(2500))
        else:
            # a planted start the CPU has not reached yet waits for the launch (and its stream)
            start = max(start, rt_start + self.qz(1500), self.stream_end[stream])
        while start in self.used_starts:  # no tied starts: the timeline split stays order-free
            start += self.q
        self.used_starts.add(start)
        assert start > rt_start, "a kernel must start after its launch"
        end = start + dur
        self.stream_end[stream] = max(self.stream_end[stream], end)
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        args: dict[str, Any] = {extkey: ext, "device": self.device, "context": 1, "stream": stream,
                                "correlation": c}
        if kind == "kernel":
            args = {extkey: ext, "queued": 0, "device": self.device, "context": 1, "stream": stream,
                    "correlation": c, "registers per thread": 128, "shared memory": 49152,
                    "blocks per SM": 1.2, "warps per SM": 4.8, "grid": [132, 1, 1], "block": [384, 1, 1],
                    "est. achieved occupancy %": 6}
        else:
            args["bytes"] = 1 << 20
            args["memory bandwidth (GB/s)"] = (1 << 20) / max(dur, 1)
        self.emit("X", cat, name, self.device, stream, start, end, args)
        fcat, fname = ("async_gpu", api) if self.cfg["old_categories"] else ("ac2g", "ac2g")
        self.events.append({"ph": "s", "id": c, "pid": self.pid, "tid": tid, "ts": self.ts(rt_start),
                            "cat": fcat, "name": fname})
        self.events.append({"ph": "f", "id": c, "pid": self.device, "tid": stream, "ts": self.ts(start),
                            "cat": fcat, "name": fname, "bp": "e"})
        self.t[tid] = rt_start + rt_dur
        self.adv(tid, 0.2)
        a = Activity(step=self.lab["step"], start=start, end=end, kind=kind, name=name, stream=stream,
                     correlation=c, phase=self.lab["phase"],
                     category=None if (comm or kind != "kernel") else self.lab["category"],
                     block=self.lab["block"], collective=self.lab["collective"] if comm else None,
                     comm=comm, gemm=name in GEMMS, launch_ts=rt_start)
        self.acts.append(a)
        return a

    def runtime_only(self, tid: int, name: str, us: float, cbid: int) -> None:
        """A runtime call with a correlation id and no device activity (event record, sync...)."""
        self.adv(tid, 0.4)
        s = self.t[tid]
        self.t[tid] += self.cpu(us)
        ext = self.ext_stack[tid][-1] if self.ext_stack[tid] else 0
        self.emit("X", "cuda_runtime", name, self.pid, tid, s, self.t[tid],
                  {"External id" if not self.cfg["old_categories"] else "external id": ext,
                   "cbid": cbid, "correlation": self.corr()})


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
    cfg = dict(n_layers=n_layers, n_steps=n_steps, attention=attention, module_source=module_source,
               backward_thread=backward_thread, fwd_thread_id=fwd_thread_id, comm=comm,
               forward_allgather=forward_allgather, side_stream=side_stream,
               rotary_module=rotary_module, zero_grad=zero_grad, optimizer=optimizer,
               ts_format=ts_format, big_ids=big_ids, old_categories=old_categories, shuffle=shuffle,
               seed=seed, first_step=first_step)
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
        with _maybe(cap, lambda: b.rng_(M, f"tracekit.module:{cls}:{qual}", "user_annotation", pre=0.8, post=0.6)):
            if nn_mod:
                with b.pyfunc(M, f"nn.Module: {cls}_{inst}", {"Python module id": inst}):
                    with b.pyfunc(M, "torch/nn/modules/module.py(1750): _call_impl"):
                        src = ("torch/nn/modules/linear.py(125): forward" if cls == "Linear" else
                               "torch/nn/modules/sparse.py(190): forward" if cls == "Embedding" else
                               "torch/nn/modules/activation.py(432): forward" if cls == "SiLU" else
                               f"transformers/models/llama/modeling_llama.py({100 + 17 * len(cls)}): forward")
                        with b.pyfunc(M, src):
                            yield
            else:
                yield

    def unit(op: str, kernels: list, *, inner: list[str] = (), bwd: tuple | None = None,
             tid: int | None = None, extra_args: dict | None = None):
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
            b.fwd_units.append(dict(seq=seq, bwd=bwd, category=b.lab["category"], layer=cur_layer[0],
                                    fwd_box=boxes[-1], scale=b.layer_scale))

    def linear(qual: str, us: float, gemm: str, bgemms=(GEMM_NN, GEMM_NT)):
        with module("Linear", qual):
            with _maybe(nn_mod, lambda: b.pyfunc(M, "<built-in function linear>", pre=0.3, post=0.2)):
                unit("aten::linear", [(gemm, b.d(us), "kernel")], inner=["aten::matmul", "aten::mm"],
                     bwd=("MmBackward0", [("aten::mm", [(bgemms[0], us)]), ("aten::mm", [(bgemms[1], us * 1.1)])]))

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
            ew("aten::rsqrt", K_RSQRT, us * 0.4, "RsqrtBackward0", [("aten::rsqrt_backward", K_MUL, us * 0.5)])
            ew("aten::mul", K_MUL, us * 0.5, "MulBackward0", [("aten::mul", K_MUL, us * 0.5)])
            unit("aten::mul", [(K_MUL, b.d(us * 0.55), "kernel")],
                 bwd=("MulBackward0", [("aten::mul", [(K_MUL, us * 0.5)]), ("aten::sum", [(K_SUM, us * 0.9)])]))

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
                with b.label(category="RoPE"):
                    for _ in ("q", "k"):
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        with b.rng_(M, "aten::slice", pre=0.4, post=0.3):
                            pass
                        ew("aten::neg", K_NEG, 3.5, "NegBackward0")
                        unit("aten::cat", [(K_CAT, b.d(5), "kernel")], bwd=("CatBackward0", []))
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        unit("aten::add", [(K_ADD, b.d(4.2), "kernel")], bwd=("AddBackward0", []))
                with b.label(category="Bmm0"):
                    unit("aten::matmul", [(BMM, b.d(31), "kernel")], inner=["aten::bmm"],
                         bwd=("BmmBackward0", [("aten::bmm", [(BMM, 30)]), ("aten::bmm", [(BMM, 29)])]))
                with b.label(category="Softmax"):
                    ew("aten::mul", K_MUL, 8, "MulBackward0")
                    unit("aten::add", [(K_ADD, b.d(8.5), "kernel")], bwd=("AddBackward0", []))
                    unit("aten::softmax", [(K_SOFTMAX, b.d(19), "kernel")], inner=["aten::_softmax"],
                         bwd=("SoftmaxBackward0", [("aten::_softmax_backward_data", [(K_SOFTMAX_BW, 23)])]))
                    ew("aten::to", K_COPY, 7, "ToCopyBackward0")
                with b.label(category="Bmm1"):
                    unit("aten::matmul", [(BMM, b.d(28), "kernel")], inner=["aten::bmm"],
                         bwd=("BmmBackward0", [("aten::bmm", [(BMM, 27)]), ("aten::bmm", [(BMM, 26)])]))
                with b.label(category=None):
                    unit("aten::contiguous", [(K_COPY, b.d(9), "kernel")], inner=["aten::clone", "aten::copy_"],
                         bwd=("CloneBackward0", []))
            else:
                with b.label(category="RoPE"):
                    for _ in ("q", "k"):
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        ew("aten::neg", K_NEG, 3.5, "NegBackward0")
                        unit("aten::cat", [(K_CAT, b.d(5), "kernel")], bwd=("CatBackward0", []))
                        ew("aten::mul", K_MUL, 6, "MulBackward0")
                        unit("aten::add", [(K_ADD, b.d(4.2), "kernel")], bwd=("AddBackward0", []))
                with b.label(category="Attention"):
                    unit("aten::scaled_dot_product_attention", [(K_FLASH_FWD, b.d(64), "kernel")],
                         inner=["aten::_scaled_dot_product_flash_attention", "aten::_flash_attention_forward"],
                         bwd=("ScaledDotProductFlashAttentionBackward0",
                              [("aten::_scaled_dot_product_flash_attention_backward",
                                [(K_FLASH_BWD_DOT, 6), (K_FLASH_BWD, 150)])]))
                with b.label(category=None):
                    unit("aten::contiguous", [(K_COPY, b.d(9), "kernel")], inner=["aten::clone", "aten::copy_"],
                         bwd=("CloneBackward0", []))
            with b.label(category="Output"):
                linear(f"{p}.o_proj", 47, GEMM_C)

    def mlp_block(i: int):
        p = f"model.layers.{i}.mlp"
        with module("LlamaMLP", p):
            with b.label(category="MLP"):
                linear(f"{p}.gate_proj", 131, GEMM_A)
                with module("SiLU", f"{p}.act_fn"):
                    unit("aten::silu", [(K_SILU, b.d(11), "kernel")],
                         bwd=("SiluBackward0", [("aten::silu_backward", [(K_SILU_BW, 14)])]))
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
            with _maybe(cap, lambda: b.rng_(M, "tracekit.phase:forward", "user_annotation", pre=0.5, post=0.5)):
                # input ids to the device
                with b.rng_(M, "aten::to"), b.rng_(M, "aten::_to_copy"), b.rng_(M, "aten::copy_"):
                    b.launch(M, MEMCPY_HTOD, b.d(4.4), kind="memcpy", gap=b.qz(1900))
                if comm and forward_allgather:
                    # ZeRO-3 style parameter gather: starts in an idle gap, runs into the embedding
                    with b.label(collective="AllGather"):
                        with b.rng_(M, "record_param_comms",
                                    args={"Collective name": "_allgather_base", "dtype": "BFloat16",
                                          "Process Group Name": "0", "Group size": 8}):
                            b.runtime_only(M, "cudaEventRecord", 1.2, 135)
                            b.runtime_only(M, "cudaStreamWaitEvent", 1.1, 147)
                            b.launch(M, NCCL_AG, b.d(38), stream=COMM_STREAM, comm=True,
                                     start=b.stream_end[COMPUTE_STREAM] + b.qz(2100))
                with module("LlamaForCausalLM", ""):
                    with module("LlamaModel", "model"):
                        with b.label(category="Embedding"):
                            with module("Embedding", "model.embed_tokens"):
                                unit("aten::embedding", [(K_INDEX, b.d(24), "kernel")], inner=["aten::index_select"],
                                     bwd=("EmbeddingBackward0",
                                          [("aten::embedding_dense_backward", [("memset", 2.2), (K_EMB_SORT, 6), (K_EMB_BW, 21)])]),
                                     )
                        # stream 7 gap 16.4 us after the embedding: memcpy on the copy stream
                        # starts under the embedding kernel and runs into the gap
                        emb_end = b.stream_end[COMPUTE_STREAM]
                        with b.rng_(M, "aten::copy_"):
                            b.launch(M, MEMCPY_DTOD, b.d(11.5), kind="memcpy", stream=COPY_STREAM,
                                     start=emb_end - b.qz(4300))
                        if rotary_module:
                            with b.label(category="RoPE"), module("LlamaRotaryEmbedding", "model.rotary_emb"):
                                st = SIDE_STREAM if side_stream else COMPUTE_STREAM
                                with b.rng_(M, "aten::matmul"), b.rng_(M, "aten::bmm"):
                                    pass
                                with b.rng_(M, "aten::cat"):
                                    b.launch(M, K_CAT, b.d(4.5), stream=st,
                                             start=(emb_end - b.qz(9700)) if side_stream else None,
                                             gap=b.qz(16400))
                                with b.rng_(M, "aten::cos"):
                                    b.launch(M, K_COS, b.d(3.9), stream=st)
                                with b.rng_(M, "aten::sin"):
                                    b.launch(M, K_SIN, b.d(3.7), stream=st)
                        if comm and forward_allgather:
                            with b.label(collective="AllGather"):
                                with b.rng_(M, "nccl:all_gather", "user_annotation"):
                                    b.launch(M, NCCL_GENERIC, b.d(27), stream=COMM_STREAM, comm=True,
                                             api="cuLaunchKernelEx",
                                             start=max(b.stream_end[COMPUTE_STREAM], b.stream_end[SIDE_STREAM]) + b.qz(1300))
                        first_gap = True
                        for i in range(n_layers):
                            cur_layer[0] = i
                            b.layer_scale = 1.0 + 0.09 * i
                            # planted idle gap between layers
                            b.stream_end[COMPUTE_STREAM] += b.qz(layer_gap_us[i % len(layer_gap_us)] * 1000
                                                                 * b.step_scale) if not first_gap else b.qz(16400)
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
                                        unit("aten::add", [(K_ADD, b.d(7.5), "kernel")], bwd=("AddBackward0", []))
                        cur_layer[0] = None
                        b.layer_scale = 1.0
                        with b.label(block="after", category="RMSNorm"):
                            rmsnorm("model.norm", 5.2)
                    with b.label(block="after", category="Linear"):
                        linear("lm_head", 290, GEMM_C)
                # loss: outside every module
                with b.label(block="after", category=None):
                    with b.rng_(M, "aten::cross_entropy_loss"):
                        unit("aten::log_softmax", [(K_LOGSOFTMAX, b.d(26), "kernel")], inner=["aten::_log_softmax"],
                             bwd=("LogSoftmaxBackward0", [("aten::_log_softmax_backward_data", [(K_LOGSOFTMAX_BW, 24)])]))
                        unit("aten::nll_loss_nd", [(K_NLL, b.d(9), "kernel")], inner=["aten::nll_loss_forward"],
                             bwd=("NllLossBackward0", [("aten::nll_loss_backward", [(K_NLL_BW, 8)])]))
            fwd_cpu_end = b.t[M]

            # ---------------- backward
            b.lab.update(phase="backward", block=None, category=None)
            with _maybe(cap, lambda: b.rng_(M, "tracekit.phase:backward", "user_annotation", pre=0.5, post=0.5)):
                with _maybe(nn_mod, lambda: b.pyfunc(M, "torch/_tensor.py(648): backward")):
                    with _maybe(nn_mod, lambda: b.pyfunc(M, "<built-in method run_backward of torch._C._EngineBase object at 0x7f3a2c1b0e40>")):
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
                                with b.rng_(A, f"autograd::engine::evaluate_function: {node}",
                                            args={"Sequence number": u["seq"], **fwd_tid_args(False)}):
                                    with b.rng_(A, node, args={"Sequence number": u["seq"], **fwd_tid_args(False)}) as nb:
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
                                    b.events.append({"ph": "s", "id": fid, "pid": b.pid, "tid": M,
                                                     "ts": b.ts(fb["start"]), "cat": "fwdbwd", "name": "fwdbwd"})
                                    b.events.append({"ph": "f", "id": fid, "pid": b.pid, "tid": A,
                                                     "ts": b.ts(nb["start"]), "cat": "fwdbwd", "name": "fwdbwd",
                                                     "bp": "e"})
                        b.layer_scale = 1.0
                        _after_layer(b, A, prev_layer, comm, layer_seen, n_layers, last=True)
                        if A != M:
                            b.t[M] = max(b.t[M], b.t[A]) + b.qz(4000)

            # ---------------- optimizer
            if optimizer:
                b.lab.update(phase="optimizer", category=None, block=None)
                with _maybe(cap, lambda: b.rng_(M, "tracekit.phase:optimizer", "user_annotation", pre=0.5, post=0.5)):
                    with b.rng_(M, "Optimizer.step#FusedAdam.step", "user_annotation"):
                        with b.rng_(M, "aten::zero_"), b.rng_(M, "aten::fill_"):
                            b.launch(M, MEMSET, b.d(1.9), kind="memset",
                                     gap=b.qz(61300 * b.step_scale))
                        with b.rng_(M, "aten::_fused_adam_"):
                            b.launch(M, K_ADAM, b.d(41))
                            b.launch(M, K_ADAM, b.d(39), gap=b.qz(2200))
            # end of step: wait for the device
            b.lab.update(phase="forward")
            dev_end = max(a.end for a in b.acts[step_first_launch:])
            with b.rng_(M, "aten::item"), b.rng_(M, "aten::_local_scalar_dense"):
                s0 = b.t[M]
                b.t[M] = max(b.t[M] + b.qz(3000), dev_end + b.qz(2000))
                b.emit("X", "cuda_runtime", "cudaStreamSynchronize", b.pid, M, s0, b.t[M],
                       {"External id": b.ext_stack[M][-1], "cbid": 131, "correlation": b.corr()})
        # device-side projection of the step range (gpu_user_annotation), like real traces
        mine = [a for a in b.acts if a.step == step]
        b.emit("X", "gpu_user_annotation", f"ProfilerStep#{step}", b.device, COMPUTE_STREAM,
               min(a.start for a in mine), max(a.end for a in mine), {"External id": 0})
        for u in b.fwd_units:
            u.pop("fwd_box", None)
        del ps_box

    trace = _finish(b, cfg)
    per, mean = compute_truth(b.acts, steps, n_layers)
    truth = Truth(steps=steps, n_layers=n_layers, activities=list(b.acts), per_step=per, mean=mean,
                  config=cfg)
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
                    b.launch(A, NCCL_AR, b.d(36), stream=COMM_STREAM, comm=True,
                             start=b.stream_end[COMPUTE_STREAM] + b.qz(800))
    elif layer == 0 and not last:
        # generic kernel: collective only from record_param_comms; partly exposed
        with b.label(collective="ReduceScatter"):
            with b.rng_(A, "record_param_comms", args={"Collective name": "reduce_scatter", **rpc}):
                b.launch(A, NCCL_GENERIC, b.d(44), stream=COMM_STREAM, comm=True, api="cuLaunchKernelEx",
                         start=max(b.stream_end[COMPUTE_STREAM], b.stream_end[COMM_STREAM]) + b.qz(600))
    elif last:
        # the last gradient bucket: exposed, and runs on into the optimizer
        with b.label(collective="AllReduce"):
            with b.rng_(A, "record_param_comms", args={"Collective name": "allreduce", **rpc}):
                b.launch(A, NCCL_AR, b.d(112), stream=COMM_STREAM, comm=True,
                         start=max(b.stream_end[COMPUTE_STREAM], b.stream_end[COMM_STREAM]) + b.qz(3100))


@contextmanager
def _maybe(cond: bool, factory):
    if cond:
        with factory() as x:
            yield x
    else:
        yield None


def _finish(b: _Builder, cfg: dict) -> dict:
    M, A = b.main, b.auto
    t0 = min(e["ts"] for e in b.events if "ts" in e)
    meta = []

    def m(name, pid, tid, args):
        meta.append({"name": name, "ph": "M", "ts": t0, "pid": pid, "tid": tid, "args": args})

    m("process_name", b.pid, 0, {"name": "python3"})
    m("process_labels", b.pid, 0, {"labels": "CPU"})
    m("process_sort_index", b.pid, 0, {"sort_index": b.pid})
    m("process_name", b.device, 0, {"name": "python3"})
    m("process_labels", b.device, 0, {"labels": f"GPU {b.device}"})
    m("process_sort_index", b.device, 0, {"sort_index": 5000000 + b.device})
    for s in sorted({a.stream for a in b.acts}):
        m("thread_name", b.device, s, {"name": f"stream {s} "})
        m("thread_sort_index", b.device, s, {"sort_index": s})
    m("thread_name", b.pid, M, {"name": f"thread {M} (pt_main_thread)"})
    m("thread_sort_index", b.pid, M, {"sort_index": M})
    if A != M:
        m("thread_name", b.pid, A, {"name": f"thread {A} (pt_main_thread)"})
        m("thread_name", b.pid, A, {"name": f"thread {A} (pt_autograd_0)"})
        m("thread_sort_index", b.pid, A, {"sort_index": A})
    end = max(e["ts"] + e.get("dur", 0) for e in b.events if "ts" in e)
    tail = [
        {"ph": "X", "cat": "Trace", "ts": t0, "dur": end - t0, "pid": "Spans", "tid": "PyTorch Profiler",
         "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        {"name": "process_sort_index", "ph": "M", "ts": t0, "pid": "Spans", "tid": 0,
         "args": {"sort_index": 536870912}},
        {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
         "tid": "Trace PyTorch Profiler", "ts": t0},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": end},
    ]
    events = meta + b.events + tail
    if cfg["shuffle"]:
        random.Random(cfg["seed"] + 1).shuffle(events)
    props = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85020819456, "computeMajor": 9,
             "computeMinor": 0, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
             "regsPerBlock": 65536, "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132,
             "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 232448,
             "sharedMemPerMultiprocessor": 233472}
    trace = {
        "schemaVersion": 1,
        "deviceProperties": [props],
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8, "pg_count": 1,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                           "pg_size": 8, "ranks": list(range(8))}],
                            "nccl_version": "2.26.2"},
        "record_shapes": 1,
        "with_stack": 0,
        "trace_id": "5E1F0C0FFEE0000000000000000000AB",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": events,
        "traceName": "synthetic.pt.trace.json",
    }
    if cfg["old_categories"]:
        trace = {"schemaVersion": 1, "distributedInfo": {"rank": 0}, "traceEvents": events}
    return trace


def write_trace(path: str | Path, trace: dict) -> Path:
    """Write ``trace`` as .json or .json.gz (by suffix)."""
    path = Path(path)
    text = json.dumps(trace)
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def clone(trace: dict) -> dict:
    return copy.deepcopy(trace)
