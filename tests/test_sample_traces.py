"""The committed sample_traces/ still analyse, stay small, and match the commands documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "sample_traces"
SAMPLES = {  # directory -> (kind, ranks)
    "tiny-train-1rank": ("train", 1),
    "tiny-zero2-2ranks": ("train", 2),
    "tiny-infer": ("infer", 1),
}
LIMIT = 2 * 1024 * 1024


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_is_complete_and_small(name):
    kind, ranks = SAMPLES[name]
    d = ROOT / name
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["kind"] == kind
    traces = sorted(d.glob("*.pt.trace.json.gz"))
    assert [t.name for t in traces] == sorted(manifest["traces"])
    assert len(traces) == ranks
    for t in traces:
        assert t.stat().st_size <= LIMIT, t
    # sample_traces/README.md gives the exact command that made each sample
    assert f"`{manifest['command']}`" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_still_analyses(name):
    import tracekit

    kind, ranks = SAMPLES[name]
    tables = tracekit.load(ROOT / name).tables()
    phases = tables["phases"]
    if kind == "train":
        assert {"forward", "backward", "optimizer"} <= set(phases.loc[phases["wall_ms"] > 0, "phase"]), phases
        modules = tables["modules"]
        assert float(modules.loc[modules["module"] == "MLP", "time_ms"].sum()) > 0
    else:
        timeline = tables["timeline"]
        layers = json.loads((ROOT / name / "manifest.json").read_text())["config"]["model"][
            "num_hidden_layers"
        ]
        blocks = dict(zip(timeline["block"], timeline["count"]))
        assert blocks.get("attention") == layers and blocks.get("ffn") == layers, timeline
    if ranks == 2:
        assert float(tables["comm"]["time_ms"].sum()) > 0
