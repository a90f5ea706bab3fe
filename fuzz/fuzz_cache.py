"""The cache fuzz target: stored entries damaged in every way an input can say, loaded in-process.

At import, a small planted trace is analysed once into a private cache directory, which holds
its parse entry (``<hash>.parquet``) and its result entry (``<hash>.result.parquet``); their
pristine bytes and what they load as are kept. Each input then says:

* byte 0: which entry (bit 0: parse or result), whether the seal is checked (bit 1: off, to
  fuzz what lies behind it), and how to damage it (bits 2-3): flip the bytes the rest of the
  input names, cut the file where it says, splice the input's bytes in, or forge an entry with
  the right key whose columns or frames differ (a planted entry, sealed by nobody);
* the rest: pairs of (offset, value) bytes, or the cut, or the bytes spliced in.

What must hold: loading never crashes and raises nothing; with the seal checked, a damaged
entry is a miss (``None``) unless its bytes are the pristine ones, and whatever loads equals
the pristine entry (never another analysis shown); with the seal off, whatever loads is
decoded without an exception.
"""

from __future__ import annotations

import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

import tracekit
import tracekit.ranks.analyse
from tracekit.ranks import results
from tracekit.ranks.analyse import Options
from tracekit.ranks.gathered import Packed
from tracekit.read import cache
from tracekit.read.files import DEFAULT_MAX_BYTES
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_ADAM, K_MUL

_HOME = Path(tempfile.mkdtemp(prefix="tracekit-fuzz-cache-"))
os.environ["TRACEKIT_CACHE_DIR"] = str(_HOME / "cache")
tracekit.ranks.analyse.SMALL_FILE = -1  # store the parse entry as well as the result


def _trace() -> Path:
    b = TraceBuilder()
    for _ in range(3):
        with b.step():
            b.kernel(GEMM_A, 7, op="aten::mm")
            b.kernel(K_MUL, 2, op="aten::mul")
            with b.optimizer():
                b.kernel(K_ADAM, 3, op="aten::_fused_adam_")
    return b.write(_HOME / "trace.json")


TRACE = _trace()
OPTIONS = Options()
tracekit.load(TRACE, jobs=1)
PARSE = cache._entry(cache.file_key(TRACE, DEFAULT_MAX_BYTES))
RESULT = results.entry(results.result_key(TRACE, OPTIONS) or "")
PRISTINE = {False: PARSE.read_bytes(), True: RESULT.read_bytes()}


def _load(result: bool) -> Any:
    """What the entry loads as: the parse cache's columns, meta and warnings; or the result's
    tables and meta, and its intervals."""
    if not result:
        raw = cache.load(TRACE, DEFAULT_MAX_BYTES)
        return None if raw is None else (raw.events, raw.meta, raw.warnings)
    got = results.load(TRACE, OPTIONS)
    if got is None:
        return None
    att, tables = got
    frames = {k: v.load() if isinstance(v, Packed) else v for k, v in tables.items()}
    return att.load_intervals(), att.meta, frames


WANT = {False: _load(False), True: _load(True)}
assert WANT[False] is not None and WANT[True] is not None, "the pristine entries do not load"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, pd.DataFrame) or isinstance(b, pd.DataFrame):
        return isinstance(a, pd.DataFrame) and isinstance(b, pd.DataFrame) and a.equals(b)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def _damaged(original: bytes, how: int, rest: bytes, result: bool) -> bytes:
    data = bytearray(original)
    if how == 0:  # flip: (offset 16-bit, xor) pairs
        for i in range(0, len(rest) - 2, 3):
            at = struct.unpack_from("<H", rest, i)[0] * 7 % len(data)
            data[at] ^= rest[i + 2] or 1
        return bytes(data)
    if how == 1:  # cut
        keep = struct.unpack_from("<I", rest.ljust(4, b"\0"))[0] % len(data)
        return bytes(data[:keep])
    if how == 2:  # splice the input in
        at = (struct.unpack_from("<H", rest.ljust(2, b"\0"))[0] * 11) % len(data)
        return bytes(data[:at] + rest[2:] + data[at + len(rest[2:]) :])
    return _forged(original, rest, result)


def _forged(original: bytes, rest: bytes, result: bool) -> bytes:
    """An entry with the right key and other content: a column's values changed, rows
    repeated (as a planted entry that expands), or (result) other frames' bytes."""
    table = pq.read_table(pa.py_buffer(original))
    md = dict(table.schema.metadata)
    md.pop(b"tracekit-seal", None)
    n = max(1, table.num_rows)
    pick = rest[0] if rest else 0
    if pick % 3 == 0:
        col = table.column_names[(rest[1] if len(rest) > 1 else 0) % table.num_columns]
        values = table.column(col)
        if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
            changed = pa.compute.add(values.cast(pa.float64()), 1.0).cast(values.type, safe=False)
            table = table.set_column(table.column_names.index(col), col, changed)
    elif pick % 3 == 1:
        times = 1 + (rest[1] if len(rest) > 1 else 0) * 64
        table = pa.concat_tables([table] * min(times, (1 << 18) // n))
    elif result:
        md[b"tracekit-frames"] = bytes(rest[1:]) or b"\0"
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(md), sink)
    return sink.getvalue().to_pybytes()


def _unsealed(loc: Path, limit: int) -> pq.ParquetFile | None:
    with open(loc, "rb") as f:
        data = f.read(limit + 1)
    return pq.ParquetFile(pa.py_buffer(data)) if len(data) <= limit else None


def damaged_entry(data: bytes) -> None:
    """One input of the cache target (see the module's docstring)."""
    if not data:
        return
    result, unsealed, how = bool(data[0] & 1), bool(data[0] & 2), (data[0] >> 2) & 3
    original = PRISTINE[result]
    damaged = _damaged(original, how, data[1:], result)
    loc = RESULT if result else PARSE
    loc.write_bytes(damaged)
    real = cache.read_sealed
    if unsealed:
        cache.read_sealed = _unsealed  # type: ignore[assignment]
    try:
        got = _load(result)
    finally:
        cache.read_sealed = real
        loc.write_bytes(original)
    if unsealed:
        return
    if damaged != original and got is not None:
        raise AssertionError("a damaged entry was not a miss: it was loaded")
    if got is not None and not _same(got, WANT[result]):
        raise AssertionError("an entry loaded as something else than what was stored")
