"""The parse cache's table (:mod:`tracekit.read.cache`): the reader's columns and their Arrow
types, a frame made whole before it is stored, and the size an entry's columns take decoded
(what a load is bounded by before it reads them)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .columns import _COLUMNS, CATEGORICAL_COLUMNS

_CATEGORICAL = set(CATEGORICAL_COLUMNS)
_TYPES = {
    "kind": pa.int8(),
    "bytes": pa.float64(),
    "total_allocated": pa.float64(),
    "total_reserved": pa.float64(),
}


def valid_schema(schema: pa.Schema) -> bool:
    if schema.names != list(_COLUMNS):
        return False
    for f in schema:
        if f.name in _CATEGORICAL:
            ok = pa.types.is_dictionary(f.type) and pa.types.is_string(f.type.value_type)
        else:
            ok = f.type == _TYPES.get(f.name, pa.int64())
        if not ok:
            return False
    return True


def whole(table: pa.Table, other: pa.Schema | None) -> pa.Table:
    """``table`` with every reader column, in order: the events' frame has no allocator
    columns and the memory events' frame no launch or shape columns (:func:`split_memory`),
    so each gets the other's as absent values (-1, NaN or "", typed as in ``other``, the
    other frame's schema), which a load drops again."""
    n = table.num_rows
    for i, name in enumerate(_COLUMNS):
        if name in table.column_names:
            continue
        typ = other.field(name).type if other is not None and name in other.names else None
        if typ is not None and pa.types.is_dictionary(typ):
            codes = pa.array(np.zeros(n, np.int64)).cast(typ.index_type)
            col = pa.DictionaryArray.from_arrays(codes, pa.array([""], typ.value_type))
        elif _TYPES.get(name, pa.int64()) == pa.float64():
            col = pa.array(np.full(n, np.nan))
        else:
            col = pa.array(np.full(n, -1, dtype=np.int64)).cast(_TYPES.get(name, pa.int64()))
        table = table.add_column(i, name, col)
    return table


def _width(t: pa.DataType) -> int:
    """Bytes per value of a column of type ``t`` (of a string: its offset)."""
    if pa.types.is_dictionary(t):
        return _width(t.index_type)
    if pa.types.is_boolean(t) or pa.types.is_null(t):
        return 1
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return 4
    try:
        return max(1, t.bit_width // 8)
    except ValueError:
        return 8


def decoded_bound(pf: pq.ParquetFile) -> int:
    """The size the entry's columns take decoded: rows times the columns' widths, plus their
    strings, bounded by each row group's uncompressed data (``total_byte_size``, which counts
    the byte arrays' own size in the file and the fixed columns' again). Parquet's encoded
    sizes are no bound for fixed columns: a column of one repeated value encodes to a few
    bytes whatever its rows.

    Only row-group metadata is read. A column chunk's metadata (``RowGroupMetaData.column``)
    is parsed when asked for, and on a damaged entry pyarrow's C++ validation of its size
    statistics throws through the Cython wrapper, which ends the process (found by the cache
    fuzz target; ``fuzz/regressions/cache/abort-size-statistics``)."""
    md = pf.metadata
    groups = [md.row_group(i) for i in range(md.num_row_groups)]
    rows = sum(rg.num_rows for rg in groups)
    fixed = rows * sum(_width(f.type) for f in pf.schema_arrow)
    return fixed + sum(max(0, rg.total_byte_size) for rg in groups)
