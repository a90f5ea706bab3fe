"""tracekit's one pandas setting: ``str`` columns held as Python strings, not in Arrow.

pandas 3 stores a ``str`` column in Arrow by default (``mode.string_storage = "auto"``). Every
index pandas builds on such a column (a group-by's keys, ``reindex``, ``isin``, ``.loc``)
converts it back to Python objects to hash it, and each small Arrow string array costs more to
make than the column holds. tracekit's tables are many small frames with text keys (phase,
module, kernel name), so that conversion was its largest single cost on small ranks: 45 ms of
about 350 ms per rank of the 100-rank benchmark, and with the Arrow array's own overhead,
tables ran 1.7x slower than with Python storage (measured by ``benchmarks/budget.py``).

With ``mode.string_storage = "python"`` the dtype is still ``str`` (``StringDtype(na_value=nan)``,
equal to ``"str"``); values, ordering, missing values and every output are the same. Where
pandas has no such option (before 2.1) nothing changes.

The CLI and its worker processes are tracekit's own, so they set it for the whole process
(:func:`use_python_strings`); the Python API sets it only while its own calls run
(:func:`python_strings`), leaving the caller's pandas as it was.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

OPTION, STORAGE = "mode.string_storage", "python"


def storage() -> str:
    """The storage pandas gives ``str`` columns now ("" where it has no such option): the key
    of every cache of a dtype built from strings, which differs between the storages."""
    import pandas as pd

    try:
        return str(pd.get_option(OPTION))
    except (KeyError, ValueError):
        return ""


def use_python_strings() -> None:
    """Set the option for this whole process (the CLI's, a worker's)."""
    import pandas as pd

    with contextlib.suppress(KeyError, ValueError):  # a pandas without the option
        pd.set_option(OPTION, STORAGE)


@contextlib.contextmanager
def python_strings() -> Iterator[None]:
    """The option while the block runs; the caller's value after it (re-entrant)."""
    import pandas as pd

    try:
        before = pd.get_option(OPTION)
    except (KeyError, ValueError):  # a pandas without the option
        yield
        return
    if before == STORAGE:
        yield
        return
    pd.set_option(OPTION, STORAGE)
    try:
        yield
    finally:
        pd.set_option(OPTION, before)


def with_python_strings(func: F) -> F:
    """``func`` run inside :func:`python_strings` (an API entry point)."""

    @functools.wraps(func)
    def run(*args: Any, **kw: Any) -> Any:
        with python_strings():
            return func(*args, **kw)

    return run  # type: ignore[return-value]
