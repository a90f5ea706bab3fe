"""Planted truth for ``idle_host``: when no stream was busy, what the launching thread was doing.

The planted trace of tests/test_idle_causes.py: the device-level gap after the ``aten::item``
sync is the sync's, the one during the data-loader stall the data loader's, the gaps between the
host-bound optimizer's kernels the optimizer's; per step the rows add up to the ``idle`` table's
idle time (every activity is launched and the phases do not overlap).
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from test_idle_causes import ELEMENTWISE, _step

import tracekit
from tracekit.pipeline.host_idle import device_gaps
from tracekit.testing import COMPUTE_STREAM, TraceBuilder


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    b = TraceBuilder(modules="none")
    for _ in range(3):
        _step(b)
    path = b.write(tmp_path_factory.mktemp("host") / "planted.pt.trace.json")
    return b, tracekit.load(path, cache=False, jobs=1)


def _host(iv, act) -> tuple[int, str, str]:
    """(gap start, family, op) of the device-level gap that ends at ``act``'s start."""
    row = iv[(iv["start"] == act.start).to_numpy() & (iv["stream"] == act.stream).to_numpy()]
    assert len(row) == 1
    r = row.iloc[0]
    return int(r["host_gap_lo"]), str(r["host_family"]), str(r["host_op"])


def test_each_gap_names_what_the_host_did(planted):
    b, a = planted
    iv = a.ranks[0].intervals
    last = [x for x in b.activities if x.step == b.steps[-1]]
    compute = [x for x in last if x.stream == COMPUTE_STREAM]
    names = [x.name for x in compute]
    after_sync, after_stall = compute[names.index(ELEMENTWISE)], compute[names.index(ELEMENTWISE) + 1]
    busy_before = max(x.end for x in last if x.start < after_sync.start)
    assert _host(iv, after_sync) == (busy_before, "sync", "aten::_local_scalar_dense")
    lo, family, op = _host(iv, after_stall)
    assert (lo, family) == (after_sync.end, "data_loader")
    assert "DataLoader" in op
    opt = [x for x in last if x.phase == "optimizer"]
    for prev, act in pairwise(opt):
        assert _host(iv, act)[:2] == (prev.end, "optimizer")


def test_rows_add_up_to_idle(planted):
    _, a = planted
    host = a.table("idle_host", per_step=True)
    idle = a.table("idle", per_step=True).set_index("step")["idle_ms"]
    got = host.groupby("step")["idle_ms"].sum()
    assert got.to_dict() == pytest.approx(idle.to_dict(), abs=1e-6)
    assert (host["idle_ms"] > 0).all()
    assert set(host["family"]) <= {
        "launch_in_flight",
        "sync",
        "data_loader",
        "collective_wait",
        "optimizer",
        "other_op",
        "no_op",
    }


def test_device_gaps_over_all_streams():
    import numpy as np

    start = np.array([0, 5, 30, 12, 40], np.int64)
    end = np.array([10, 20, 35, 14, 50], np.int64)
    lo, gap = device_gaps(start, end)
    assert gap.tolist() == [False, False, True, False, True]
    assert lo.tolist() == [-1, -1, 20, -1, 35]
