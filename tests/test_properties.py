"""Properties of the whole pipeline over random planted traces (tracekit.testing.strategies).

* every device nanosecond of a complete step lands in exactly one cell: per (step, phase) the
  modules column sums to the phase's wall time, the kernels table sums to the step's window,
  and the phases sum to the window; the window, the phase walls and the idle time are the
  planted ones;
* the order of the events in the file changes nothing;
* shifting every timestamp to the epoch and using 64-bit ids changes nothing;
* one rank's steps split across two files of the same process (a profiler schedule with
  repeat: successive windows) are still one rank with the same tables (DESIGN.md).

Example counts come from the hypothesis profile (tests/conftest.py: ``ci`` when CI=true).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

import tracekit
from tracekit.testing import TraceBuilder, measure, union, write_trace
from tracekit.testing.events import EPOCH_NS
from tracekit.testing.strategies import Plan, PlannedStep, Unit, plans

NS = 1e-6  # one nanosecond in ms
TOL = 1e-9  # ms: float noise on sums of ms values
_tmp: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _scratch(tmp_path_factory):
    _tmp.append(tmp_path_factory.mktemp("props"))
    yield
    _tmp.pop()


def _load(trace: dict | TraceBuilder, name: str = "rank0.pt.trace.json") -> tracekit.Analysis:
    doc = trace.trace() if isinstance(trace, TraceBuilder) else trace
    path = write_trace(_tmp[-1] / name, doc)
    return tracekit.load(path, cache=False, jobs=1)


def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in df.columns if not pd.api.types.is_float_dtype(df[c])]
    return df.sort_values(keys).reset_index(drop=True) if keys else df.reset_index(drop=True)


#: Tables of idle gaps (HTA's rule: a gap runs from the activity that ended last so far on the
#: stream, or the device, to the next): a window file alone starts with no activity before its
#: first, so a gap that crosses the cut between two windows is not one there (docs/metrics.md,
#: idle_causes). The findings read them. The critical path likewise walks back across the cut:
#: a window file alone has no work before its first event for the path to wait on.
ACROSS_WINDOWS = {"idle_causes", "idle_host", "findings", "critical_path", "critical_path_timeline"}


def assert_same_tables(got: tracekit.Analysis, expected: tracekit.Analysis, windows: bool = False) -> None:
    """``got``'s tables (per step) are ``expected``'s; ``windows``: ``got`` read the trace as
    successive windows, so the tables of :data:`ACROSS_WINDOWS` are not compared."""
    assert got.meta["complete_steps"] == expected.meta["complete_steps"]
    want = expected.tables(per_step=True)
    for name, table in got.tables(per_step=True).items():
        if windows and name in ACROSS_WINDOWS:
            continue
        pd.testing.assert_frame_equal(
            _sorted(table), _sorted(want[name]), check_exact=False, atol=TOL, rtol=0, obj=name
        )


def _ms(ns: int) -> float:
    return ns / 1e6


def planted_walls(b: TraceBuilder, step: int) -> tuple[dict[str, int], bool]:
    """Phase walls (ns) from the planted phases (docs/metrics.md): forward up to the first
    backward activity, backward up to the first optimizer activity, optimizer to the window's
    end; an absent phase, or a backward whose first activity comes after the optimizer's, is
    empty. When a phase's compute is longer than its tiled wall, each wall is the sum of the
    phase's runs (issue 37 item 5: gradient accumulation). When the phases overlap (issue 28
    item 7: two phases' compute at the same instants for more than 1% of the window, or a
    phase's compute longer than its runs) each wall is the measure of the union of the phase's
    own activities instead. Also: whether they did."""
    lo, hi = b.window(step)
    acts = [a for a in b.activities if a.step == step]
    first = {p: min((a.start for a in acts if a.phase == p), default=hi) for p in ("backward", "optimizer")}
    opt = first["optimizer"]
    bwd = min(first["backward"], opt)
    tiled = {"forward": bwd - lo, "backward": opt - bwd, "optimizer": hi - opt}
    compute = {
        p: measure(union(a.iv for a in acts if a.phase == p and a.kind == "kernel" and not a.comm))
        for p in tiled
    }
    all_compute = measure(union(a.iv for a in acts if a.kind == "kernel" and not a.comm))
    both = sum(compute.values()) - all_compute
    walls = tiled
    if any(compute[p] > tiled[p] for p in tiled):  # phases interleave: the sums of their runs
        walls = _runs(acts, lo, hi)
        if any(compute[p] > walls[p] for p in tiled):  # not even the runs hold it: overlap
            both = hi - lo
    if both > 0.01 * (hi - lo):
        return {p: measure(union(a.iv for a in acts if a.phase == p)) for p in tiled}, True
    return walls, False


def _runs(acts: list, lo: int, hi: int) -> dict[str, int]:
    """Per phase, the summed length of its runs: stretches of one phase in start order (ties in
    phase order), each
    from its first start (the first from the window's start) to the next run's start (the last
    to the window's end)."""
    rank = {"forward": 0, "backward": 1, "optimizer": 3}
    order = sorted(acts, key=lambda a: (a.start, rank[a.phase]))
    heads = [a for i, a in enumerate(order) if i == 0 or a.phase != order[i - 1].phase]
    out = dict.fromkeys(("forward", "backward", "optimizer"), 0)
    for i, a in enumerate(heads):
        end = hi if i == len(heads) - 1 else heads[i + 1].start
        out[a.phase] += end - (lo if i == 0 else a.start)
    return out


#: A forward unit on a second stream still running when backward starts on the first: its
#: phases overlap, so each wall is its phase's own activity (found by CI's hypothesis run).
_OVERLAPPING = Plan(
    steps=[
        PlannedStep(
            units=[
                Unit(module=0, layer=0, dur_ns=42000, gap_ns=0, stream=7, backward=None, backward_gap_ns=0),
                Unit(
                    module=8,
                    layer=2,
                    dur_ns=97000,
                    gap_ns=3000,
                    stream=22,
                    backward=203000,
                    backward_gap_ns=34000,
                ),
            ],
            comm=[],
            memcpy_ns=17000,
            optimizer_ns=[46000, 3000],
        )
    ],
    options={"modules": "capture", "autograd_thread": True, "flows": False, "ts_format": "int"},
)


@given(plans())
@example(plan=_OVERLAPPING)
def test_every_device_nanosecond_lands_in_exactly_one_cell(plan: Plan):
    b = plan.build()
    a = _load(b)
    complete = a.meta["complete_steps"][0]
    left_out = [s for s in b.steps if s not in complete]
    # only a first or last step looking cut by the profiling window is left out, and said so
    assert set(left_out) <= {b.steps[0], b.steps[-1]} and len(complete) >= 1
    assert not left_out or any(
        "looks cut by the profiling window" in w["message"] for w in a.meta["warnings"]
    )
    t = a.tables(per_step=True)
    phases, modules, kernels, idle = t["phases"], t["modules"], t["kernels"], t["idle"]
    for step in complete:
        lo, hi = b.window(step)
        row = idle[idle["step"] == step].iloc[0]
        assert row["window_ms"] == pytest.approx(_ms(hi - lo), abs=NS)
        others = [a.iv for a in b.activities if a.step != step]
        if measure(union(iv for iv in others if iv[0] < hi and iv[1] > lo)) == 0:
            busy = measure(a.iv for a in b.activities if a.step == step)
            assert row["idle_ms"] == pytest.approx(_ms(hi - lo - busy), abs=NS)
        ph = phases[phases["step"] == step].set_index("phase")
        walls, overlapped = planted_walls(b, step)
        if not overlapped:
            assert ph["wall_ms"].sum() == pytest.approx(row["window_ms"], abs=TOL)
        for phase, wall in walls.items():
            assert ph.loc[phase, "wall_ms"] == pytest.approx(_ms(wall), abs=NS), phase
            cells = modules[(modules["step"] == step) & (modules["phase"] == phase)]["time_ms"]
            assert cells.sum() == pytest.approx(ph.loc[phase, "wall_ms"], abs=TOL), phase
            assert (cells >= -TOL).all()
        ks = kernels[kernels["step"] == step]["time_ms"]
        assert ks.sum() == pytest.approx(row["window_ms"], abs=TOL)


@given(plans(max_steps=2), st.integers(0, 2**32))
def test_event_order_changes_nothing(plan: Plan, seed: int):
    b = plan.build()
    assert_same_tables(_load(b.trace(shuffle_seed=seed), "shuffled.json"), _load(b))


def _whole_us(plan: Plan) -> Plan:
    """The plan in integer microseconds (old Kineto's ``ts``), every time rounded up."""

    def up(ns: int) -> int:
        return -(-ns // 1000) * 1000

    for s in plan.steps:
        for u in s.units:
            u.dur_ns, u.gap_ns, u.backward_gap_ns = up(u.dur_ns), up(u.gap_ns), up(u.backward_gap_ns)
            u.backward = None if u.backward is None else up(u.backward)
        s.comm = [(p, c, up(d), up(g)) for p, c, d, g in s.comm]
        s.memcpy_ns = None if s.memcpy_ns is None else up(s.memcpy_ns)
        s.optimizer_ns = [up(x) for x in s.optimizer_ns]
    return Plan(steps=plan.steps, options={**plan.options, "ts_format": "int"})


def _check_epoch(plan: Plan, offset_us: int) -> None:
    plan = _whole_us(plan)
    near = plan.build()
    far = plan.build(start_ns=EPOCH_NS + 1_700_000_000_000_000_000 + offset_us * 1000, big_ids=True)
    assert_same_tables(_load(far, "far.json"), _load(near))


def _same_phases(plan: Plan) -> bool:
    """Every step has a backward node and an optimizer kernel (no phase is absent)."""
    return all(s.optimizer_ns and any(u.backward is not None for u in s.units) for s in plan.steps)


@given(plans(max_steps=2).filter(_same_phases), st.integers(0, 10**15))
def test_an_epoch_clock_and_64_bit_ids_change_nothing(plan: Plan, offset_us: int):
    """Integer-microsecond traces at the epoch (~1.7e15 us) with ids beyond 2**53."""
    _check_epoch(plan, offset_us)


def _fixed_plan(phases_everywhere: bool = True) -> Plan:
    from tracekit.testing.strategies import PlannedStep, Unit

    unit = Unit(module=5, layer=0, dur_ns=10_000, gap_ns=0, stream=7, backward=20_000, backward_gap_ns=0)
    step = PlannedStep(
        units=[unit], comm=[("backward", "AllReduce", 5_000, 0)], memcpy_ns=None, optimizer_ns=[3_000]
    )
    if phases_everywhere:
        return Plan(steps=[step, step])
    bare = PlannedStep(
        units=[Unit(module=0, layer=0, dur_ns=1_000, gap_ns=0, stream=7, backward=None, backward_gap_ns=0)],
        comm=[],
        memcpy_ns=None,
        optimizer_ns=[],
    )
    return Plan(steps=[bare, step])


@example(plan=_fixed_plan(phases_everywhere=False), offset_us=0)
@given(plans(max_steps=2), st.integers(0, 10**15))
def test_an_epoch_clock_changes_nothing_when_a_step_lacks_a_phase(plan: Plan, offset_us: int):
    _check_epoch(plan, offset_us)


@example(plan=_fixed_plan())
@given(plans(max_steps=1))
def test_an_epoch_clock_with_nanosecond_decimals_changes_nothing(plan: Plan):
    plan.options["ts_format"] = "float"
    near = plan.build()
    far = plan.build(start_ns=1_712_195_495_519_689_047)
    assert_same_tables(_load(far, "far.json"), _load(near))


RUNTIME = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}  # (old Kineto: capitalised)
DEVICE = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def split_windows(trace: dict, first_steps: int) -> tuple[dict, dict]:
    """The events of one process cut into two successive profiler windows: CPU events by time
    (the cut is between two ProfilerStep ranges), device events and flows with their launch."""
    events = trace["traceEvents"]
    steps = sorted(
        e["ts"]
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") == "user_annotation"
    )
    cut = steps[first_steps]
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in RUNTIME and "correlation" in e.get("args", {})
    }
    flow_ts = {e["id"]: e["ts"] for e in events if e.get("ph") == "s"}
    first: list[dict] = []
    second: list[dict] = []
    for e in events:
        if e.get("ph") == "M" or e.get("cat") == "Trace" or not isinstance(e.get("ts"), (int, float)):
            first.append(e)
            second.append(e)
            continue
        if e.get("ph") == "f":
            ts = flow_ts[e["id"]]
        elif e.get("cat") in DEVICE:
            ts = launch_ts[e["args"]["correlation"]]
        elif e.get("cat") == "gpu_user_annotation":
            ts = min(cut, e["ts"])  # the step's device projection
        else:
            ts = e["ts"]
        (first if ts < cut else second).append(e)
    return {**trace, "traceEvents": first}, {**trace, "traceEvents": second}


#: A plan hypothesis found (shrunk): the CPU runs ahead of a long backward, so step 3's kernels
#: on a side stream start during step 1 and step 3's device window starts before step 2's. The
#: rank's edge steps were then taken in start order, and step 2 was judged the last one and cut.
_STEPS_OVERLAP = Plan(
    steps=[
        PlannedStep(
            units=[
                Unit(module=8, layer=0, dur_ns=3038, gap_ns=0, stream=7, backward=1140, backward_gap_ns=0),
                Unit(
                    module=1, layer=1, dur_ns=12785, gap_ns=9496, stream=22, backward=None, backward_gap_ns=0
                ),
                Unit(module=4, layer=0, dur_ns=74759, gap_ns=0, stream=7, backward=300000, backward_gap_ns=0),
                Unit(module=1, layer=2, dur_ns=1717, gap_ns=0, stream=7, backward=2057, backward_gap_ns=0),
                Unit(
                    module=6,
                    layer=2,
                    dur_ns=122987,
                    gap_ns=221,
                    stream=7,
                    backward=None,
                    backward_gap_ns=24746,
                ),
                Unit(
                    module=6, layer=2, dur_ns=43281, gap_ns=3033, stream=7, backward=3664, backward_gap_ns=0
                ),
                Unit(
                    module=1,
                    layer=1,
                    dur_ns=179980,
                    gap_ns=4300,
                    stream=7,
                    backward=273323,
                    backward_gap_ns=14462,
                ),
                Unit(module=2, layer=1, dur_ns=118002, gap_ns=0, stream=7, backward=None, backward_gap_ns=0),
            ],
            comm=[("backward", "Broadcast", 8327, 3688)],
            memcpy_ns=6025,
            optimizer_ns=[],
        ),
        PlannedStep(
            units=[
                Unit(
                    module=7, layer=0, dur_ns=6836, gap_ns=430, stream=7, backward=None, backward_gap_ns=4504
                ),
                Unit(module=3, layer=1, dur_ns=1283, gap_ns=86, stream=7, backward=None, backward_gap_ns=0),
            ],
            comm=[],
            memcpy_ns=None,
            optimizer_ns=[],
        ),
        PlannedStep(
            units=[
                Unit(
                    module=3,
                    layer=2,
                    dur_ns=54773,
                    gap_ns=3049,
                    stream=22,
                    backward=None,
                    backward_gap_ns=148,
                ),
                Unit(
                    module=7, layer=2, dur_ns=196886, gap_ns=0, stream=7, backward=None, backward_gap_ns=7513
                ),
                Unit(module=0, layer=1, dur_ns=13927, gap_ns=275, stream=7, backward=9137, backward_gap_ns=0),
                Unit(
                    module=0, layer=2, dur_ns=131073, gap_ns=517, stream=22, backward=14153, backward_gap_ns=0
                ),
                Unit(
                    module=1, layer=2, dur_ns=196813, gap_ns=0, stream=22, backward=232818, backward_gap_ns=0
                ),
                Unit(
                    module=2, layer=2, dur_ns=12080, gap_ns=0, stream=22, backward=None, backward_gap_ns=30807
                ),
                Unit(
                    module=3, layer=2, dur_ns=1506, gap_ns=988, stream=7, backward=1417, backward_gap_ns=5239
                ),
                Unit(
                    module=5, layer=2, dur_ns=9354, gap_ns=0, stream=7, backward=None, backward_gap_ns=40000
                ),
            ],
            comm=[
                ("forward", "AllGather", 3908, 257),
                ("forward", "Broadcast", 61141, 39191),
                ("backward", "ReduceScatter", 10396, 11777),
            ],
            memcpy_ns=None,
            optimizer_ns=[8298],
        ),
    ],
    options={
        "modules": "capture",
        "autograd_thread": False,
        "flows": True,
        "ts_format": "float",
        "big_ids": False,
        "old_categories": False,
        "jitter_seed": 256,
    },
)


@example(plan=_fixed_plan(), first=1)
@example(plan=_STEPS_OVERLAP, first=1)
@given(plans(max_steps=3).filter(lambda p: len(p.steps) >= 2), st.integers(1, 2))
def test_successive_windows_of_one_rank_change_nothing(plan: Plan, first: int):
    b = plan.build()
    whole = _load(b)
    k = min(first, len(b.steps) - 1)  # steps in the first window
    one, two = split_windows(b.trace(), k)
    run = _tmp[-1] / "windows"
    run.mkdir(exist_ok=True)
    for i, doc in enumerate((one, two)):
        (run / f"host_48213.{i}.pt.trace.json").write_text(json.dumps(doc), encoding="utf-8")
    split = tracekit.load(run, cache=False, jobs=1)
    assert split.meta["ranks"] == [0]
    assert_same_tables(split, whole, windows=True)


@pytest.mark.parametrize("options", [{}, {"old_categories": True, "autograd_thread": False}])
def test_the_window_split_keeps_every_event_once(options):
    """The helper above is itself right: each event in exactly one window (metadata in both),
    a device activity in its launch's window, every table as the whole trace's."""
    b = _fixed_plan().build(**options)
    trace = b.trace()
    one, two = split_windows(trace, 1)
    meta = [
        e
        for e in trace["traceEvents"]
        if e.get("ph") == "M" or e.get("cat") == "Trace" or not isinstance(e.get("ts"), (int, float))
    ]
    assert len(one["traceEvents"]) + len(two["traceEvents"]) == len(trace["traceEvents"]) + len(meta)
    corr = {e["args"]["correlation"] for e in one["traceEvents"] if e.get("cat") in DEVICE}
    launches = {e["args"]["correlation"] for e in one["traceEvents"] if e.get("cat") in RUNTIME}
    assert corr and corr <= launches
    # each window alone holds its steps' tables exactly (so only the rank logic is left to test)
    whole = _load(b).tables(per_step=True)
    parts = [_load(doc, f"w{i}.json").tables(per_step=True) for i, doc in enumerate((one, two))]
    for name, table in whole.items():
        if name in ACROSS_WINDOWS:
            continue
        joined = pd.concat([p[name] for p in parts], ignore_index=True)
        pd.testing.assert_frame_equal(
            _sorted(joined), _sorted(table), check_exact=False, atol=TOL, rtol=0, obj=name
        )
