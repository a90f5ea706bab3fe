"""Issue 38.10: a missing optional extra is explained with an install that works. tracekit is
not on PyPI, so ``pip install 'tracekit[capture]'`` would fetch nothing (or someone else's
package): the hint names a clone or a built wheel."""

from __future__ import annotations

import pytest

from tracekit.errors import install_hint


@pytest.mark.parametrize("extra", ["capture", "dask"])
def test_hint_names_a_clone_or_a_wheel_never_pypi(extra):
    hint = install_hint(extra)
    assert f"pip install -e '.[{extra}]'" in hint and f".whl[{extra}]" in hint
    assert f"'tracekit[{extra}]'" not in hint and "not on PyPI" in hint


def test_missing_capture_packages_say_how_to_install(monkeypatch):
    import importlib.util

    from tracekit.capture import checks

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(checks.CaptureError) as e:
        checks.require(("torch",))
    assert "needs torch" in str(e.value) and install_hint("capture") in str(e.value)


def test_scheduler_without_dask_says_how_to_install(monkeypatch):
    import sys

    from tracekit.ranks import pool

    monkeypatch.setitem(sys.modules, "distributed", None)
    monkeypatch.setitem(sys.modules, "distributed.comm.addressing", None)
    with pytest.raises(ValueError, match="needs Dask") as e:
        pool.check_scheduler("tcp://host:8786")
    assert install_hint("dask") in str(e.value)
