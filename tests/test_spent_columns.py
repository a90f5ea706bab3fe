"""The run drops the linking steps' activity columns that no later step reads
(:data:`tracekit.pipeline.SPENT_COLUMNS`, before the critical path, issue 34's peak). Its
result must equal the full state's: a step after ``add_shares`` that starts reading one of
them fails here (a KeyError in ``run``, or a different critical path)."""

from __future__ import annotations

import pandas as pd
import pytest
from shared_traces import shared_trace

from tracekit.pipeline import INTERVAL_COLUMNS, SPENT_COLUMNS, analyse, result, run
from tracekit.pipeline.taxonomy import kernel_rules, module_taxonomy
from tracekit.read.reader import read_trace

pytestmark = pytest.mark.shared

TRACES = [
    "hta/critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "hta/nccl_parser_config__nccl_data.json.gz",
    "kineto/tb_plugin__samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
]


def test_no_spent_column_is_an_interval_column():
    assert not set(SPENT_COLUMNS) & set(INTERVAL_COLUMNS)


@pytest.mark.parametrize("name", TRACES)
def test_the_lean_run_equals_the_full_state(name):
    path = shared_trace(name)
    tax, rules = module_taxonomy(None), kernel_rules(None)
    full = analyse(read_trace(path), tax, rules)
    assert set(SPENT_COLUMNS) <= set(full.acts.columns)  # they exist, so the drop is real
    want = result(full)
    got = run(read_trace(path), tax, rules)
    assert len(got.critical), "a trace with launches has a critical path"
    pd.testing.assert_frame_equal(got.critical, want.critical)
    pd.testing.assert_frame_equal(got.intervals, want.intervals)
    assert got.meta == want.meta
