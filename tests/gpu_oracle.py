"""An independent checker of the GPU numbers, written without tracekit's code (plain ``json``).

What a stranger's checker reads off a Kineto trace, per rank and complete step: the step
window, ``busy`` (union of all device activity), ``idle`` (window minus busy), and per phase its
``wall``, ``compute`` (union of the compute kernels its ops launched), ``comm`` (same for
communication kernels) and ``gemm`` (same for GEMM kernels). The rules, read literally from
docs/metrics.md and nothing else:

* a device activity is a kernel, memcpy or memset event; its launch is the runtime/driver call
  with the same ``correlation``; a **rank** is a process that launches device work (a file
  merged from several ranks holds several), and a device activity belongs to the process that
  launched it;
* its **step** is the ``ProfilerStep#N`` range of its process around its launch (a rank with no
  ProfilerStep is one step); the step window runs from its first activity's start to its last
  end; a first or last step under 10% of the median step (three or more steps) is cut;
* its **phase**: optimizer when launched inside ``Optimizer.step#`` on its thread; backward when
  launched inside ``autograd::engine::evaluate_function``, inside a backward node (an op with a
  ``Fwd thread id`` > 0, or named ``...Backward`` / ``...Backward0`` as pre-1.9 traces name
  them), or from a thread that runs backward nodes and no ProfilerStep, or inside the Python
  frame of a ``backward()`` call on its thread (``torch/_tensor.py(N): backward``,
  ``torch/autograd/__init__.py(N): backward``, the engine's ``run_backward``); forward otherwise;
* phase **walls** tile the step window: forward to the first backward activity, backward to
  the first optimizer activity, optimizer to the end. When a phase's compute would not fit
  its window, the step's phase **runs** (stretches in which activities of one phase follow
  each other in start order, each from its first start, the first from the window's start,
  to the next run's start, the last to the window's end) give each wall as the sum of its
  phase's runs (gradient accumulation). When phases run at the same time (DualPipe: two
  phases' compute at the same instants for over 1% of the step) or a phase's compute would
  not fit its runs either, every phase's wall in that step is the measure of the union of its
  own activities instead.

tracekit's tail rules (gradient reduction, grad norm, unattributed work) are not modelled:
their effect shows as disagreement on the backward/optimizer edge, which is what a stranger
would see too. ``python tests/gpu_oracle.py TRACE...`` prints the agreement with tracekit.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
LAUNCH = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
COMM = re.compile(
    r"^(void )?(nccl|rccl)|nccl(Dev)?Kernel|c10d::|gloo|all_?reduce|all_?gather|reduce_?scatter"
    r"|cross_device_reduce|deep_ep::|dpsk::ep::|nvshmem|all_?to_?all|all2all",
    re.IGNORECASE,
)
GEMM = re.compile(
    r"gemm|xmma|nvjet|cutlass|^(void )?Cijk_|^bmm_|gemv|cublas|hipblaslt|wgmma|matmul|s16816|h16816|s1688|h1688",
    re.IGNORECASE,
)
NOT_GEMM = re.compile(r"conv|scudnn|winograd|implicit_?gemm|igemm|fprop|dgrad|wgrad|fbgemm", re.IGNORECASE)
BACKWARD_NAME = re.compile(r"Backward\d*$")
CALL = re.compile(
    r"torch/_tensor\.py\(\d+\): backward$|torch/autograd/__init__\.py\(\d+\): backward$"
    r"|torch/autograd/graph\.py\(\d+\): _engine_run_backward$|^<built-in method run_backward of torch\._C\._EngineBase"
)
PHASES = ("forward", "backward", "optimizer")
CUT = 0.1


def load_events(path: Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _num(x) -> float:
    return float(x) if x is not None else 0.0


def union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _contains(ranges: list[tuple[float, float, object]], ts: float) -> object:
    """The innermost (latest-starting) range holding ``ts``; None when none does."""
    best = None
    for lo, hi, what in ranges:
        if lo <= ts < hi and (best is None or lo >= best[0]):
            best = (lo, hi, what)
    return best[2] if best else None


def _is_node(e: dict) -> bool:
    a = e.get("args") or {}
    return (a.get("Fwd thread id") or 0) > 0 or bool(BACKWARD_NAME.search(e.get("name", "")))


def _cpu_context(events: list[dict]) -> tuple[dict, dict, dict, dict]:
    """Per thread: ProfilerStep ranges, backward ranges, optimizer ranges, backward() calls."""
    steps, bwd, opt, calls = defaultdict(list), defaultdict(list), defaultdict(list), defaultdict(list)
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if cat in DEVICE or cat in LAUNCH or str(cat).startswith("gpu_"):
            continue
        name = e.get("name", "")
        key = (e.get("pid"), e.get("tid"))
        lo, hi = _num(e.get("ts")), _num(e.get("ts")) + _num(e.get("dur"))
        if name.startswith("ProfilerStep#"):
            steps[key].append((lo, hi, int(name.split("#")[1])))
        elif name.startswith("Optimizer.step#"):
            opt[key].append((lo, hi, True))
        elif name.startswith("autograd::engine::evaluate_function") or (
            cat in ("cpu_op", "operator") and _is_node(e)
        ):
            bwd[key].append((lo, hi, True))
        elif cat == "python_function" and CALL.search(name):
            calls[key].append((lo, hi, True))
    return steps, bwd, opt, calls


def activities(events: list[dict]) -> dict:
    """``{rank pid: [activity dict]}``: each device activity with its launch, step and phase."""
    launches = {}
    for e in events:
        if str(e.get("cat", "")).lower() in LAUNCH and "correlation" in (e.get("args") or {}):
            launches[e["args"]["correlation"]] = e
    steps, bwd, opt, calls = _cpu_context(events)
    step_threads = set(steps)
    engine = {k for k in bwd if k not in step_threads}
    by_pid_steps = defaultdict(list)
    for (pid, _), rs in steps.items():
        by_pid_steps[pid] += rs
    out = defaultdict(list)
    for e in events:
        cat = str(e.get("cat", "")).lower()
        if cat not in DEVICE:
            continue
        rt = launches.get((e.get("args") or {}).get("correlation"))
        if rt is None:
            continue
        key, ts = (rt.get("pid"), rt.get("tid")), _num(rt.get("ts"))
        pid = rt.get("pid")
        if by_pid_steps.get(pid):
            step = _contains(by_pid_steps[pid], ts)
            if step is None:
                continue
        else:
            step = 0
        if _contains(opt.get(key, []), ts):
            phase = "optimizer"
        elif _contains(bwd.get(key, []), ts) or key in engine or _contains(calls.get(key, []), ts):
            phase = "backward"
        else:
            phase = "forward"
        name = e.get("name", "")
        group = (
            "comm" if cat == "kernel" and COMM.search(name) else ("compute" if cat == "kernel" else "copy")
        )
        lo = _num(e.get("ts"))
        out[pid].append(
            {
                "step": step,
                "phase": phase,
                "group": group,
                "gemm": group == "compute" and bool(GEMM.search(name)) and not NOT_GEMM.search(name),
                "span": (lo, lo + _num(e.get("dur"))),
            }
        )
    return out


def _complete(windows: dict) -> list:
    order = sorted(windows, key=lambda s: windows[s][0])
    if len(order) < 3:
        return order
    lengths = sorted(hi - lo for lo, hi in windows.values())
    median = lengths[len(lengths) // 2] if len(lengths) % 2 else sum(lengths[len(lengths) // 2 - 1 :][:2]) / 2
    cut = {s for s in (order[0], order[-1]) if windows[s][1] - windows[s][0] < CUT * median}
    return [s for s in order if s not in cut]


def numbers(path: Path) -> dict:
    """``{(rank index, step): {name: ms}}`` with names ``window``, ``busy``, ``idle`` and
    ``<phase>.wall|compute|comm|gemm``; ranks numbered by process id order."""
    out = {}
    for r, pid in enumerate(
        sorted(
            activities(load_events(path)).items(),
            key=lambda kv: (not isinstance(kv[0], int), kv[0] if isinstance(kv[0], int) else 0, str(kv[0])),
        )
    ):
        acts = pid[1]
        by_step = defaultdict(list)
        for a in acts:
            by_step[a["step"]].append(a)
        windows = {
            s: (min(a["span"][0] for a in xs), max(a["span"][1] for a in xs)) for s, xs in by_step.items()
        }
        for s in _complete(windows):
            out[(r, s)] = _step_numbers(by_step[s], windows[s])
    return out


def _step_numbers(acts: list[dict], window: tuple[float, float]) -> dict:
    lo, hi = window
    first = {p: min((a["span"][0] for a in acts if a["phase"] == p), default=None) for p in PHASES}
    t_opt = first["optimizer"] if first["optimizer"] is not None else hi
    t_bwd = min(first["backward"], t_opt) if first["backward"] is not None else t_opt
    edges = {"forward": (lo, t_bwd), "backward": (t_bwd, t_opt), "optimizer": (t_opt, hi)}
    own = {p: [a for a in acts if a["phase"] == p] for p in PHASES}
    compute = {p: union([a["span"] for a in own[p] if a["group"] == "compute"]) for p in PHASES}
    both = sum(compute.values()) - union([a["span"] for a in acts if a["group"] == "compute"])
    walls = {p: edges[p][1] - edges[p][0] for p in PHASES}
    if any(compute[p] > walls[p] for p in PHASES):
        walls = _runs(acts, lo, hi)
        if any(compute[p] > walls[p] for p in PHASES):
            both = hi - lo  # not even the runs hold it: the phases overlap
    if both > 0.01 * (hi - lo):
        walls = {p: union([a["span"] for a in own[p]]) for p in PHASES}
    busy = union([a["span"] for a in acts])
    res = {"window": (hi - lo) / 1e3, "busy": busy / 1e3, "idle": (hi - lo - busy) / 1e3}
    for p in PHASES:
        wall = walls[p]
        res[f"{p}.wall"] = wall / 1e3
        for what, test in (
            ("compute", lambda a: a["group"] == "compute"),
            ("comm", lambda a: a["group"] == "comm"),
            ("gemm", lambda a: a["gemm"]),
        ):
            res[f"{p}.{what}"] = union([a["span"] for a in own[p] if test(a)]) / 1e3
    return res


def _runs(acts: list[dict], lo: float, hi: float) -> dict:
    """Per phase: the summed length of its runs (see the module docstring)."""
    order = sorted(acts, key=lambda a: (a["span"][0], PHASES.index(a["phase"])))
    heads = [a for i, a in enumerate(order) if i == 0 or a["phase"] != order[i - 1]["phase"]]
    out = dict.fromkeys(PHASES, 0.0)
    for i, a in enumerate(heads):
        start = lo if i == 0 else a["span"][0]
        end = hi if i == len(heads) - 1 else heads[i + 1]["span"][0]
        out[a["phase"]] += end - start
    return out


def tracekit_numbers(path: Path) -> dict:
    """The same numbers from tracekit's tables (per step), keyed alike."""
    import tracekit

    run = tracekit.load(path, cache=False, jobs=1)
    out: dict = defaultdict(dict)
    ranks = sorted(run.ranks)
    idle = run.table("idle", per_step=True)
    phases = run.table("phases", per_step=True)
    gemm = run.table("gemm", per_step=True)
    for df in (idle, phases, gemm):
        if "rank" not in df:
            df.insert(0, "rank", ranks[0])
    for row in idle.itertuples():
        key = (ranks.index(row.rank), row.step)
        out[key].update(window=row.window_ms, busy=row.busy_ms, idle=row.idle_ms)
    for row in phases.itertuples():
        key, p = (ranks.index(row.rank), row.step), ("backward" if row.phase == "unattributed" else row.phase)
        for what, v in (("wall", row.wall_ms), ("compute", row.compute_ms), ("comm", row.comm_ms)):
            out[key][f"{p}.{what}"] = out[key].get(f"{p}.{what}", 0.0) + v
    for row in gemm.itertuples():
        key, p = (ranks.index(row.rank), row.step), ("backward" if row.phase == "unattributed" else row.phase)
        out[key][f"{p}.gemm"] = out[key].get(f"{p}.gemm", 0.0) + row.gemm_ms
    return out


def close(got: float, want: float) -> bool:
    return abs(got - want) <= max(0.02 * abs(want), 1e-3)


def compare(path: Path) -> tuple[int, int, list[str]]:
    """(numbers within 2%, numbers compared, the misses)."""
    want = numbers(path)
    if not want:
        return 0, 0, ["no launched device activity: not a GPU trace for this checker"]
    got = tracekit_numbers(path)
    n = ok = 0
    misses = []
    for key in sorted(set(want) | set(got), key=str):
        w, g = want.get(key, {}), got.get(key, {})
        for name in sorted(set(w) | set(g)):
            n += 1
            a, b = g.get(name, 0.0), w.get(name, 0.0)
            if close(a, b):
                ok += 1
            else:
                misses.append(f"rank {key[0]} step {key[1]} {name}: tracekit {a:.3f} oracle {b:.3f}")
    return ok, n, misses


def main(argv: list[str]) -> int:
    total_ok = total = 0
    for p in map(Path, argv):
        try:
            ok, n, misses = compare(p)
        except Exception as exc:  # a trace one of the two cannot read: reported, counted as 0
            print(f"{p.name}: error {type(exc).__name__}: {exc}")
            continue
        total_ok, total = total_ok + ok, total + n
        print(f"{p.name[:70]}: {ok}/{n}")
        for m in misses[:8]:
            print("   ", m)
    print(f"TOTAL {total_ok}/{total} within 2%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
