"""The optional C extensions: tracekit/read/_kineto.c (the reader's fast path, tracekit/read/native.py) and
tracekit/pipeline/_nesting.c (the link step's enclosing-range sweep, tracekit/pipeline/nesting.py).

The package list is found here (:func:`packages`), not written by hand; everything else is
declared in pyproject.toml. ``optional=True``: where it cannot be compiled
(no compiler, no Python headers), the install still succeeds: the reader then decodes with msgspec
and the sweep runs its numpy form.
"""

import os

from setuptools import Extension, find_packages, setup

#: Folders of the repository installed under another name (pyproject.toml's package-dir).
_MAPPED = {"capture": "tracekit.capture", "analyses": "tracekit.analyses"}


def packages() -> list[str]:
    """Every package of the distribution: ``tracekit`` and its subpackages, and the mapped
    folders (``capture/`` as ``tracekit.capture``...) with theirs."""
    found = find_packages(include=["tracekit", "tracekit.*"])
    for folder, name in _MAPPED.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder)]
    return sorted(found)


#: gcc/clang: no fused multiply-add or fast math, so float times round exactly as numpy's do.
_FLAGS = [] if os.name == "nt" else ["-O2", "-g0", "-std=c11", "-fno-fast-math", "-ffp-contract=off"]

setup(
    packages=packages(),
    ext_modules=[
        Extension(
            "tracekit.read._kineto",
            ["tracekit/read/_kineto.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "tracekit.pipeline._nesting",
            ["tracekit/pipeline/_nesting.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
    ],
)
