"""Microsecond times to int64 nanoseconds, exactly: from decoded numbers, or from their JSON text.

Kineto writes ``ts``/``dur`` as integer microseconds, or as float microseconds with three
decimals (nanoseconds). A float64 holds such a value to better than half a nanosecond only
below 2**43 us (~100 days: the usual clock since boot); at the epoch (~1.7e15 us) its spacing is
0.25 us and the decimals are lost. So :func:`number_times` converts decoded numbers when that
is exact and says so when it is not; :func:`text_times` converts the numbers' JSON text (decoded
as :class:`msgspec.Raw`) exactly at any magnitude, vectorised over a byte matrix.

Both give the decimal value times 1000 rounded to the nearest nanosecond (text: ties to even).
Values at or beyond ``MAX_US`` in magnitude, ``null`` (and, for ``ts``, a missing value) are not
valid; a missing or ``null`` ``dur`` is 0.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

import numpy as np

#: Times at or beyond this many microseconds (~126 years) are refused as overflowing: twice it in
#: nanoseconds still fits int64, so no arithmetic on valid times can wrap.
MAX_US = 4_000_000_000_000_000
#: Below this magnitude (us) a float64 is within half a nanosecond of any 3-decimal value.
EXACT_FLOAT_US = float(1 << 43)
_INT_OR_NONE = {int, type(None)}
#: Longer number texts (never written by a profiler) are converted one by one.
_WIDE = 32


def number_times(values: list) -> tuple[np.ndarray, np.ndarray] | None:
    """Decoded numbers (int, float or None) -> (int64 ns, valid mask), or ``None`` when a float
    at or beyond 2**43 us is present (float64 lost its nanoseconds: convert the text instead)."""
    n = len(values)
    types = set(map(type, values))
    if not types <= {int, float, type(None)}:
        return None
    if types <= _INT_OR_NONE:
        if type(None) not in types:
            try:
                raw = np.array(values, dtype=np.int64)
            except OverflowError:
                raw = None
            if raw is not None and ((raw > -MAX_US) & (raw < MAX_US)).all():  # all valid: exact
                return raw * 1000, np.ones(n, dtype=bool)
        valid = np.array([v is not None and -MAX_US < v < MAX_US for v in values], dtype=bool)
        ns = np.array([v if ok else 0 for v, ok in zip(values, valid)], dtype=np.int64)
        return ns * 1000, valid
    if type(None) in types:
        f = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
    else:
        f = np.array(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        valid = (f > -MAX_US) & (f < MAX_US)
        if (np.abs(f[valid]) >= EXACT_FLOAT_US).any():
            return None
        # Ints among the floats are exact too (below 2**43). Whole and fractional parts apart:
        # both are exact in float64, so only the fraction's scaling rounds (to 1 ns).
        f = np.where(valid, f, 0.0)
        whole = np.trunc(f)
        ns = whole.astype(np.int64) * 1000 + np.rint((f - whole) * 1000.0).astype(np.int64)
    return ns, valid


def text_times(tokens: list[bytes], none_is_zero: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
    """JSON texts of numbers (``b""`` for a missing value, ``b"null"``) -> (int64 ns, valid
    mask), exact at any magnitude; ``None`` when a text is not a number the typed decoder would
    accept (a string, an object, ``1e400``): the caller decodes the slice typed for its error."""
    n = len(tokens)
    ns = np.zeros(n, dtype=np.int64)
    valid = np.zeros(n, dtype=bool)
    if not n:
        return ns, valid
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
    wide = np.flatnonzero(lens > _WIDE).tolist()
    short = tokens
    if wide:
        short = list(tokens)
        for i in wide:
            short[i] = b"0"
        lens[wide] = 1
    m = np.array(short, dtype=f"S{max(1, int(lens.max()))}").view(np.uint8).reshape(n, -1)
    first = m[:, 0]
    null = (first == ord("n")) & (lens == 4)
    missing = lens == 0
    number = (first == ord("-")) | ((first >= ord("0")) & (first <= ord("9")))
    if not (null | missing | number).all():
        return None
    special = ((m == ord("e")) | (m == ord("E"))).any(axis=1)
    special[wide] = True
    plain = number & ~special
    if plain.any():
        ns_p, ok_p = _plain_ns(m, lens, plain)
        ns[plain], valid[plain] = ns_p[plain], ok_p[plain]
    for i in np.flatnonzero(special).tolist():
        one = _one_ns(tokens[i])
        if one is None:
            return None
        ns[i], valid[i] = one
    if none_is_zero:
        valid |= null | missing
    return ns, valid


def _plain_ns(m: np.ndarray, lens: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Digits (``-``, digits, optional ``.`` and digits) of a byte matrix -> ns, valid."""
    n, w = m.shape
    neg = m[:, 0] == ord("-")
    cols = np.arange(w)
    dot = m == ord(".")
    dotpos = np.where(dot.any(axis=1), dot.argmax(axis=1), lens)
    digit = m.astype(np.int64) - ord("0")
    is_digit = (digit >= 0) & (digit <= 9)
    start = neg.astype(np.int64)
    int_digits = dotpos - start
    ok = rows & (int_digits <= 16)  # 10**16 us is beyond MAX_US
    whole = np.zeros(n, dtype=np.int64)
    for j in range(min(w, 17)):
        inside = (j >= start) & (j < dotpos) & ok
        whole = np.where(inside, whole * 10 + np.where(is_digit[:, j], digit[:, j], 0), whole)
    frac = np.zeros(n, dtype=np.int64)
    r = np.arange(n)
    for k in (1, 2, 3):
        col = dotpos + k
        d = digit[r, np.minimum(col, w - 1)]
        frac = frac * 10 + np.where(col < lens, d, 0)
    c4 = dotpos + 4
    r4 = np.where(c4 < lens, digit[r, np.minimum(c4, w - 1)], 0)
    beyond = (cols[None, :] > c4[:, None]) & (cols[None, :] < lens[:, None]) & is_digit & (digit > 0)
    up = (r4 > 5) | ((r4 == 5) & (beyond.any(axis=1) | (frac % 2 == 1)))
    mag = whole * 1000 + frac + up
    valid = ok & (whole < MAX_US)
    return np.where(valid, np.where(neg, -mag, mag), 0), valid


def _one_ns(text: bytes) -> tuple[int, bool] | None:
    """One number text (exponent form, or very long) -> (ns, valid); ``None`` if out of range."""
    try:
        d = Decimal(text.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    if not d.is_finite() or abs(float(d)) == float("inf"):
        return None  # "Number out of range": the typed decoder reports it
    if not -MAX_US < d < MAX_US:
        return 0, False
    return int((d * 1000).to_integral_value(ROUND_HALF_EVEN)), True
