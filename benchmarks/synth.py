"""Write a synthetic launch+kernel Kineto trace of N events, streamed (any size, little memory).

Each launch is written as Kineto writes it: an ATen op (``cpu_op``) holding a
``cudaLaunchKernel`` runtime event, its kernel on the GPU (joined by ``correlation``), and the
``ac2g`` flow start/finish pair between them: five events per kernel (peers such as TraceLens
join by the flow and count only kernels launched from an op). A ``ProfilerStep#k`` range holds
every ``--per-step`` launches. Ops and kernels cycle through a GEMM, an element-wise and a
reduction, so every table has rows.

    python benchmarks/synth.py OUT.json --events 2000000
"""

from __future__ import annotations

import argparse
import os

OPS = ("aten::mm", "aten::add", "aten::mean")
KERNELS = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>",
)


def synth(out: str, events: int, per_step: int = 5000) -> dict:
    """A trace of about ``events`` events (five per launch, one per step); returns its facts."""
    pairs = max(1, events // 5)
    n_steps = -(-pairs // per_step)
    launch_gap, kern_dur = 10_000, 6_000  # ns: the GPU keeps up with the CPU
    with open(out, "w") as f:
        f.write(
            '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}], '
            '"distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": [\n'
            '{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}'
        )
        for s in range(n_steps):
            lo = s * per_step
            hi = min(pairs, lo + per_step)
            t0 = 1_000_000 + lo * launch_gap
            t1 = 1_000_000 + hi * launch_gap
            f.write(
                f',\n{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{s}", "pid": 1, '
                f'"tid": 1, "ts": {t0 / 1000:.3f}, "dur": {(t1 - t0) / 1000:.3f}}}'
            )
            rows = []
            for i in range(lo, hi):
                ts = 1_000_000 + i * launch_gap + 1000
                rows.append(
                    f'{{"ph": "X", "cat": "cpu_op", "name": "{OPS[i % 3]}", "pid": 1, "tid": 1, '
                    f'"ts": {(ts - 500) / 1000:.3f}, "dur": 4.000, "args": {{"Sequence number": {i}}}}},\n'
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, '
                    f'"ts": {ts / 1000:.3f}, "dur": 3.000, "args": {{"correlation": {i + 1}}}}},\n'
                    f'{{"ph": "X", "cat": "kernel", "name": "{KERNELS[i % 3]}", "pid": 0, "tid": 7, '
                    f'"ts": {(ts + 4000) / 1000:.3f}, "dur": {kern_dur / 1000:.3f}, '
                    f'"args": {{"correlation": {i + 1}, "stream": 7, "device": 0}}}},\n'
                    f'{{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": {i + 1}, "pid": 1, "tid": 1, '
                    f'"ts": {ts / 1000:.3f}}},\n'
                    f'{{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": {i + 1}, "pid": 0, "tid": 7, '
                    f'"ts": {(ts + 4000) / 1000:.3f}, "bp": "e"}}'
                )
            f.write(",\n" + ",\n".join(rows))
        f.write("\n]}\n")
    return {"events": 5 * pairs + n_steps + 1, "steps": n_steps, "bytes": os.path.getsize(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--per-step", type=int, default=5000)
    a = ap.parse_args()
    print(synth(a.out, a.events, a.per_step))


if __name__ == "__main__":
    main()
