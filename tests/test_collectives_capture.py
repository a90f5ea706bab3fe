"""``tracekit capture train`` with two ranks on CPU (gloo) yields traces on which the issue-36
tables work (issue 36 "Capture"): the collectives table, each instance matched across the two
ranks, clock offsets and stragglers. A real DeepSpeed ZeRO-2 capture (2 layers, hidden 64, 32
tokens, 2 recorded steps), about a minute on 2 cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit

pytestmark = pytest.mark.capture


@pytest.fixture(scope="module")
def run2(tmp_path_factory) -> Path:
    for name in ("torch", "deepspeed", "transformers"):
        pytest.importorskip(name, reason=f"capture needs {name} (pip install 'tracekit[capture]')")
    out = tmp_path_factory.mktemp("cap") / "run"
    args = ["--model", "tiny", "--layers", "2", "--seq-len", "32", "--batch-size", "1", "--warmup", "1",
            "--steps", "2", "--zero", "2", "--nproc-per-node", "2", "--no-stack"]  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "tracekit.capture.cli", "train", *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]
    return out


def test_two_gloo_ranks_give_every_collectives_table(run2: Path) -> None:
    a = tracekit.load(run2, cache=False, jobs=1)
    c = a.table("collectives")
    assert sorted(c["rank"].unique()) == [0, 1]
    assert sorted(c["step"].unique()) == [1, 2]
    # ZeRO-2: gradients all-reduced in backward, parameters all-gathered after the optimizer
    assert {"AllReduce", "AllGather"} <= set(c["collective"])
    assert (c["calls"] >= 1).all() and (c["bytes"] > 0).all()
    # the same calls on both ranks, and every instance matched across them
    per_rank = c.groupby(["rank", "step", "collective"])["calls"].sum().unstack("rank")
    assert (per_rank[0] == per_rank[1]).all()
    assert c["wait_ms"].notna().all() and c["transfer_ms"].notna().all()
    assert (c["wait_ms"] >= 0).all() and (c["transfer_ms"] >= 0).all()
    split = c["wait_ms"] + c["transfer_ms"]
    assert split.tolist() == pytest.approx(c["time_ms"].tolist(), abs=1e-6)
    m = a.table("collective_matches")
    assert len(m) == int(per_rank[0].sum()) and (m["ranks"] == 2).all()
    # one host: the two clocks are one, so the offset is the ends' skew, well under a step
    offsets = a.meta["clock_offsets_ms"]
    assert set(offsets) == {0, 1} and offsets[0] == 0.0
    step_ms = a.table("phases", per_step=True)["wall_ms"].max() if "phases" in a.names() else 1e9
    assert abs(offsets[1]) < step_ms
    s = a.table("stragglers")
    assert len(s) >= 1 and set(s["rank"]) <= {0, 1} and set(s["step"]) <= {1, 2}
    assert (s["caused_wait_ms"] > 0).all()
    # the wait each straggler caused is the other rank's wait on the instances it arrived last at
    late = m.groupby(["step", "last_rank"])["caused_wait_ms"].sum()
    for row in s.itertuples():
        assert row.caused_wait_ms == pytest.approx(late[(row.step, row.rank)], abs=1e-9)
