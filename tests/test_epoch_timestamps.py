"""Epoch-scale timestamps: real Kineto files often carry integer microseconds since 1970
(~1.7e15 µs, ~1.7e18 ns). float64 cannot hold such nanosecond counts exactly (its spacing there
is 256 ns), so every measure must stay in int64. Shifting a synthetic trace to the epoch must
change no number at all."""

from __future__ import annotations

import pandas as pd
import pytest

import tracekit
from tracekit.testing import llama_training, write_trace

EPOCH_US = 1_700_000_000_000_000  # 2023-11-14 in microseconds


def _shifted(trace: dict, offset_us: int) -> dict:
    out = dict(trace)
    out["traceEvents"] = [dict(e, ts=e["ts"] + offset_us) if "ts" in e else e for e in trace["traceEvents"]]
    return out


@pytest.mark.parametrize(
    "cfg", [dict(ts_format="int", seed=3), dict(ts_format="int", attention="sdpa", n_steps=3, seed=8)]
)
def test_tables_do_not_change_when_shifted_to_the_epoch(tmp_path, cfg):
    trace, _ = llama_training(**cfg)
    base = tracekit.load(write_trace(tmp_path / "base.json", trace), cache=False)
    far = tracekit.load(write_trace(tmp_path / "far.json", _shifted(trace, EPOCH_US)), cache=False)
    for name, expected in base.tables(per_step=True).items():
        got = far.tables(per_step=True)[name]
        pd.testing.assert_frame_equal(
            got.reset_index(drop=True),
            expected.reset_index(drop=True),
            check_exact=False,
            atol=1e-9,
            rtol=0,
            obj=name,
        )
