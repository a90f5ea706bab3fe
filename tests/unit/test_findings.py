"""Findings from planted tables: each category's size, share, order and thresholds."""

from __future__ import annotations

import pandas as pd
import pytest
from tracekit.analyses.findings import findings, rules


def _tables(**over) -> dict[str, pd.DataFrame]:
    """Three ranks: ranks 0 and 1 wait 5 ms per step for rank 2, whose optimizer ran long."""
    t = {
        "idle": pd.DataFrame({"rank": [0, 1, 2], "window_ms": [100.0, 100.0, 100.0]}),
        "phases": pd.DataFrame(
            {
                "rank": [0, 0, 1, 1, 2, 2],
                "phase": ["forward", "backward"] * 3,
                "exposed_comm_ms": [0.0, 6.0, 0.0, 6.0, 0.0, 0.5],
            }
        ),
        "collectives": pd.DataFrame(
            {
                "rank": [0, 1, 2],
                "phase": ["backward"] * 3,
                "collective": ["all_reduce"] * 3,
                "wait_ms": [5.0, 5.0, 0.0],
            }
        ),
        "stragglers": pd.DataFrame(
            {
                "rank": [0, 1, 2],
                "caused_wait_ms": [0.0, 0.0, 10.0],
                "phase": ["", "", "optimizer"],
                "module": ["", "", "Other"],
                "op": ["", "", "Optimizer.step#AdamW.step"],
            }
        ),
        "idle_host": pd.DataFrame(
            {
                "rank": [2, 2],
                "phase": ["optimizer", "forward"],
                "family": ["optimizer", "launch_in_flight"],
                "module": ["Other", "Other"],
                "op": ["Optimizer.step#AdamW.step", "aten::mm"],
                "idle_ms": [3.0, 0.5],
            }
        ),
    }
    t.update(over)
    return t


def _run(tables, rule_set=None) -> pd.DataFrame:
    return findings(tables.get, rule_set or rules())


def test_a_planted_straggler_comes_first():
    out = _run(_tables())
    first = out.iloc[0]
    assert (first["category"], first["ms"], first["share_pct"]) == ("straggler_wait", 5.0, 5.0)
    assert (
        "rank 2 kept the others waiting most" in first["evidence"] and "Optimizer.step" in first["evidence"]
    )
    got = {(r.category, r.rank): round(r.ms, 9) for r in out.itertuples()}
    assert got == {
        ("straggler_wait", 0): 5.0,
        ("straggler_wait", 1): 5.0,
        ("host_bound_idle", 2): 3.0,
        ("exposed_transfer", 0): 1.0,
        ("exposed_transfer", 1): 1.0,
    }  # rank 2's 0.5 ms of exposed transfer is under the 1% share threshold
    assert list(out["ms"]) == sorted(out["ms"], reverse=True)


def test_a_straggler_with_no_op_before_its_arrival_names_none():
    """A pipeline send's late rank may have run no compute op before arriving: the evidence
    then points at the stragglers table without an empty 'late after' clause."""
    late = _tables()["stragglers"].assign(phase="", module="", op="")
    first = _run(_tables(stragglers=late)).iloc[0]
    assert "rank 2 kept the others waiting most, 10.000 ms (stragglers table)" in first["evidence"]
    assert "late after" not in first["evidence"]


def test_the_same_tables_give_the_same_findings():
    a, b = _run(_tables()), _run(_tables())
    pd.testing.assert_frame_equal(a, b)


def test_wait_is_capped_by_exposed_communication():
    phases = _tables()["phases"].assign(exposed_comm_ms=[0.0, 2.0, 0.0, 2.0, 0.0, 0.0])
    out = _run(_tables(phases=phases))
    wait = out[out["category"] == "straggler_wait"]
    assert list(wait["ms"]) == [2.0, 2.0]
    assert "exposed_transfer" not in set(out["category"])


def test_thresholds_come_from_a_user_file(tmp_path):
    f = tmp_path / "f.toml"
    f.write_text("[host_bound_idle]\nmin_ms = 10.0\n")
    out = _run(_tables(), rules(str(f)))
    assert "host_bound_idle" not in set(out["category"])
    f.write_text("[host_bound_idle]\nmin_msec = 10.0\n")
    with pytest.raises(ValueError, match="unknown finding rule"):
        rules(str(f))


def test_gemm_shapes_below_peak_and_memory_spikes():
    gemm = pd.DataFrame(
        {
            "op": ["aten::mm", "aten::mm"],
            "m": [64, 4096],
            "n": [64, 4096],
            "k": [64, 4096],
            "dtype": ["bf16", "bf16"],
            "time_ms": [4.0, 10.0],
            "ideal_ms": [1.0, 9.0],
            "peak_pct": [25.0, 90.0],
        }
    )
    memory = pd.DataFrame(
        {
            "device": ["gpu:0"] * 3,
            "phase": ["step", "forward", "backward"],
            "peak_growth_mb": [900.0, 800.0, 10.0],
            "peak_allocated_mb": [1000.0, 1000.0, 1000.0],
        }
    )
    out = findings(
        {"gemm_shapes": gemm, "memory": memory, "idle": pd.DataFrame({"window_ms": [50.0]})}.get, rules()
    )
    assert list(out["category"]) == ["gemm_below_peak", "memory_spike"]
    g, m = out.iloc[0], out.iloc[1]
    assert (g["rank"], g["ms"], g["share_pct"], g["explain"]) == (0, 3.0, 6.0, "--op aten::mm")
    assert "64x64x64 bf16 at 25.0%" in g["evidence"]
    assert m["ms"] == 0.0 and "grows 800.0 MB in forward" in m["evidence"]


def test_per_step_rows_keep_their_step():
    idle = pd.DataFrame({"rank": [0, 0], "step": [1, 2], "window_ms": [10.0, 10.0]})
    host = pd.DataFrame(
        {
            "rank": [0, 0],
            "step": [1, 2],
            "phase": ["optimizer"] * 2,
            "family": ["sync"] * 2,
            "module": ["Other"] * 2,
            "op": ["aten::item"] * 2,
            "idle_ms": [1.0, 2.0],
        }
    )
    out = findings({"idle": idle, "idle_host": host}.get, rules(), per_step=True)
    assert list(zip(out["step"], out["ms"], out["share_pct"])) == [(2, 2.0, 20.0), (1, 1.0, 10.0)]


def test_no_tables_no_findings():
    out = findings({}.get, rules())
    assert out.empty and "category" in out.columns


def test_a_mean_view_table_that_keeps_its_steps_is_averaged_over_them():
    """The cross-rank collectives table keeps a ``step`` column in the mean view: 4 and 6 ms
    of wait in two steps is 5 ms per step."""
    coll = pd.DataFrame(
        {
            "rank": [0, 0, 1, 1],
            "step": [1, 2, 1, 2],
            "phase": ["backward"] * 4,
            "collective": ["all_reduce"] * 4,
            "wait_ms": [4.0, 6.0, 0.0, 0.0],
        }
    )
    out = _run(_tables(collectives=coll, stragglers=None))
    wait = out[out["category"] == "straggler_wait"]
    assert list(zip(wait["rank"], wait["ms"])) == [(0, 5.0)]
    assert "step" not in out.columns
