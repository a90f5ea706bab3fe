"""pytest configuration shared by the test suite."""

import os
import sys
from pathlib import Path

import pytest

# tests import helper modules (e.g. `from synthetic import make_trace`) from this folder
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from shared_traces import SHARED  # noqa: E402


def _hypothesis_profiles() -> None:
    """``ci`` (CI=true): few examples, derandomized, so the suite stays within its time budget;
    ``dev`` (default): more; ``thorough``: a long hunt. HYPOTHESIS_PROFILE picks one."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # the test extra is not installed: the hypothesis tests fail to import
        return
    slow = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile("ci", max_examples=12, deadline=None, derandomize=True,
                              database=None, suppress_health_check=slow)
    settings.register_profile("dev", max_examples=40, deadline=None, suppress_health_check=slow)
    settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=slow)
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if ci else "dev"))


_hypothesis_profiles()


@pytest.fixture(scope="session")
def shared_traces_dir() -> Path:
    """../shared/traces (the real traces beside the repository); skips the test when absent."""
    if not SHARED.is_dir():
        pytest.skip(f"shared traces not found at {SHARED} (a user's clone has no ../shared)")
    return SHARED


@pytest.fixture(autouse=True, scope="session")
def _cache_in_tmp(tmp_path_factory):
    """No test writes outside its tmp dirs: the parse cache (and anything else keyed to the
    user's cache directory) goes to a session tmp dir, unless a test points it elsewhere."""
    folder = tmp_path_factory.mktemp("tracekit-cache")
    saved = {k: os.environ.get(k) for k in ("TRACEKIT_CACHE_DIR", "XDG_CACHE_HOME")}
    os.environ["TRACEKIT_CACHE_DIR"] = str(folder)
    os.environ["XDG_CACHE_HOME"] = str(folder / "xdg")
    yield folder
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
