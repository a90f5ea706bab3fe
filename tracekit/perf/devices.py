"""Device peaks as data: ``tracekit/data/devices.toml``, a user's TOML, explicit values.

:func:`resolve` gives a rank's :class:`Peaks` from its ``deviceProperties`` names: the built-in
row (or a ``--devices FILE`` row, tried first) whose ``match`` list holds the name exactly
(case and spacing aside), with ``--peak-tflops`` / ``--peak-bandwidth`` over it. A name no row
matches gives no peak and a notice: never a guess by resemblance. A trace that lists devices of
different products is ambiguous (which one ran this rank is not recorded): no peak either.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

from ..errors import TraceError
from .shapes import SIZES

#: The dtypes a peak may be given for.
PEAK_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
#: Where a device row came from: tracekit's own table, or a ``--devices`` file.
BUILT_IN = "built-in table"
#: The source of peaks given by ``--peak-tflops`` / ``--peak-bandwidth``.
GIVEN = "given on the command line"
#: The dtypes ``--peak-tflops N`` (one number, ``*``) does not set: TF32 tensor-core kernels run
#: an fp32 GEMM at a peak 8x fp32's, so one number for both would put them far above 100 %.
#: They keep the matched row's peak, or ``tf32=N``; else they have none (an empty %).
OWN_PEAK = ("tf32",)


def peak_of(tflops: dict, dtype: str) -> float | None:
    """The dense peak TFLOP/s of ``dtype`` in a ``peak_tflops`` dict (``*``: any dtype but those
    of :data:`OWN_PEAK`); None: not known."""
    v = tflops.get(dtype)
    if v is None and dtype not in OWN_PEAK:
        v = tflops.get("*")
    return v or None


@dataclass(frozen=True)
class Device:
    """One row of the devices table: dense peak TFLOPS per dtype, bandwidth in TB/s."""

    name: str
    match: tuple[str, ...]
    tflops: dict[str, float]
    tbps: float | None
    source: str
    url: str = ""
    note: str = ""
    origin: str = BUILT_IN


@dataclass(frozen=True)
class Peaks:
    """What one rank is measured against. ``tflops``: dense peak per dtype (``*``: any
    dtype, from ``--peak-tflops N``); ``tbps``: memory bandwidth; ``device``: the trace's
    device name; ``row``: the table row it matched ("" none); ``notice``: why a peak is
    missing or where it came from; ``origin``: where the peaks were taken from (the built-in
    table, a ``--devices`` file, the command line)."""

    device: str = ""
    row: str = ""
    tflops: dict[str, float] = field(default_factory=dict)
    tbps: float | None = None
    source: str = ""
    notice: str = ""
    origin: str = ""

    def flops_peak(self, dtype: str) -> float | None:
        """Peak FLOP/s (not TFLOPS) for ``dtype`` (None: not known)."""
        v = peak_of(self.tflops, dtype)
        return v * 1e12 if v else None

    def bytes_peak(self) -> float | None:
        """Peak bytes/s (None: not known)."""
        return self.tbps * 1e12 if self.tbps else None

    def as_meta(self) -> dict:
        return {
            "device": self.device,
            "matched": self.row,
            "peak_tflops": dict(self.tflops),
            "peak_tbps": self.tbps,
            "source": self.source,
            "origin": self.origin,
            "notice": self.notice,
        }


def _norm(name: str) -> str:
    return " ".join(name.split()).casefold()


def _positive(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _row(d: dict, where: str) -> Device:
    """One ``[[device]]`` table, checked (a user's file: a one-line error naming it)."""
    if not isinstance(d.get("name"), str) or not isinstance(d.get("match"), list):
        raise TraceError(where, "every [[device]] needs a name and a match list")
    tflops = d.get("tflops", {})
    bad = (
        [k for k, v in tflops.items() if k not in PEAK_DTYPES or not _positive(v)]
        if isinstance(tflops, dict)
        else [1]
    )
    if bad or not all(isinstance(m, str) for m in d["match"]):
        raise TraceError(
            where, f"device {d['name']!r}: tflops keys are {', '.join(PEAK_DTYPES)} with positive numbers"
        )
    tbps = d.get("tbps")
    if tbps is not None and not _positive(tbps):
        raise TraceError(where, f"device {d['name']!r}: tbps must be a positive number")
    return Device(
        name=d["name"],
        match=tuple(_norm(m) for m in d["match"]),
        tflops={k: float(v) for k, v in tflops.items()},
        tbps=float(tbps) if tbps is not None else None,
        source=str(d.get("source", where)),
        url=str(d.get("url", "")),
        note=str(d.get("note", "")),
        origin=BUILT_IN if where == "devices.toml" else f"--devices {where}",
    )


@lru_cache(maxsize=8)
def table(user_file: str | None = None) -> tuple[Device, ...]:
    """The devices table: a user's rows (``user_file``) first, then the built-in ones."""
    rows: list[Device] = []
    if user_file:
        try:
            user = tomllib.loads(Path(user_file).read_text())
        except (OSError, UnicodeDecodeError) as e:
            raise TraceError(user_file, f"cannot read devices file ({e.__class__.__name__})") from None
        except tomllib.TOMLDecodeError as e:
            raise TraceError(user_file, f"not valid TOML ({e})") from None
        rows += [_row(d, user_file) for d in _devices(user, user_file)]
    text = resources.files("tracekit.data").joinpath("devices.toml").read_text()
    return tuple(rows + [_row(d, "devices.toml") for d in _devices(tomllib.loads(text), "devices.toml")])


def _devices(doc: dict, where: str) -> list[dict]:
    got = doc.get("device", [])
    if not isinstance(got, list) or not all(isinstance(d, dict) for d in got):
        raise TraceError(where, "expected [[device]] tables")
    return got


def find(names: list[str], rows: tuple[Device, ...]) -> tuple[Device | None, str]:
    """The row of a trace's device names, and a notice when there is none."""
    distinct = sorted({n for n in names if n})
    if not distinct:
        return None, "no device named in the trace (deviceProperties)"
    if len(distinct) > 1:
        return (
            None,
            f"the trace lists different devices ({', '.join(distinct)}): which one ran it is not recorded",
        )
    key = _norm(distinct[0])
    row = next((r for r in rows if key in r.match), None)
    if row is None:
        return (
            None,
            f"unknown device {distinct[0]!r}, no peak (see --peak-tflops, --devices)",
        )
    return row, ""


def parse_tflops(text: str | float | None) -> dict[str, float]:
    """``--peak-tflops``: ``989`` (every dtype but tf32: :data:`OWN_PEAK`) or
    ``bf16=989,fp8=1979,tf32=495``."""
    if text is None or text == "":
        return {}
    if isinstance(text, (int, float)):
        pairs = [("*", str(text))]
    else:
        pairs = [
            (p.split("=", 1)[0], p.split("=", 1)[1]) if "=" in p else ("*", p) for p in str(text).split(",")
        ]
    out = {}
    for k, v in pairs:
        k = k.strip().lower()
        try:
            val = float(v)
        except ValueError:
            raise TraceError(None, f"--peak-tflops: {v.strip()!r} is not a number") from None
        if (k != "*" and k not in PEAK_DTYPES) or not _positive(val):
            raise TraceError(
                None, f"--peak-tflops: give a positive number, or dtype=number for {', '.join(PEAK_DTYPES)}"
            )
        out[k] = val
    return out


def resolve(
    names: list[str],
    devices_file: str | None = None,
    peak_tflops: str | float | None = None,
    peak_bandwidth: float | None = None,
) -> Peaks:
    """The peaks one rank is measured against (see the module docstring)."""
    row, notice = find(names, table(devices_file))
    tflops = dict(row.tflops) if row else {}
    given = parse_tflops(peak_tflops)
    if "*" in given:  # every dtype but tf32, which keeps the row's (OWN_PEAK)
        tflops = {k: v for k, v in tflops.items() if k in OWN_PEAK}
    tflops.update(given)
    if peak_bandwidth is not None and not _positive(peak_bandwidth):
        raise TraceError(None, "--peak-bandwidth must be a positive number of TB/s")
    tbps = peak_bandwidth if peak_bandwidth is not None else (row.tbps if row else None)
    source = row.source if row else ""
    origin = row.origin if row else ""
    if given or peak_bandwidth is not None:
        source = GIVEN + (f" (over {row.name})" if row else "")
        flags = [f for f, v in (("--peak-tflops", given), ("--peak-bandwidth", peak_bandwidth)) if v]
        origin = " ".join(flags) + (f" over the {origin}" if row else "")
        notice = ""
    return Peaks(
        device=", ".join(sorted({n for n in names if n})),
        row=row.name if row else "",
        tflops=tflops,
        tbps=tbps,
        source=source,
        notice=notice,
        origin=origin,
    )


__all__ = [
    "BUILT_IN",
    "GIVEN",
    "OWN_PEAK",
    "PEAK_DTYPES",
    "SIZES",
    "Device",
    "Peaks",
    "find",
    "parse_tflops",
    "peak_of",
    "resolve",
    "table",
]
