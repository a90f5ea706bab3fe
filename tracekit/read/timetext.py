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

**Odd numbers, one rule for both readers** (the C scanner declines every number it does not
convert exactly, so these reach this module whichever reader runs): a number is its exact
decimal value, however it is spelled (``-0``, ``0e+99999999999999999999``, a 400-digit
integer, a 40-digit mantissa). A time whose value is out of range is not valid: its event is
dropped with the reader's warning ("no valid timestamp", "overflowing durations"). A number
past float64's range in a field typed as a float (``1e400``, ``-1e400``) is msgspec's one-line
error ("Number out of range"), also when written as text; ``NaN`` and ``Infinity`` are not JSON
(the decoder's one-line error). Any other number (``args.bytes``) past float64's range is
:func:`number_floats`'s odd number: its event is dropped with a warning.
"""

from __future__ import annotations

import math
import re

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
    f = _floats(values, None in types)
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


def _floats(values: list, nones: bool) -> np.ndarray:
    """Ints and floats (and None) as float64, NaN for None and for an int that is not a valid
    time (past ``MAX_US``: float64 may not even hold it)."""
    try:
        return np.array([np.nan if v is None else v for v in values] if nones else values, dtype=np.float64)
    except OverflowError:  # an int past float64's range
        return np.array(
            [np.nan if v is None or (type(v) is int and not -MAX_US < v < MAX_US) else v for v in values],
            dtype=np.float64,
        )


def number_floats(values: list) -> tuple[np.ndarray, np.ndarray | None]:
    """Decoded values as float64 (anything but an int or float: NaN), and the mask of odd
    numbers (ints past float64's range: NaN here, their events to be dropped), None when none."""
    try:
        return np.array(
            [v if isinstance(v, (int, float)) else np.nan for v in values], dtype=np.float64
        ), None
    except OverflowError:
        odd = np.array([isinstance(v, int) and abs(v) >= _FLOAT_INT_LIMIT for v in values], dtype=bool)
        kept = [v if isinstance(v, (int, float)) and not bad else np.nan for v, bad in zip(values, odd)]
        return np.array(kept, dtype=np.float64), odd


#: The smallest int float64 cannot hold (float(2**1024) overflows).
_FLOAT_INT_LIMIT = 1 << 1024


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


_NUMBER = re.compile(rb"(-?)(\d+)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
#: Significant digits kept of a longer mantissa (the rest only decides a tie's rounding).
_DIGITS = 40


def _one_ns(text: bytes) -> tuple[int, bool] | None:
    """One number text (exponent form, or very long) -> (ns, valid), exactly, whatever the
    exponent's size; ``None`` for a float (a fraction or an exponent) that float64 cannot hold
    (msgspec refuses it, typed; an integer of any size it decodes as an int)."""
    m = _NUMBER.fullmatch(text)
    if m is None:
        return None
    sign, whole, frac, exp_text = m.groups()
    frac = frac or b""
    digits = (whole + frac).lstrip(b"0")
    if not digits:
        return 0, True  # zero (also -0, 0e+99999999999999999999)
    exp = _exponent(exp_text) - len(frac)  # value = int(digits) * 10**exp us
    order = len(digits) - 1 + exp  # 10**order <= |value| < 10**(order + 1)
    is_float = m.group(3) is not None or exp_text is not None  # msgspec: an int of any size is exact
    if is_float and order >= 308 and math.isinf(float(text)):
        return None  # "Number out of range": the typed decoder reports it
    if order >= 16:  # beyond MAX_US (4e15 us)
        return 0, False
    if order < -5:  # under 0.01 ns: rounds to 0
        return 0, True
    sticky = any(d != 0x30 for d in digits[_DIGITS:])
    kept = digits[:_DIGITS]
    exp += len(digits) - len(kept)
    ns = _scaled(int(kept), exp + 3, sticky)
    ns = -ns if sign else ns
    return (ns, True) if -MAX_US * 1000 < ns < MAX_US * 1000 else (0, False)


def _exponent(text: bytes | None) -> int:
    """An exponent's value; one past any meaningful size is clamped (no 4,300-digit ints)."""
    if not text:
        return 0
    digits = text.lstrip(b"+-").lstrip(b"0") or b"0"
    value = int(digits) if len(digits) <= 6 else 10**6
    return -value if text.startswith(b"-") else value


def _scaled(n: int, exp: int, sticky: bool) -> int:
    """``n * 10**exp`` rounded to an int, ties to even (``sticky``: digits beyond ``n`` that
    are not all zero, so a tie is not one)."""
    if exp >= 0:
        return n * 10**exp
    q, r = divmod(n, 10**-exp)
    half = 5 * 10 ** (-exp - 1)
    if r > half or (r == half and (sticky or q % 2 == 1)):
        q += 1
    return q
