"""What every command that reads traces is told: which rank, which rules, what size limit,
which device peaks (the options of :func:`reading_options`), handed to the command as one
:class:`Reading`."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import click

from ..read.files import DEFAULT_MAX_BYTES
from ..strings import use_python_strings
from .io import load_with_progress, warn


@dataclass(frozen=True)
class Reading:
    """What every command that reads traces was told (:func:`reading_options`)."""

    rank: int | None
    taxonomy: str | None
    kernel_rules: str | None
    max_bytes: int
    strict: bool
    devices: str | None = None  # the device peaks (docs/metrics.md)
    peak_tflops: str | None = None
    peak_bandwidth: float | None = None

    def options(self, cache: bool = True):
        """These options as :class:`tracekit.analysis.Options` (for commands that read alone)."""
        from ..ranks.analyse import Options

        keep = ("taxonomy", "kernel_rules", "max_bytes", "devices", "peak_tflops", "peak_bandwidth")
        return Options(cache=trusted_cache(cache), **{k: getattr(self, k) for k in keep})

    def load(self, path: Path, cache: bool = True, **kw):
        """``tracekit.load`` of ``path`` with these options (and ``kw``), showing progress."""
        from .. import load

        return load_with_progress(
            load,
            path,
            cache=trusted_cache(cache),
            rank=self.rank,
            taxonomy=self.taxonomy,
            kernel_rules=self.kernel_rules,
            max_bytes=self.max_bytes,
            strict=self.strict,
            **{k: getattr(self, k) for k in ("devices", "peak_tflops", "peak_bandwidth")},
            **kw,
        )


def trusted_cache(cache: bool) -> bool:
    """``cache``, unless the cache directory or its seal key is not the user's own and private
    (:func:`tracekit.read.sealkey.untrusted`): then the run goes on without the cache, and one
    warning line says why (once per process)."""
    if not cache:
        return False
    from ..read import sealkey
    from ..read.cache import cache_dir

    why = sealkey.untrusted(cache_dir())
    if why is None:
        return True
    if not _SAID:
        _SAID.append(why)
        warn(f"{why}; refused (as ssh refuses such keys), so this run does not use the cache")
    return False


_SAID: list[str] = []

_READING_OPTIONS = (
    click.option("--rank", type=int, help="Only this rank of a directory of per-rank traces."),
    click.option(
        "--taxonomy",
        type=click.Path(exists=True, dir_okay=False),
        help="TOML file of module rules tried before the built-in ones.",
    ),
    click.option(
        "--kernel-rules",
        type=click.Path(exists=True, dir_okay=False),
        help="TOML file of kernel rules tried before the built-in ones.",
    ),
    click.option(
        "--max-bytes",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_BYTES,
        show_default=True,
        help="Refuse traces that decompress to more than this.",
    ),
    click.option(
        "--strict",
        is_flag=True,
        help="In a directory, any file that cannot be "
        "analysed is an error (exit 2) instead of being skipped (exit 1).",
    ),
    click.option("--devices", type=click.Path(exists=True, dir_okay=False), help="TOML of device peaks."),
    click.option(
        "--peak-tflops",
        metavar="T",
        help="Dense peak TFLOP/s: N (every dtype but tf32), or per dtype bf16=N,fp8=M,tf32=K.",
    ),
    click.option("--peak-bandwidth", type=click.FloatRange(min=0, min_open=True), help="Peak TB/s."),
)


def reading_options(command):
    """The options of every command that reads traces (which rank, which rules, what limit),
    handed to ``command`` as one :class:`Reading` (its ``reading`` argument)."""

    @functools.wraps(command)
    def with_reading(**kw):
        use_python_strings()  # the CLI's process is tracekit's own (tracekit/strings.py)
        return command(reading=Reading(**{k: kw.pop(k) for k in Reading.__dataclass_fields__}), **kw)

    for option in reversed(_READING_OPTIONS):
        with_reading = option(with_reading)
    return with_reading
