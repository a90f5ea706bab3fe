"""Unit tests of nest_cpu_ops, link_backward and assign_phases on tiny hand-built traces."""

from __future__ import annotations

from frames import ANNOTATION, CPU_OP, FLOW_FWDBWD, KERNEL, PYTHON, RUNTIME, ev, trace

from tracekit.pipeline.backward import link_backward
from tracekit.pipeline.launches import join_launches
from tracekit.pipeline.nest import nest_cpu_ops
from tracekit.pipeline.phases import assign_phases
from tracekit.pipeline.steps import find_steps

FWD, BWD = 1, 2  # forward (main) and autograd threads


def _train(flows: bool = False):
    rows = [
        ev(ANNOTATION, "ProfilerStep#1", 0, 1000, tid=FWD),
        ev(PYTHON, "nn.Module: LlamaMLP_0", 10, 200, tid=FWD),
        ev(CPU_OP, "aten::linear", 20, 100, tid=FWD, seq=5, fwd_tid=0),
        ev(CPU_OP, "aten::mm", 30, 50, tid=FWD, seq=6, fwd_tid=0),
        ev(RUNTIME, "cudaLaunchKernel", 40, 5, tid=FWD, corr=1),
        ev(CPU_OP, "autograd::engine::evaluate_function: MmBackward0", 400, 100, tid=BWD),
        ev(CPU_OP, "MmBackward0", 410, 80, tid=BWD, seq=6, fwd_tid=FWD),
        ev(CPU_OP, "aten::mm", 420, 50, tid=BWD),
        ev(RUNTIME, "cudaLaunchKernel", 430, 5, tid=BWD, corr=2),
        ev(CPU_OP, "Optimizer.step#Adam.step", 700, 100, tid=FWD),
        ev(RUNTIME, "cudaLaunchKernel", 710, 5, tid=FWD, corr=3),
        ev(KERNEL, "gemm_fwd", 60, 30, pid=0, tid=7, corr=1, stream=7),
        ev(KERNEL, "gemm_bwd", 450, 30, pid=0, tid=7, corr=2, stream=7),
        ev(KERNEL, "adam", 720, 30, pid=0, tid=7, corr=3, stream=7),
    ]
    if flows:  # fwdbwd flow from aten::linear (not the seq match) to the backward node
        rows += [
            ev(FLOW_FWDBWD, "fwdbwd", 20, 0, tid=FWD, flow_id=9, flow_ph="s"),
            ev(FLOW_FWDBWD, "fwdbwd", 410, 0, tid=BWD, flow_id=9, flow_ph="f"),
        ]
    return nest_cpu_ops(find_steps(join_launches(trace(*rows))))


def _row(t, name):
    return t.acts[t.acts["name"].astype(str) == name].iloc[0]


def test_nest_cpu_ops_finds_innermost_op_top_op_and_module():
    t = _train()
    r = t.ranges
    fwd = _row(t, "gemm_fwd")
    assert str(fwd["op"]) == "aten::mm"
    assert r["name"].iat[fwd["top_r"]] == "aten::linear"
    assert r["name"].iat[fwd["mod_r"]] == "nn.Module: LlamaMLP_0"
    assert fwd["bwd_r"] == -1
    bwd = _row(t, "gemm_bwd")
    assert r["name"].iat[bwd["bwd_r"]] == "MmBackward0" and bwd["mod_r"] == -1
    assert not t.capture_modules


def test_link_backward_by_sequence_number():
    t = link_backward(_train())
    bwd = _row(t, "gemm_bwd")
    assert bwd["backward_node"] and str(bwd["bwd_link"]) == "seq"
    assert str(bwd["node"]) == "MmBackward0" and bwd["node_seq"] == 6
    assert str(bwd["fwd_op"]) == "aten::mm" and bwd["fwd_op_id"] == 3
    fwd = _row(t, "gemm_fwd")
    assert not fwd["backward_node"] and str(fwd["bwd_link"]) == "" and fwd["fwd_op_id"] == -1


def test_assign_phases_records_the_evidence():
    t = assign_phases(link_backward(_train()))
    got = {
        str(n): (str(p), str(e)) for n, p, e in zip(t.acts["name"], t.acts["phase"], t.acts["phase_evidence"])
    }
    assert got == {
        "gemm_fwd": ("forward", "default"),
        "gemm_bwd": ("backward", "autograd_thread"),
        "adam": ("optimizer", "optimizer_range"),
    }


def test_link_backward_prefers_the_fwdbwd_flow():
    t = link_backward(_train(flows=True))
    bwd = _row(t, "gemm_bwd")
    assert str(bwd["bwd_link"]) == "flow" and str(bwd["fwd_op"]) == "aten::linear"


def test_link_backward_takes_the_last_op_with_the_number():
    t = _train()
    r = t.ranges
    r.loc[r["name"] == "aten::linear", "seq"] = 6  # an earlier op with the node's number
    t = link_backward(t)
    assert str(_row(t, "gemm_bwd")["fwd_op"]) == "aten::mm"


def test_nest_cpu_ops_gives_every_self_time_piece_its_own_ops_context():
    """CPU mode: the pieces of one op share the op's context (its module, top op, backward
    node), whatever ops and frames nest inside it (issue 12.4)."""
    t = nest_cpu_ops(
        find_steps(
            join_launches(
                trace(
                    ev(ANNOTATION, "ProfilerStep#1", 0, 1000, tid=FWD),
                    ev(PYTHON, "nn.Module: LlamaMLP_0", 10, 200, tid=FWD),
                    ev(CPU_OP, "aten::linear", 20, 100, tid=FWD, seq=5, fwd_tid=0),
                    ev(CPU_OP, "aten::mm", 20, 50, tid=FWD, seq=6, fwd_tid=0),  # same start
                    ev(CPU_OP, "aten::resolve_conj", 30, 5, tid=FWD),
                    ev(CPU_OP, "autograd::engine::evaluate_function: MmBackward0", 400, 100, tid=BWD, seq=6),
                    ev(CPU_OP, "MmBackward0", 410, 80, tid=BWD, seq=6, fwd_tid=FWD),
                    ev(CPU_OP, "aten::mm", 420, 50, tid=BWD),
                )
            )
        )
    )
    a, r = t.acts, t.ranges
    name = a["name"].astype(str)
    lin = a[name == "aten::linear"]
    assert len(lin) == 1 and (lin["start"].iat[0], lin["end"].iat[0]) == (70, 120)
    for n in ("aten::linear", "aten::resolve_conj"):
        sub = a[name == n]
        assert (r["name"].to_numpy()[sub["mod_r"]] == "nn.Module: LlamaMLP_0").all()
        assert (r["name"].to_numpy()[sub["top_r"]] == "aten::linear").all()
    mm = a[(name == "aten::mm") & (a["launch_tid"] == FWD)]
    assert sorted(zip(mm["start"], mm["end"])) == [(20, 30), (35, 70)]
    assert (mm["op"].astype(str) == "aten::mm").all() and mm["count"].sum() == 1
    node = a[name == "MmBackward0"]
    assert len(node) == 2 and (r["name"].to_numpy()[node["bwd_r"]] == "MmBackward0").all()
    wrapper = a[name.str.startswith("autograd::engine")]
    assert (r["name"].to_numpy()[wrapper["bwd_r"]] == name[wrapper.index]).all()
    bwd_mm = a[(name == "aten::mm") & (a["launch_tid"] == BWD)]
    assert r["name"].to_numpy()[bwd_mm["bwd_r"]].tolist() == ["MmBackward0"]
