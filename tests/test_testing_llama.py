"""Tests of the Llama training scenario itself (:func:`tracekit.testing.llama_training`).

The truth tests trust the generator's Truth; these tests check that trust by other routes: the
trace is a well-formed Kineto trace (ranges nest, ids are unique, every device activity has
one launch that precedes it, flows pair up), the Truth's activities are exactly the device
events of the trace, and the headline numbers recomputed straight from the trace events with
a different algorithm (an event sweep) agree with the Truth.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter, defaultdict

import pytest

from tracekit.testing import llama_training, measure, subtract, union, write_trace
from tracekit.testing.expected import MODULE_ROWS
from tracekit.testing.kernels import NCCL_GENERIC
from tracekit.testing.truth import shares

DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
OP_CATS = {"cpu_op", "Operator", "user_annotation"}

CONFIGS = [
    dict(),
    dict(attention="sdpa"),
    dict(modules="capture"),
    dict(modules="both", n_layers=3, n_steps=3),
    dict(autograd_thread=False),
    dict(ts_format="int", seed=3),
    dict(big_ids=True, shuffle=True, seed=7),
    dict(old_categories=True),
    dict(comm=False, side_stream=False, rotary_module=False),
    dict(n_layers=1, n_steps=1),
]


def ns(x) -> int:
    return round(x * 1000)


def xs(trace, cats=None):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and (cats is None or e.get("cat") in cats)]


def ids(cfg):
    return ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"


@pytest.fixture(scope="module", params=CONFIGS, ids=ids)
def built(request):
    return llama_training(**request.param)


def test_json_round_trip_is_exact(built):
    trace, _ = built
    text = json.dumps(trace)
    assert json.loads(text) == trace


def test_cpu_ranges_nest_per_thread(built):
    trace, _ = built
    per_thread = defaultdict(list)
    for e in xs(trace):
        if e["cat"] in DEVICE_CATS or e["cat"] in ("gpu_user_annotation", "Trace"):
            continue
        per_thread[(e["pid"], e["tid"])].append((ns(e["ts"]), ns(e["ts"] + e["dur"]), e["name"]))
    assert per_thread
    for key, evs in per_thread.items():
        evs.sort(key=lambda t: (t[0], -t[1]))
        stack = []
        for s, e, name in evs:
            assert e >= s
            while stack and stack[-1][1] <= s:
                stack.pop()
            if stack:
                assert e <= stack[-1][1], f"{name} [{s},{e}] crosses {stack[-1]} on {key}"
            stack.append((s, e, name))


def test_ids_unique_and_every_activity_has_one_earlier_launch(built):
    trace, truth = built
    runtime = xs(trace, RUNTIME_CATS)
    corr = Counter(e["args"]["correlation"] for e in runtime)
    assert max(corr.values()) == 1, "runtime correlation ids must be unique"
    by_corr = {e["args"]["correlation"]: e for e in runtime}
    dev = xs(trace, DEVICE_CATS)
    dev_corr = Counter(e["args"]["correlation"] for e in dev)
    assert max(dev_corr.values()) == 1
    for e in dev:
        launch = by_corr[e["args"]["correlation"]]
        assert ns(launch["ts"]) < ns(e["ts"]), "a launch precedes its kernel"
        assert e["pid"] == e["args"]["device"] and e["tid"] == e["args"]["stream"]
    # python ids and external ids unique
    py = [e["args"]["Python id"] for e in xs(trace, {"python_function"})]
    assert len(py) == len(set(py))
    ext_key = "external id" if truth.config["old_categories"] else "External id"
    ext = [e["args"][ext_key] for e in xs(trace, OP_CATS)]
    assert len(ext) == len(set(ext))


def test_flows_pair_up(built):
    trace, _ = built
    flows = [e for e in trace["traceEvents"] if e.get("ph") in ("s", "f")]
    by = defaultdict(dict)
    for f in flows:
        assert f["id"] not in by[f["cat"]] or f["ph"] not in by[f["cat"]][f["id"]]
        by[f["cat"]].setdefault(f["id"], {})[f["ph"]] = f
    launch_cat = "async_gpu" if any(c == "async_gpu" for c in by) else "ac2g"
    runtime = {e["args"]["correlation"]: e for e in xs(trace, RUNTIME_CATS)}
    dev = {e["args"]["correlation"]: e for e in xs(trace, DEVICE_CATS)}
    assert set(by[launch_cat]) == set(dev)
    for i, pair in by[launch_cat].items():
        assert pair["s"]["ts"] == runtime[i]["ts"] and pair["s"]["tid"] == runtime[i]["tid"]
        assert pair["f"]["ts"] == dev[i]["ts"] and pair["f"]["tid"] == dev[i]["tid"]
    # fwdbwd: s on a forward op, f on the backward node with the same sequence number
    ops = {(e["tid"], e["ts"]): e for e in xs(trace, OP_CATS)}
    assert by["fwdbwd"]
    for i, pair in by["fwdbwd"].items():
        fwd = ops[(pair["s"]["tid"], pair["s"]["ts"])]
        bwd = ops[(pair["f"]["tid"], pair["f"]["ts"])]
        assert fwd["args"]["Sequence number"] == bwd["args"]["Sequence number"]
        assert "Backward" in bwd["name"] and "Backward" not in fwd["name"]


def test_backward_nodes_link_to_exactly_one_forward_sequence(built):
    trace, truth = built
    ops = xs(trace, OP_CATS)
    fwd_seqs = defaultdict(set)
    for e in ops:
        a = e.get("args", {})
        if "Sequence number" in a and "Backward" not in e["name"]:
            fwd_seqs[a["Sequence number"]].add(e["name"])
    nodes = [
        e
        for e in ops
        if e["name"].startswith("autograd::engine::evaluate_function: ") and "AccumulateGrad" not in e["name"]
    ]
    assert nodes
    main = next(e["tid"] for e in ops if e["name"].startswith("ProfilerStep#"))
    for n in nodes:
        a = n["args"]
        assert a["Sequence number"] in fwd_seqs
        if truth.config["fwd_thread_id"] == "real":
            assert a["Fwd thread id"] == 1
        else:
            assert a["Fwd thread id"] == main
        if truth.config["autograd_thread"]:
            assert n["tid"] != main


def test_truth_activities_are_exactly_the_device_events(built):
    trace, truth = built
    dev = sorted(
        (ns(e["ts"]), ns(e["ts"] + e["dur"]), e["name"], e["args"]["stream"]) for e in xs(trace, DEVICE_CATS)
    )
    planted = sorted((a.start, a.end, a.name, a.stream) for a in truth.activities)
    assert dev == planted
    # durations are exact in the file
    for e in xs(trace, DEVICE_CATS):
        assert ns(e["dur"]) == ns(e["ts"] + e["dur"]) - ns(e["ts"])


def _steps_from_trace(trace):
    steps = {}
    for e in xs(trace, {"user_annotation"}):
        m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
        if m:
            steps[int(m.group(1))] = (ns(e["ts"]), ns(e["ts"] + e["dur"]))
    return steps


def _labels_from_trace(trace):
    """Per device activity: (step, phase, collective) derived from the trace events alone."""
    runtime = {e["args"]["correlation"]: e for e in xs(trace, RUNTIME_CATS)}
    ops = xs(trace, OP_CATS)
    steps = _steps_from_trace(trace)
    thread_names = defaultdict(str)
    for e in trace["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[e["tid"]] += e["args"]["name"]
    out = {}
    for d in xs(trace, DEVICE_CATS):
        r = runtime[d["args"]["correlation"]]
        t = ns(r["ts"])
        encl = [o for o in ops if ns(o["ts"]) <= t <= ns(o["ts"] + o["dur"])]
        same = [o for o in encl if o["tid"] == r["tid"]]
        step = [k for k, (s, e) in steps.items() if s <= t <= e]
        assert len(step) == 1
        if any(o["name"].startswith("Optimizer.step#") for o in encl):
            phase = "optimizer"
        elif "autograd" in thread_names[r["tid"]] or any(
            o["name"].startswith("autograd::engine::evaluate_function") for o in same
        ):
            phase = "backward"
        else:
            phase = "forward"
        coll = None
        for o in sorted(same, key=lambda o: -ns(o["ts"])):
            if o["name"].startswith("nccl:"):
                coll = o["name"][5:]
                break
            if o["name"] == "record_param_comms":
                coll = o["args"]["Collective name"]
                break
        out[d["args"]["correlation"]] = (step[0], phase, coll)
    return out


def test_planted_labels_match_the_trace_structure(built):
    trace, truth = built
    got = _labels_from_trace(trace)
    names = {
        "all_gather": "AllGather",
        "_allgather_base": "AllGather",
        "allreduce": "AllReduce",
        "all_reduce": "AllReduce",
        "reduce_scatter": "ReduceScatter",
    }
    for a in truth.activities:
        step, phase, coll = got[a.correlation]
        assert (step, phase) == (a.step, a.phase), a
        if a.comm:
            assert names[coll] == a.collective
    assert {a.phase for a in truth.activities} == {"forward", "backward", "optimizer"}


def _sweep_busy(intervals):
    """Measure of a union by a +1/-1 event sweep (a different algorithm from tracekit.testing.union)."""
    pts = sorted(
        [(s, 1) for s, e in intervals] + [(e, -1) for s, e in intervals], key=lambda p: (p[0], -p[1])
    )
    depth, last, total = 0, None, 0
    for x, d in pts:
        if depth > 0:
            total += x - last
        depth += d
        last = x
    return total


def test_truth_idle_and_phases_by_an_independent_sweep(built):
    trace, truth = built
    dev = xs(trace, DEVICE_CATS)
    labels = _labels_from_trace(trace)
    for step in truth.steps:
        mine = [
            (ns(e["ts"]), ns(e["ts"] + e["dur"]), e)
            for e in dev
            if labels[e["args"]["correlation"]][0] == step
        ]
        lo, hi = min(m[0] for m in mine), max(m[1] for m in mine)
        busy = _sweep_busy([(s, e) for s, e, _ in mine])
        rec = next(r for r in truth.per_step["idle"] if r["step"] == step)
        assert rec["window_ms"] == pytest.approx((hi - lo) / 1e6, abs=1e-9)
        assert rec["busy_ms"] == pytest.approx(busy / 1e6, abs=1e-9)
        assert rec["idle_ms"] == pytest.approx((hi - lo - busy) / 1e6, abs=1e-9)
        # phase walls partition the window
        ph = {r["phase"]: r for r in truth.per_step["phases"] if r["step"] == step}
        assert sum(r["wall_ms"] for r in ph.values()) == pytest.approx((hi - lo) / 1e6, abs=1e-9)
        first_bwd = min(s for s, e, ev in mine if labels[ev["args"]["correlation"]][1] == "backward")
        assert ph["forward"]["wall_ms"] == pytest.approx((first_bwd - lo) / 1e6, abs=1e-9)
        comp = [
            (s, e)
            for s, e, ev in mine
            if ev["cat"] in ("kernel", "Kernel") and not ev["name"].startswith("nccl")
        ]
        for p in ("forward", "backward", "optimizer"):
            lab = [
                (s, e)
                for s, e, ev in mine
                if labels[ev["args"]["correlation"]][1] == p
                and ev["cat"] in ("kernel", "Kernel")
                and not ev["name"].startswith("nccl")
            ]
            assert ph[p]["compute_ms"] == pytest.approx(_sweep_busy(lab) / 1e6, abs=1e-9)
        assert _sweep_busy(comp) > 0


def test_columns_close_to_100_percent(built):
    _, truth = built
    for step in truth.steps:
        ph = {r["phase"]: r for r in truth.per_step["phases"] if r["step"] == step}
        for p, r in ph.items():
            rows = [m for m in truth.per_step["modules"] if m["step"] == step and m["phase"] == p]
            if r["wall_ms"] == 0:
                assert not rows
                continue
            assert sum(m["time_ms"] for m in rows) == pytest.approx(r["wall_ms"], abs=1e-9)
            assert sum(m["percent"] for m in rows) == pytest.approx(100.0, abs=1e-9)
            assert {m["module"] for m in rows} <= set(MODULE_ROWS)
        tl = [t for t in truth.per_step["timeline"] if t["step"] == step]
        assert sum(t["time_ms"] for t in tl) == pytest.approx(ph["forward"]["wall_ms"], abs=1e-9)
        assert {t["block"]: t["count"] for t in tl}["attention"] == truth.n_layers


def test_no_tied_starts_in_the_forward_window(built):
    """Ties would make the timeline's partition order-dependent."""
    _, truth = built
    for step in truth.steps:
        starts = [a.start for a in truth.activities if a.step == step and a.phase == "forward"]
        assert len(starts) == len(set(starts))


def test_planted_variety():
    """The default trace plants what the truth tests are meant to catch."""
    _trace, truth = llama_training(n_layers=2, n_steps=2)
    acts = truth.activities
    for step in truth.steps:
        A = [a for a in acts if a.step == step]
        comp = [a.iv for a in A if a.compute]
        comm = [a for a in A if a.comm]
        exposed = [measure(subtract([a.iv], comp)) for a in comm]
        assert any(x == 0 for x in exposed), "some comm fully overlapped"
        assert any(0 < x < a.end - a.start for x, a in zip(exposed, comm)), "some comm partly exposed"
        copies = [a for a in A if a.kind in ("memcpy", "memset")]
        partial = [a for a in copies if 0 < measure(subtract([a.iv], comp)) < a.end - a.start]
        assert partial, "a memcpy partly under compute"
        assert {a.kind for a in A} == {"kernel", "memcpy", "memset"}
        rec = next(r for r in truth.per_step["idle"] if r["step"] == step)
        assert rec["idle_ms"] > 0
        # concurrent compute: shares differ from clipped durations somewhere
        ck = [a.iv for a in A if a.compute]
        lo, hi = min(a.start for a in A), max(a.end for a in A)
        sh = shares(ck, lo, hi)
        assert any(s != e - b for s, (b, e) in zip(sh, ck))
        assert measure(ck) == sum(sh)
        # a comm kernel labelled backward that runs into the optimizer window
        o0 = min(a.start for a in A if a.phase == "optimizer")
        assert any(a.phase == "backward" and a.comm and a.end > o0 for a in A)
        # a generic NCCL kernel whose collective comes from the CPU side, both ways
        assert {a.collective for a in A if a.name == NCCL_GENERIC} == {"AllGather", "ReduceScatter"}
    # steps differ
    p5 = [r["wall_ms"] for r in truth.per_step["phases"] if r["step"] == 5]
    p6 = [r["wall_ms"] for r in truth.per_step["phases"] if r["step"] == 6]
    assert all(a != b for a, b in zip(p5, p6))
    # layers differ
    mlp = sorted(
        (a.end - a.start)
        for a in acts
        if a.step == 5 and a.phase == "forward" and a.category == "MLP" and a.gemm
    )
    assert len(set(mlp)) == len(mlp)


def test_nn_module_names_follow_pytorch_counters():
    trace, _ = llama_training(n_layers=2, n_steps=2)
    mods = sorted(
        (e for e in xs(trace, {"python_function"}) if e["name"].startswith("nn.Module: ")),
        key=lambda e: e["ts"],
    )
    step0 = mods[: len(mods) // 2]
    names = [e["name"][len("nn.Module: ") :] for e in step0]
    assert names[:5] == [
        "LlamaForCausalLM_0",
        "LlamaModel_0",
        "Embedding_0",
        "LlamaRotaryEmbedding_0",
        "LlamaDecoderLayer_0",
    ]
    lin = [n for n in names if n.startswith("Linear_")]
    assert lin == [f"Linear_{i}" for i in range(15)]  # 7 per layer, then lm_head
    norms = [n for n in names if n.startswith("LlamaRMSNorm_")]
    assert norms == [f"LlamaRMSNorm_{i}" for i in range(5)]
    assert [e["args"]["Python module id"] for e in step0 if e["name"] == "nn.Module: Linear_7"] == [7]
    # the second step repeats the same instance names
    assert [e["name"] for e in mods[len(mods) // 2 :]] == [e["name"] for e in step0]
    # parent ids point at an existing frame that encloses the module event
    frames = {e["args"]["Python id"]: e for e in xs(trace, {"python_function"})}
    for e in mods:
        p = e["args"]["Python parent id"]
        if p is None:
            continue
        f = frames[p]
        assert f["ts"] <= e["ts"] and e["ts"] + e["dur"] <= f["ts"] + f["dur"]


def test_capture_annotations():
    trace, _ = llama_training(modules="capture", n_layers=2, n_steps=1)
    names = [e["name"] for e in xs(trace, {"user_annotation"})]
    assert "tracekit.module:Linear:model.layers.1.self_attn.q_proj" in names
    assert "tracekit.module:LlamaDecoderLayer:model.layers.0" in names
    assert "tracekit.module:Linear:lm_head" in names
    for p in ("forward", "backward", "optimizer"):
        assert f"tracekit.phase:{p}" in names
    assert not any(e["name"].startswith("nn.Module") for e in xs(trace, {"python_function"}))


def test_big_ids_survive_json_exactly(tmp_path):
    trace, truth = llama_training(big_ids=True, n_steps=1)
    p = write_trace(tmp_path / "t.json.gz", trace)
    back = json.loads(gzip.open(p, "rt").read())
    corr = [e["args"]["correlation"] for e in xs(back, RUNTIME_CATS)]
    assert min(corr) > 2**53
    assert {a.correlation for a in truth.activities} <= set(corr)
    assert all(isinstance(c, int) for c in corr)
    text = gzip.open(p, "rt").read()
    assert str(2**62 + 1) in text


def test_ts_formats(tmp_path):
    t_float, _ = llama_training(n_steps=1)
    t_int, _ = llama_training(n_steps=1, ts_format="int")
    assert any(isinstance(e["ts"], float) and (e["ts"] * 1000) % 1000 for e in xs(t_float, DEVICE_CATS))
    assert all(isinstance(e["ts"], int) and isinstance(e["dur"], int) for e in xs(t_int))
    text = json.dumps(t_float)
    assert re.search(r'"ts": 1700000000\d{3}\.\d{1,3}[,}]', text)


def test_shuffle_keeps_events_and_truth():
    a, ta = llama_training(seed=11)
    b, tb = llama_training(seed=11, shuffle=True)

    def key(e):
        return json.dumps(e, sort_keys=True)

    assert sorted(map(key, a["traceEvents"])) == sorted(map(key, b["traceEvents"]))
    assert [key(e) for e in a["traceEvents"]] != [key(e) for e in b["traceEvents"]]
    assert ta.per_step == tb.per_step


def test_old_categories():
    trace, _ = llama_training(old_categories=True, n_steps=1)
    cats = Counter(e.get("cat") for e in trace["traceEvents"])
    assert cats["Kernel"] and cats["Runtime"] and cats["Operator"] and cats["Memcpy"] and cats["Memset"]
    assert not cats["kernel"] and not cats["cpu_op"] and not cats["ac2g"]
    assert cats["async_gpu"]


def test_union_helpers():
    assert union([(5, 7), (1, 3), (2, 4), (7, 8)]) == [(1, 4), (5, 8)]
    assert measure([(0, 10), (5, 15), (20, 21)]) == 16
    assert subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert [float(x) for x in shares([(0, 10), (5, 15)], 0, 20)] == [7.5, 7.5]
    assert [float(x) for x in shares([(0, 10), (5, 15)], 6, 8)] == [1.0, 1.0]
