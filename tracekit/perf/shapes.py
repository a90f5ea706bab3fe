"""The four shape fields of a CPU op, from the JSON text the reader keeps, to :class:`Args`.

The profiler records per argument (``record_shapes=True``): ``Input Dims`` (a tensor's sizes;
``[]`` for a scalar, a 0-d tensor or None; a list of size lists for a TensorList), ``Input type``
(the dtype of a tensor, ``Scalar``, ``ScalarList``, ``TensorList``, ``GenericList`` or ``""``),
``Input Strides`` and ``Concrete Inputs`` (the text of a scalar argument: ``"True"``, ``"[1, 1]"``,
``"0.125"``; ``""`` for a tensor). Each distinct text is parsed once (:func:`parse` is cached) and
checked: anything that is not what the profiler writes gives None ("no model"), never an
exception. Traces come from strangers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from math import prod

import msgspec

#: Profiler dtype names -> tracekit's short dtype names (the keys of the device peaks).
DTYPES = {
    "c10::BFloat16": "bf16",
    "BFloat16": "bf16",
    "c10::Half": "fp16",
    "Half": "fp16",
    "float": "fp32",
    "Float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8",
    "c10::Float8_e5m2": "fp8",
    "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8",
    "signed char": "int8",
    "c10::qint8": "int8",
    "unsigned char": "uint8",
    "c10::quint8": "uint8",
    "short int": "int16",
    "short": "int16",
    "int": "int32",
    "long int": "int64",
    "long": "int64",
    "bool": "bool",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
}
#: Bytes per element of each dtype.
SIZES = {
    "bf16": 2,
    "fp16": 2,
    "fp32": 4,
    "fp64": 8,
    "fp8": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}
#: Largest size accepted in one dimension, and the most dimensions (anything beyond: no model).
MAX_DIM = 1 << 40
MAX_RANK = 16
_INT_LIST = re.compile(r"^\[\s*-?\d+(\s*,\s*-?\d+)*\s*\]$|^\[\s*\]$")


@dataclass(frozen=True)
class Args:
    """One op's recorded arguments, position by position (see the module docstring)."""

    dims: tuple
    types: tuple[str, ...]
    concrete: tuple[str, ...]

    def tensor(self, i: int) -> tuple[int, ...] | None:
        """Argument ``i``'s sizes when it is a tensor with a known dtype (None otherwise)."""
        if i >= len(self.dims) or not is_shape(self.dims[i]) or self.dtype(i) == "":
            return None
        return self.dims[i]

    def dtype(self, i: int) -> str:
        """Argument ``i``'s dtype as a short name (``bf16``...), "" when it is not a tensor."""
        return DTYPES.get(self.types[i], "") if i < len(self.types) else ""

    def nbytes(self, i: int) -> float:
        """Argument ``i``'s size in bytes (0 when it is not a tensor of a known dtype)."""
        shape = self.tensor(i)
        return float(prod(shape)) * SIZES[self.dtype(i)] if shape is not None else 0.0

    def text(self, i: int) -> str:
        """Argument ``i``'s concrete value as text ("" when none was recorded)."""
        return self.concrete[i] if i < len(self.concrete) else ""

    def flag(self, i: int) -> bool | None:
        """Argument ``i`` as a bool (``True``/``False``/``1``/``0``), None when it is not one."""
        return {"true": True, "false": False, "1": True, "0": False}.get(self.text(i).strip().lower())

    def number(self, i: int) -> float | None:
        """Argument ``i`` as a number, None when it is not one."""
        try:
            v = float(self.text(i))
        except ValueError:
            return None
        return v if abs(v) < MAX_DIM else None

    def bools(self, i: int) -> tuple[bool, ...] | None:
        """Argument ``i`` as a list of bools (``"[True, False]"``), None when it is not one."""
        t = self.text(i).strip()
        if len(t) < 2 or t[0] != "[" or t[-1] != "]":
            return None
        words = [w.strip().lower() for w in t[1:-1].split(",")]
        if not all(w in ("true", "false") for w in words):
            return None
        return tuple(w == "true" for w in words)

    def ints(self, i: int) -> tuple[int, ...] | None:
        """Argument ``i`` as a list of ints (``"[1, 1]"``), None when it is not one."""
        t = self.text(i).strip()
        if not _INT_LIST.match(t):
            return None
        vals = tuple(int(x) for x in t[1:-1].split(",") if x.strip())
        return vals if all(abs(v) < MAX_DIM for v in vals) else None


def is_shape(v) -> bool:
    """A tensor's sizes: a tuple of non-negative ints (bools are not sizes)."""
    return (
        isinstance(v, tuple)
        and len(v) <= MAX_RANK
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_DIM for x in v)
    )


def parse(dims_text: str | None, types_text: str | None, concrete_text: str | None) -> Args | None:
    """The op's :class:`Args` from the three texts (None when ``Input Dims`` is missing or any
    text is not what the profiler writes); cached per distinct text."""
    dims = _dims(dims_text) if dims_text else None
    if dims is None:
        return None
    types = _strings(types_text) if types_text else ()
    concrete = _strings(concrete_text) if concrete_text else ()
    if types is None or concrete is None:
        return None
    return Args(dims, types, concrete)


@lru_cache(maxsize=1 << 16)
def _dims(text: str) -> tuple | None:
    v = _decode(text)
    return _freeze(v) if isinstance(v, list) else None


@lru_cache(maxsize=1 << 16)
def _strings(text: str) -> tuple[str, ...] | None:
    v = _decode(text)
    if not isinstance(v, list):
        return None
    return tuple(x if isinstance(x, str) else "" if x is None else str(x) for x in v)


def _decode(text: str):
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return None


def _freeze(v, depth: int = 0):
    """Lists as tuples (hashable, read-only); None for anything but lists, numbers and null."""
    if isinstance(v, list):
        if depth > 4:
            return None
        items = tuple(_freeze(x, depth + 1) for x in v)
        return items
    if isinstance(v, (int, float)) or v is None:
        return v
    return None
