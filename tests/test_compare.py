"""``tracekit compare``: two synthetic runs that differ only in attention (eager vs SDPA).

The expected numbers come from the scenario's planted truth (tracekit.testing.llama_training), not from
tracekit: attention = Bmm0 + Softmax + Bmm1 + Attention module time per phase.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.compare import ATTENTION_PARTS, compare
from tracekit.testing import llama_training, write_trace

N_STEPS = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("cmp")
    out = {}
    for att in ("eager", "sdpa"):
        trace, truth = llama_training(attention=att, n_steps=N_STEPS, n_layers=2, seed=1)
        out[att] = (write_trace(d / f"{att}.json", trace), truth)
    return out


def _truth_attention(truth, phase):
    per = truth.frame("modules", per_step=True)
    per = per[(per["phase"] == phase) & per["module"].isin(ATTENTION_PARTS)]
    by_step = per.groupby("step")["time_ms"].sum().reindex(truth.steps, fill_value=0.0)
    return float(by_step.mean()), float(by_step.std(ddof=1))


def test_attention_table_matches_truth(runs):
    (pa, ta), (pb, tb) = runs["eager"], runs["sdpa"]
    tables = compare(tracekit.load(pa), tracekit.load(pb))
    att = tables["attention"].set_index("phase")
    for ph in ("forward", "backward"):
        a_ms, a_std = _truth_attention(ta, ph)
        b_ms, b_std = _truth_attention(tb, ph)
        assert a_ms > 0 and b_ms > 0
        assert att.at[ph, "a_ms"] == pytest.approx(a_ms, rel=1e-6)
        assert att.at[ph, "b_ms"] == pytest.approx(b_ms, rel=1e-6)
        assert att.at[ph, "improvement_pct"] == pytest.approx((a_ms - b_ms) / a_ms * 100, rel=1e-6)
        assert att.at[ph, "a_std"] == pytest.approx(a_std, rel=1e-6)
        assert att.at[ph, "b_std"] == pytest.approx(b_std, rel=1e-6)


def test_deltas(runs):
    a, b = tracekit.load(runs["eager"][0]), tracekit.load(runs["sdpa"][0])
    t = compare(a, b)
    m = t["modules_delta"].set_index(["phase", "module"])
    # eager has Bmm0/Softmax/Bmm1 and no fused kernel; SDPA the other way round
    assert m.at[("forward", "Bmm0"), "b_ms"] == 0 and m.at[("forward", "Bmm0"), "a_ms"] > 0
    assert m.at[("forward", "Attention"), "a_ms"] == 0 and m.at[("forward", "Attention"), "b_ms"] > 0
    assert m.at[("forward", "Bmm0"), "delta_pct"] == pytest.approx(-100.0)
    assert np.isnan(m.at[("forward", "Attention"), "delta_pct"])  # A is 0: no percentage
    # delta = b - a everywhere; means equal the single-run tables
    for name, df in t.items():
        if "delta_ms" in df:
            assert np.allclose(df["delta_ms"], df["b_ms"] - df["a_ms"])
    ph = t["phases_delta"].set_index("phase")["a_ms"]
    assert ph.to_dict() == pytest.approx(a.table("phases").set_index("phase")["wall_ms"].to_dict())
    assert list(t["phases_delta"]["phase"]) == ["forward", "backward", "optimizer"]
    k = t["kernels_delta"].set_index(["group", "category"])
    assert k.at[("compute", "Attention"), "a_ms"] == 0 and k.at[("compute", "Attention"), "b_ms"] > 0


def test_single_step_has_no_noise(tmp_path):
    paths = []
    for att in ("eager", "sdpa"):
        trace, _ = llama_training(attention=att, n_steps=1, n_layers=1)
        paths.append(write_trace(tmp_path / f"{att}.json", trace))
    t = compare(tracekit.load(paths[0]), tracekit.load(paths[1]))
    assert t["attention"]["a_std"].isna().all() and t["phases_delta"]["b_std"].isna().all()


def test_cli_compare_json_contract(runs):
    r = CliRunner().invoke(main, ["compare", str(runs["eager"][0]), str(runs["sdpa"][0]), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert set(doc) == {"meta", "tables"}
    assert doc["meta"]["a"]["path"].endswith("eager.json")
    att = [k for k in doc["tables"] if "attention" in k]
    assert att == ["attention"]
    fwd = next(x for x in doc["tables"]["attention"] if x["phase"] == "forward")
    assert fwd["improvement_pct"] > 0  # SDPA's fused kernel beats eager in the planted run


def test_cli_compare_table_and_bad_input(runs, tmp_path):
    r = CliRunner().invoke(main, ["compare", str(runs["eager"][0]), str(runs["sdpa"][0])])
    assert r.exit_code == 0 and "Table VIII" in r.stdout
    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")
    r = CliRunner().invoke(main, ["compare", str(runs["eager"][0]), str(bad)])
    assert r.exit_code == 2 and "bad.json" in r.output and "Traceback" not in r.output
