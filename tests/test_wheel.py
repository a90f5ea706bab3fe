"""A regular install works: the wheel built from a clean checkout, installed in a fresh venv.

Every other test runs against the editable install (``pip install -e``), which maps the source
tree into place and so hides a package the wheel leaves out (issue 26: a wheel without
``tracekit.pipeline`` could analyse nothing). This test builds the wheel from the tracked files
only (what a clone holds), installs it with ``--no-deps`` into a new venv outside the source
tree (the build under a 2 GiB address-space limit), and runs the installed ``tracekit`` there: ``analyze`` on a sample trace, ``capture
--help`` and ``import tracekit.capture``.

The venv has no packages of its own but the wheel: its dependencies come from the environment
running the tests, added as plain path entries (a ``.pth`` file listing its site directories).
Plain entries, not site directories, so their own ``.pth`` files (the editable install's
finder among them) are not run: ``tracekit`` can come only from the wheel, and the test checks
that every module it imports, the C extensions included, is the installed copy.

Marked ``wheel`` (``-m 'not wheel'`` leaves it out): it compiles the C extensions, about a
minute on a loaded two-core machine.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_traces" / "tiny-infer"
#: Modules that must come from the installed wheel, C extensions included.
MODULES = [
    "tracekit",
    "tracekit.analyses",
    "tracekit.read",
    "tracekit.ranks",
    "tracekit.pipeline",
    "tracekit.perf",
    "tracekit.render",
    "tracekit.cli",
    "tracekit.testing",
    "tracekit.capture",
    "tracekit.read._kineto",
    "tracekit.pipeline._nesting",
]


def _tracked(dst: Path) -> Path:
    """The files a clone holds (``git ls-files``), copied to ``dst``: no build products, no
    compiled extension, no stray file of this working tree reaches the wheel."""
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    listed = subprocess.run(
        [git, "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True
    ).stdout.split(b"\0")
    for rel in filter(None, listed):
        src = ROOT / os.fsdecode(rel)
        if src.is_file():  # a file deleted in the working tree but still tracked is skipped
            (dst / os.fsdecode(rel)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / os.fsdecode(rel))
    return dst


def _env(tmp: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRACEKIT_", "VIRTUAL_ENV"))}
    env.update(TRACEKIT_CACHE_DIR=str(tmp / "cache"), PYTHONNOUSERSITE="1")
    return env


def _run(args: list, tmp: Path, **kw) -> subprocess.CompletedProcess:
    p = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, cwd=tmp, env=_env(tmp), timeout=600, **kw
    )
    assert p.returncode == 0, (args, p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    return p


def _two_gb() -> None:
    """Run the build under a 2 GiB address-space limit: Python's own CFLAGS (``-g -O3``) made
    the C reader's compiler take 6.75 GB, and the optional extension then failed quietly."""
    if os.name == "posix":
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The bin directory of a fresh venv holding the wheel built from the tracked files."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = _tracked(tmp / "src")
    dist = tmp / "dist"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            dist,
            src,
        ],
        tmp,
        preexec_fn=_two_gb,  # issue 38.2: the build must fit a laptop or a small CI runner
    )
    (wheel,) = dist.glob("tracekit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for member in (
        "tracekit/pipeline/__init__.py",
        "tracekit/analyses/__init__.py",
        "tracekit/capture/__init__.py",
    ):
        assert member in names, member
    for ext in ("read/_kineto", "pipeline/_nesting"):
        assert any(n.startswith(f"tracekit/{ext}.") and n.endswith((".so", ".pyd")) for n in names), ext
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    purelib = Path(
        _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout.strip()
    )
    # The test environment's site directories as plain entries: the dependencies, never
    # their .pth files (so no editable finder). The source tree is not among them.
    dirs = [*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    dirs = [d for d in dict.fromkeys(dirs) if Path(d).is_dir() and ROOT not in Path(d).resolve().parents]
    (purelib / "zz_test_dependencies.pth").write_text("\n".join(dirs) + "\n")
    _run([sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "--no-index", wheel], tmp)
    return bindir


def test_every_module_is_the_installed_copy(installed, tmp_path):
    code = (
        "import importlib, json, sys\n"
        f"mods = {MODULES!r}\n"
        "print(json.dumps({m: importlib.import_module(m).__file__ for m in mods}))\n"
    )
    got = json.loads(_run([installed / "python", "-c", code], tmp_path).stdout)
    venv = installed.parent.resolve()
    for module, path in got.items():
        where = Path(path).resolve()
        assert venv in where.parents and ROOT not in where.parents, (module, path)
    from_native = _run(
        [installed / "python", "-c", "from tracekit.read import native; print(native.enabled())"], tmp_path
    )
    assert from_native.stdout.strip() == "True"


def test_installed_tracekit_analyses_a_trace(installed, tmp_path):
    trace = tmp_path / "tiny-infer"
    shutil.copytree(SAMPLE, trace)
    p = _run([installed / "tracekit", "analyze", trace, "--format", "json"], tmp_path)
    tables = json.loads(p.stdout)["tables"]
    assert tables["phases"] and tables["modules"] and tables["kernels"], sorted(tables)


def test_installed_capture_help_and_import(installed, tmp_path):
    p = _run([installed / "tracekit", "capture", "--help"], tmp_path)
    assert "train" in p.stdout and "infer" in p.stdout, p.stdout
    code = "import tracekit.capture, sys; print(tracekit.capture.__file__)"
    where = Path(_run([installed / "python", "-c", code], tmp_path).stdout.strip()).resolve()
    assert installed.parent.resolve() in where.parents
