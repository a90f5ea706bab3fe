"""pytest configuration shared by the test suite."""

import os
import sys
from pathlib import Path

import pytest

# tests import helper modules (e.g. `from shared_traces import SHARED`) from this folder
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


def _hypothesis_profiles() -> None:
    """``ci`` (CI=true): few examples, derandomized, so the suite stays within its time budget;
    ``dev`` (default): more; ``thorough``: a long hunt. HYPOTHESIS_PROFILE picks one."""
    try:
        from hypothesis import HealthCheck, settings
    except ImportError:  # the test extra is not installed: the hypothesis tests fail to import
        return
    slow = [HealthCheck.too_slow, HealthCheck.data_too_large]
    settings.register_profile(
        "ci", max_examples=12, deadline=None, derandomize=True, database=None, suppress_health_check=slow
    )
    settings.register_profile("dev", max_examples=40, deadline=None, suppress_health_check=slow)
    settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=slow)
    ci = os.environ.get("CI", "").lower() in ("1", "true", "yes")
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if ci else "dev"))


_hypothesis_profiles()


def _source_tree_check() -> None:
    """The suite tests this source tree: tracekit (and tracekit.analyses / tracekit.capture,
    which live in analyses/ and capture/) must import from it, as ``pip install -e .`` makes
    them. An installed copy elsewhere would be tested instead, silently. Set
    TRACEKIT_TEST_INSTALLED=1 to test an installed tracekit on purpose."""
    if os.environ.get("TRACEKIT_TEST_INSTALLED"):
        return
    root = Path(__file__).resolve().parents[1]
    try:
        import tracekit.analyses

        import tracekit
    except ImportError as exc:
        pytest.exit(
            f"tracekit is not importable ({exc}); from {root} run: pip install -e '.[test]'", returncode=4
        )
    found = {
        "tracekit": Path(tracekit.__file__).resolve().parent,
        "tracekit.analyses": Path(tracekit.analyses.__file__).resolve().parent,
    }
    wrong = {m: p for m, p in found.items() if root not in p.parents}
    if wrong:
        where = ", ".join(f"{m} from {p}" for m, p in wrong.items())
        pytest.exit(
            f"the tests would run against another tracekit ({where}), not the source tree "
            f"{root}: run `pip install -e '.[test]'` there (or set TRACEKIT_TEST_INSTALLED=1)",
            returncode=4,
        )


_source_tree_check()


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


_EXTRAS = {  # marker -> (modules it needs, the extra that installs them)
    "capture": (("torch", "deepspeed", "transformers"), "capture"),
    "peers": (("hta", "torch_tb_profiler"), "peers"),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``capture`` or ``peers`` skips, naming what is missing, without its extra."""
    import importlib.util

    for marker, (modules, extra) in _EXTRAS.items():
        if item.get_closest_marker(marker) is None:
            continue
        missing = [m for m in modules if importlib.util.find_spec(m) is None]
        if missing:
            pytest.skip(
                f"needs the {extra} extra: {', '.join(missing)} not installed "
                f"(pip install 'tracekit[{extra}]')"
            )


@pytest.fixture(autouse=True, scope="session")
def _shared_traces_untouched():
    """No test writes into ../shared: its listing (names, sizes, mtimes) is the same at the end."""
    from shared_traces import SHARED

    def listing():
        if not SHARED.is_dir():
            return {}
        return {p: (p.lstat().st_size, p.lstat().st_mtime_ns) for p in SHARED.rglob("*")}

    before = listing()
    yield
    after = listing()
    assert after == before, f"tests wrote into {SHARED}: {sorted(set(after) ^ set(before))[:5]}"
