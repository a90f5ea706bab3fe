"""The golden safety net: every table of every real trace and sample equals tests/golden/.

A failure lists what moved. If the change is on purpose, rewrite the goldens with
``python tests/golden.py --update`` and name the rule that changed in the commit message.
"""

from __future__ import annotations

import json

import pytest
from golden import GOLDEN, diff, golden_name, snapshot, sources
from shared_traces import param

SOURCES = sources()


@pytest.mark.parametrize("src", [param(s, golden_name(s)[:60]) for s in SOURCES])
def test_tables_unchanged(src):
    path = GOLDEN / golden_name(src)
    assert path.exists(), f"no golden for {src.name}: run python tests/golden.py --update"
    moved = diff(json.loads(path.read_text()), snapshot(src))
    assert not moved, f"{len(moved)} numbers moved:\n" + "\n".join(moved[:40])


@pytest.mark.shared
def test_every_golden_has_a_source():
    """A golden whose trace is gone is stale, not a safety net."""
    names = {golden_name(s) for s in SOURCES}
    if not any(s.parent.name != "sample_traces" for s in SOURCES):
        pytest.skip("../shared/traces absent: only the samples' goldens can be checked")
    stale = sorted(p.name for p in GOLDEN.glob("*.json") if p.name not in names)
    assert not stale, f"goldens with no source: {stale}"
