"""The timeline table (Table XI) is computed for all steps and stages at once; it equals the
per-step reference (the loop it replaced, kept here) on training and inference traces."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tracekit.analyses import timeline
from tracekit.analyses._common import percent
from tracekit.analyses._stages import has_stages, split

import tracekit
from tracekit.pipeline.windows import frame_windows

sys.path.insert(0, str(Path(__file__).parent))
from tracekit.testing import llama_training, write_trace

SAMPLES = Path(__file__).resolve().parent.parent / "sample_traces"


def reference(intervals: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """One step and stage at a time: cut the window at every activity start, each piece to
    the block of the activity that starts it."""
    staged = has_stages(intervals)
    fw = frame_windows(windows).phases
    fw = fw[fw["phase"] == "forward"].set_index("step")
    rows = []
    for step, iv in intervals[intervals["window"] == "forward"].groupby("step", observed=True):
        if step not in fw.index:
            continue
        for stage, part in split(iv, staged):
            part = part.sort_values("start", kind="stable")
            if stage is None:
                lo, hi = int(fw.at[step, "lo"]), int(fw.at[step, "hi"])
            else:
                lo, hi = int(part["start"].min()), int(part["end"].max())
            starts = part["start"].to_numpy()
            nxt = np.append(starts[1:], hi)
            span = (np.minimum(nxt, hi) - np.maximum(starts, lo)).clip(min=0) / 1e6
            b = part["block"].astype(str).replace({"": "after"}).to_numpy()
            t = pd.Series(span).groupby(b).sum()
            lay = part["block"].astype(str).isin(["attention", "ffn"]).to_numpy()
            n_layers = int(part.loc[lay, "layer"].nunique())
            passes = max(int(part.loc[lay, "fwd_pass"].nunique()), 1) if staged else 1
            for blk in timeline.BLOCKS:
                tm = float(t.get(blk, 0.0))
                count = round(n_layers / passes) if blk in ("attention", "ffn") else 1
                rows.append(
                    {"step": step, **({"stage": stage} if staged else {}), "block": blk, "count": count}
                    | ({"passes": passes} if staged else {})
                    | {"time_ms": tm, "percent": float(percent(tm, (hi - lo) / 1e6))}
                )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("n_steps, seed", [(1, 3), (5, 4), (40, 5)])
def test_training_steps_equal_the_reference(tmp_path: Path, n_steps: int, seed: int) -> None:
    trace, _ = llama_training(n_steps=n_steps, n_layers=3, seed=seed)
    a = tracekit.load(write_trace(tmp_path / "t.json", trace), cache=False, jobs=1)
    att = a.ranks[0]
    got = timeline.table(att.intervals, frame_windows(att.windows))
    assert len(got) == 4 * len(att.meta["complete_steps"]) > 0
    # the table gives sums only: its percent is derived after aggregation (registry Ratio)
    pd.testing.assert_frame_equal(got, reference(att.intervals, att.windows).drop(columns="percent"))


def test_inference_stages_equal_the_reference() -> None:
    run = SAMPLES / "tiny-infer"
    if not run.is_dir():
        pytest.skip("sample_traces/tiny-infer not present")
    att = tracekit.load(run, cache=False, jobs=1).ranks[0]
    got = timeline.table(att.intervals, frame_windows(att.windows))
    assert "stage" in got and got["stage"].nunique() > 1
    # the table gives sums only: its percent is derived after aggregation (registry Ratio)
    pd.testing.assert_frame_equal(got, reference(att.intervals, att.windows).drop(columns="percent"))


def test_no_decoder_layers_is_empty() -> None:
    iv = pd.DataFrame({"block": pd.Categorical(["", ""]), "window": ["forward"] * 2, "step": [1, 1]})
    assert timeline.table(iv, pd.DataFrame()).empty
