"""The fuzz targets: each takes one input (bytes) and raises when tracekit breaks a promise.

Run by libFuzzer through ``fuzz/main.c`` (``fuzz/run.py`` builds and drives it, under ASan and
UBSan), and replayed on every saved regression by ``tests/test_fuzz_harness.py``. Each target
is deterministic in its input, so a saved input reproduces its failure.

* :func:`scanner`: the input is a run of events, scanned by the C scanner
  (``tracekit/read/_kineto.c``) as the streaming reader hands it one: wherever it takes the run,
  msgspec decodes it too, into the same columns (no frame built: fast).
* :func:`reader`: the input is a trace file, plain or gzip, read by the whole reader
  (``tracekit.read.read_trace``: streamed in slices, or whole), natively and with
  ``TRACEKIT_NATIVE=0``: the same result, or the same :class:`~tracekit.errors.TraceError`.
  Any other exception is a failure ("could not analyse (SomeException)").
* :func:`shapes`, :func:`memory`, :func:`merged`, :func:`render`: the surfaces of issue 39
  (:mod:`fuzz_surfaces` says what each checks).
* :func:`cache`: the input says how to damage a stored parse or result entry (flip, truncate,
  splice, forge), which is then loaded in-process: a damaged entry is a miss (None), never a
  crash, never shown. With the input's mode bit, the seal check is bypassed, so that what
  lies behind it (Parquet footers, the frames' Arrow IPC stream) is fuzzed too: then no crash
  and no exception are allowed, and a result that differs is possible (that is the seal's job).

``TRACEKIT_FUZZ_KINETO``: the path of an instrumented build of ``_kineto`` to use instead of
the installed one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import tempfile
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

import tracekit.read.files as F
import tracekit.read.native as N
import tracekit.read.reader as R
from tracekit.errors import TraceError
from tracekit.read.columns import _COLUMNS, _FrameBuilder
from tracekit.read.streaming import _EVENTS_DECODER, _TEXT_EVENTS_DECODER

_SHM = Path("/dev/shm")
TMP = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-", dir=_SHM if _SHM.is_dir() else None))


def _use_instrumented() -> None:
    path = os.environ.get("TRACEKIT_FUZZ_KINETO")
    if not path:
        return
    loader = importlib.machinery.ExtensionFileLoader("tracekit.read._kineto", path)
    spec = importlib.util.spec_from_file_location("tracekit.read._kineto", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    N._kineto = module


_use_instrumented()


class Divergence(AssertionError):
    """The native and msgspec readers differ on an input."""


def _native(on: bool) -> None:
    os.environ["TRACEKIT_NATIVE"] = "1" if on else "0"


def _same(a: Any, b: Any) -> None:
    """Two outcomes (the events' and the memory events' frames, meta and warnings; or an error
    line) are the same, and the memory events kept are within the bound."""
    if isinstance(a, str) or isinstance(b, str):
        if a != b:
            raise Divergence(f"native: {str(a)[:300]!r}\nmsgspec: {str(b)[:300]!r}")
        return
    for x, y, what in ((a[0], b[0], "columns"), (a[1], b[1], "memory events")):
        if x is None or y is None:
            if x is not y:
                raise Divergence(f"{what}: one reader has none")
            continue
        try:
            pd.testing.assert_frame_equal(x, y)
        except AssertionError as e:
            raise Divergence(f"{what} differ: {e}") from None
    if a[2:] != b[2:]:
        raise Divergence(f"meta or warnings differ:\n{a[2:]!r}\n{b[2:]!r}")
    if a[1] is not None:
        memory_bound_holds(a[1])


def memory_bound_holds(mem: Any) -> None:
    """No memory event kept has a number at or past the bound of :mod:`tracekit.read.memory_bound`."""
    from tracekit.read.memory_bound import MAX_MEMORY_BYTES

    for c in ("bytes", "total_allocated", "total_reserved"):
        if c in mem and (np.abs(mem[c].to_numpy(np.float64)) >= MAX_MEMORY_BYTES).any():
            raise AssertionError(f"a memory event kept with {c} past the bound")


def _one_line(e: TraceError) -> str:
    text = str(e)
    if "\n" in text or "could not analyse" in text:
        raise AssertionError(f"not a clean one-line error: {text!r}")
    return text


def scanner(data: bytes) -> None:
    """The C scanner on ``data`` as a run of events (as the streaming reader hands it one):
    where it takes the run, msgspec must decode it too, into the same columns (before any frame
    is built); where it declines, msgspec reads it, as the reader would (nothing to compare).
    Every other input scans to the array's end (``end=None``) instead: the ``]`` it stops at
    must close the run msgspec decodes."""
    to_end = zlib.crc32(data) & 1
    text = bytearray(b"[" + data + b"]")
    _native(True)
    got = N.scan(text, 1, None if to_end else len(text) - 1, False)
    if got is None:
        return
    if to_end:
        if text[got.end] != 0x5D:
            raise Divergence(f"the scan to the end stopped at {got.end}, not at a ']'")
        text = text[: got.end + 1]
    decoder = _TEXT_EVENTS_DECODER if got.text else _EVENTS_DECODER
    try:
        events = decoder.decode(bytes(text))
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise Divergence(f"the scanner took a run msgspec refuses: {e}") from None
    mine, theirs = _FrameBuilder(), _FrameBuilder()
    got.add_to(mine)
    if not theirs.add(events):
        raise Divergence("msgspec's times need their text where the scanner read numbers")
    _same_parts(mine, theirs)


def _same_parts(a: _FrameBuilder, b: _FrameBuilder) -> None:
    """Two builders hold the same events, names and columns (compared column by column,
    without building their frames)."""
    if (a.n_events, a.unknown, a.thread_names, a.process_names) != (
        b.n_events,
        b.unknown,
        b.thread_names,
        b.process_names,
    ):
        raise Divergence("the events' counts or names differ")
    for name in _COLUMNS + ("ts_ok", "dur_ok"):
        x, y = a._column(name), b._column(name)
        if isinstance(x, pd.Categorical) or isinstance(y, pd.Categorical):
            same = list(x) == list(y)
        else:
            same = np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
        if not same:
            raise Divergence(f"column {name} differs")


def _read(path: Path, native: bool, chunk: int | None) -> Any:
    _native(native)
    saved = R.CHUNK_BYTES, F.PIECE_BYTES
    if chunk is not None:
        R.CHUNK_BYTES, F.PIECE_BYTES = chunk, max(64, chunk // 4)
    try:
        raw = R.read_trace(path)
        return raw.events, raw.memory, raw.meta, raw.warnings
    except TraceError as e:
        return _one_line(e).replace(os.fspath(path), "FILE")
    finally:
        R.CHUNK_BYTES, F.PIECE_BYTES = saved


def reader(data: bytes) -> None:
    """The whole reader on ``data`` as a file (plain or gzip, streamed in small slices or read
    whole, as the input's checksum says): native == msgspec, and only clean errors. An input
    that is itself gzip (``1f 8b``) is the file as it stands, damaged streams included, and
    ISA-L and zlib must inflate it alike (:func:`_inflated_alike`)."""
    h = zlib.crc32(data)
    raw_gz = data[:2] == b"\x1f\x8b"
    gz = raw_gz or h & 1
    chunk = (None, 1 << 10, 1 << 13)[(h >> 1) % 3]
    path = TMP / ("input.json.gz" if gz else "input.json")
    path.write_bytes(zlib.compress(data, 1, wbits=31) if gz and not raw_gz else data)
    try:
        if raw_gz:
            _inflated_alike(path)
        _same(_read(path, True, chunk), _read(path, False, chunk))
    finally:
        path.unlink()


def _inflated_alike(path: Path) -> None:
    """ISA-L (tracekit's default, :mod:`tracekit.read.inflate`) and zlib read the same text
    from a gzip file, or both refuse it (a damaged stream may be refused for other reasons:
    each library finds the damage where it finds it)."""
    from tracekit.read import inflate

    if inflate.BACKEND != "isal":
        return
    default, got = inflate._z, []
    try:
        for z in (zlib, default):
            inflate._z = z
            try:
                got.append(bytes(F.read_bytes(path, 1 << 26)))
            except TraceError:
                got.append(None)
    finally:
        inflate._z = default
    if got[0] != got[1]:
        raise Divergence("ISA-L and zlib inflate this gzip file differently")


def cache(data: bytes) -> None:
    """A stored entry damaged as ``data`` says, loaded in-process (see :mod:`fuzz_cache`)."""
    from fuzz_cache import damaged_entry

    damaged_entry(data)


def shapes(data: bytes) -> None:
    """The perf model's shapes reader (:mod:`fuzz_surfaces`)."""
    from fuzz_surfaces import shapes as target

    target(data)


def memory(data: bytes) -> None:
    """Memory events analysed and written in every format (:mod:`fuzz_surfaces`)."""
    from fuzz_surfaces import memory as target

    target(data)


def merged(data: bytes) -> None:
    """A file read and split into the ranks merged into it (:mod:`fuzz_surfaces`)."""
    from fuzz_surfaces import merged as target

    target(data)


def render(data: bytes) -> None:
    """Hostile names and numbers through every renderer (:mod:`fuzz_surfaces`)."""
    from fuzz_surfaces import render as target

    target(data)


def setup(target: str) -> None:
    """What ``target`` needs before its first input (so that no input pays for it)."""
    if target == "cache":
        import fuzz_cache  # noqa: F401 (analyses the planted trace into its cache)
    if target in ("shapes", "memory", "merged", "render"):  # their imports, paid once
        from fuzz_surfaces import warm_up

        warm_up(target)
