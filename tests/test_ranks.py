"""Files are not ranks: files of one process are successive windows of one rank
(tracekit.ranks.grouping); files of different distributed ranks stay ranks."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

import tracekit
from tracekit.ranks.grouping import FileIdentity, group_files
from tracekit.testing import TraceBuilder, write_trace
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADAM, K_MUL

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import SHARED


def three_steps(**kwargs) -> TraceBuilder:
    """Three training steps; each ends with a synchronize, so a file can be cut between them."""
    b = TraceBuilder(**kwargs)
    for k in range(3):
        with b.step():
            with b.module("LlamaMLP", "model.layers.0.mlp"):
                mm = b.kernel(GEMM_A, 10 + k, op="aten::mm", gap_us=2)
                mul = b.kernel(K_MUL, 2, op="aten::mul", gap_us=3)
            with b.backward():
                b.kernel(K_MUL, 3, op="aten::mul", creator=mul, gap_us=1)
                b.kernel(GEMM_NN, 20, op="aten::mm", creator=mm, gap_us=2)
            with b.optimizer():
                b.kernel(K_ADAM, 5, op="aten::_fused_adam_", gap_us=4)
            b.synchronize()
        b.cpu(50)
    return b


def split(trace: dict, before_step: int) -> tuple[dict, dict]:
    """Cut a trace in two profiling windows at the start of ``ProfilerStep#before_step``:
    metadata in both, every other event in the window its time falls in."""
    cut = min(
        e["ts"]
        for e in trace["traceEvents"]
        if e.get("name") == f"ProfilerStep#{before_step}" and e.get("cat") != "gpu_user_annotation"
    )
    meta = [e for e in trace["traceEvents"] if e.get("ph") == "M"]
    rest = [e for e in trace["traceEvents"] if e.get("ph") != "M"]
    first = [e for e in rest if e["ts"] < cut]
    second = [e for e in rest if e["ts"] >= cut]
    return {**trace, "traceEvents": meta + first}, {**trace, "traceEvents": meta + second}


def _per_step(a) -> dict[str, pd.DataFrame]:
    return {k: v.reset_index(drop=True) for k, v in a.tables(per_step=True).items()}


@pytest.mark.parametrize("distributed", [True, False])
def test_two_windows_of_one_process_are_one_rank(tmp_path: Path, distributed: bool) -> None:
    b = three_steps()
    trace = b.trace(distributed=distributed)
    one = tmp_path / "one"
    one.mkdir()
    write_trace(one / "host_48213.1.pt.trace.json", trace)
    two = tmp_path / "two"
    two.mkdir()
    a, c = split(trace, 3)
    write_trace(two / "host_48213.2.pt.trace.json", c)  # file order is not time order
    write_trace(two / "host_48213.1.pt.trace.json", a)
    single = tracekit.load(one, cache=False, jobs=1)
    windows = tracekit.load(two, cache=False, jobs=1)
    assert sorted(windows.ranks) == [0] and not windows.multi_rank
    assert windows.meta["steps"] == {0: [1, 2, 3]} == single.meta["steps"]
    assert "ranks" not in windows.tables() and "rank_summary" not in windows.tables()
    assert "2 files -> 1 rank" in windows.meta["rank_grouping"]
    want, got = _per_step(single), _per_step(windows)
    assert want.keys() == got.keys()
    for name in want:
        pd.testing.assert_frame_equal(got[name], want[name], check_dtype=False, obj=name)


def test_repeated_step_numbers_are_renumbered(tmp_path: Path) -> None:
    """Two cycles that both count from ProfilerStep#1: still two steps of one rank."""
    first = three_steps()
    later = three_steps(start_ns=first.origin + 10_000_000_000)
    write_trace(tmp_path / "a.pt.trace.json", first.trace())
    write_trace(tmp_path / "b.pt.trace.json", later.trace())
    an = tracekit.load(tmp_path, cache=False, jobs=1)
    assert sorted(an.ranks) == [0]
    assert an.meta["steps"] == {0: [1, 2, 3, 4, 5, 6]}
    assert any("renumbered 4-6" in w["message"] for w in an.meta["warnings"])
    ph = an.table("phases", per_step=True)
    assert sorted(ph["step"].unique()) == [1, 2, 3, 4, 5, 6]


def test_unranked_files_of_different_processes_stay_apart(tmp_path: Path) -> None:
    write_trace(tmp_path / "a.pt.trace.json", three_steps(pid=100).trace(distributed=False))
    write_trace(tmp_path / "b.pt.trace.json", three_steps(pid=200).trace(distributed=False))
    an = tracekit.load(tmp_path, cache=False, jobs=1)
    assert sorted(an.ranks) == [0, 1]
    assert "grouped by process" in an.meta["rank_grouping"]
    assert "not distributed ranks" in an.meta["rank_grouping"]


def test_distributed_ranks_stay_ranks(tmp_path: Path) -> None:
    write_trace(tmp_path / "r0.pt.trace.json", three_steps(rank=0, world_size=2).trace())
    write_trace(tmp_path / "r1.pt.trace.json", three_steps(rank=1, world_size=2).trace())
    an = tracekit.load(tmp_path, cache=False, jobs=1)
    assert sorted(an.ranks) == [0, 1] and "rank_summary" in an.tables()
    assert an.meta["rank_grouping"].startswith("ranks from distributedInfo")


def test_grouping_rules() -> None:
    ids = [
        FileIdentity(1, 7, "h"),
        FileIdentity(None, 7, "h"),
        FileIdentity(None, 9, "h"),
        FileIdentity(None, None, None),
        FileIdentity(1, 8, "h"),
        FileIdentity(None, 9, "h"),
    ]
    groups, how = group_files(ids)
    assert groups == {0: [2, 5], 1: [0, 1, 4], 2: [3]}
    assert "6 files -> 3 ranks" in how and "no CPU process id" in how


@pytest.mark.shared
def test_real_rank_files_stay_two_ranks(tmp_path: Path) -> None:
    for r in (0, 1):
        src = SHARED / f"hta/trace_filter__sampled_rank-{r}.json.gz"
        if not src.is_file():
            pytest.skip(f"shared traces not found at {SHARED}")
        shutil.copy(src, tmp_path / src.name)
    an = tracekit.load(tmp_path, cache=False, jobs=1)
    assert sorted(an.ranks) == [0, 1]
    assert an.meta["rank_grouping"].startswith("ranks from distributedInfo")


def test_capture_manifest_gives_ranks(tmp_path: Path) -> None:
    """No distributedInfo, one process id: the capture manifest still says they are 2 ranks."""
    import json

    for r in (0, 1):
        write_trace(tmp_path / f"rank{r}.pt.trace.json", three_steps().trace(distributed=False))
    (tmp_path / "manifest.json").write_text(
        json.dumps(
            {"tracekit_capture": 1, "ranks": [{"rank": r, "trace": f"rank{r}.pt.trace.json"} for r in (0, 1)]}
        )
    )
    an = tracekit.load(tmp_path, cache=False, jobs=1)
    assert sorted(an.ranks) == [0, 1]


def test_copies_of_one_rank_warn_in_a_few_lines_and_json_keeps_each(tmp_path: Path) -> None:
    """Copies of one rank-0 file are successive windows of one rank: each later step overlaps
    the first, and says so once per step in JSON, but stderr shows a few and counts the rest."""
    import json
    import subprocess

    from tracekit.pipeline.checks import SHOWN

    sample = next(
        (Path(__file__).parents[1] / "sample_traces" / "tiny-train-1rank").glob("*.pt.trace.json.gz")
    )
    d = tmp_path / "copies"
    d.mkdir()
    n = SHOWN + 4
    for i in range(n):
        shutil.copy(sample, d / f"w{i}.pt.trace.json.gz")
    out = tmp_path / "out.json"
    cmd = [
        sys.executable,
        "-m",
        "tracekit.cli",
        "analyze",
        str(d),
        "--format",
        "json",
        "--no-cache",
        "--out",
        str(out),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    warnings = json.loads(out.read_text())["meta"]["warnings"]
    overlaps = [w for w in warnings if w["code"] == "steps_overlap"]
    assert len(overlaps) == n - 1
    lines = [x for x in r.stderr.splitlines() if "overlap" in x or "steps_overlap" in x]
    assert len(lines) == SHOWN + 1
    assert f"{n - 1 - SHOWN} more warnings like these (steps_overlap" in lines[-1]
    renumbered = next(w["message"] for w in warnings if w["code"] == "steps_renumbered")
    assert renumbered.endswith(f"and {n - 1 - SHOWN} more files")
