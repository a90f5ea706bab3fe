"""Long runs of whitespace squeezed out of JSON text as it arrives, outside strings only.

JSON allows any amount of whitespace between tokens, so a small gzip can hold gigabytes of
spaces inside ``"traceEvents": [ ... ]`` where no event boundary lets the streaming reader drop
text. :class:`Blanks` keeps such a run to one byte as the text arrives: memory stays bounded
and the time is the decompression's. What it changes is whitespace between tokens only, so the
decoded document, its values and its errors are the same; the byte offsets in error messages
are mapped back to the file's (:meth:`Blanks.original`).

Needs: the text in arrival order (:meth:`Blanks.squeeze` on each piece as it lands in a
``bytearray``), starting outside a string. Guarantees: a run of at least ``2 * BLOCK`` bytes
of JSON whitespace that lies outside strings (told by lexing quotes and backslash escapes,
only up to where such a run was found: a trace without long runs costs one sampled look per
block) is replaced by its first byte (of a run that arrives in pieces smaller than a block,
less than ``2 * BLOCK`` bytes are left); nothing else changes. Inside a string only spaces may
appear raw (JSON forbids raw tabs and newlines there): such a run is part of a value and kept.
"""

from __future__ import annotations

import numpy as np

#: Runs of at least twice this many whitespace bytes are squeezed (each holds an aligned block).
BLOCK = 1 << 12
_WS = np.zeros(256, dtype=bool)
_WS[[0x20, 0x09, 0x0A, 0x0D]] = True
_SAMPLES = np.arange(0, BLOCK, BLOCK // 8)
_SPACES = b" " * (1 << 20)


class Blanks:
    """The squeezing state of one text: how far it was lexed (strings told apart), and where
    bytes were taken out (to map offsets back)."""

    def __init__(self) -> None:
        #: Offset (in the text as held) up to which the string state is known, and that state.
        self.lexed = 0
        self.in_string = False
        #: Offsets already dropped from the front of the held text (see :meth:`dropped`).
        self.base = 0
        #: (offset in the squeezed text, bytes taken out there), in order.
        self.cuts: list[tuple[int, int]] = []
        self.removed = 0

    def dropped(self, upto: int) -> None:
        """The holder forgot its first ``upto`` bytes, up to a point outside any string (an
        event boundary): what came before it need not be lexed."""
        self.base += upto
        if self.lexed <= upto:
            self.lexed, self.in_string = 0, False
        else:
            self.lexed -= upto

    def squeeze(self, buf: bytearray, lo: int, hi: int) -> int:
        """Squeeze the long runs that reach into ``buf[lo:hi]`` (the bytes that just arrived;
        ``buf[:lo]`` was seen before); returns the new end of the text (``buf`` beyond it is
        free space)."""
        starts = np.arange(max(0, lo - BLOCK) // BLOCK * BLOCK, hi - BLOCK + 1, BLOCK)
        view = np.frombuffer(buf, dtype=np.uint8, count=hi)
        candidates = starts[_WS[view[starts[:, None] + _SAMPLES]].all(axis=1)] if len(starts) else starts
        if not len(candidates):
            return hi
        keep = [r for r in self._runs(buf, view, candidates, hi) if self._outside(view, *r)]
        del view
        return self._cut(buf, keep, hi) if keep else hi

    def _runs(
        self, buf: bytearray, view: np.ndarray, candidates: np.ndarray, hi: int
    ) -> list[tuple[int, int]]:
        """The whitespace runs of at least ``2 * BLOCK`` bytes that hold one of ``candidates``
        as a whole block, in order, each once."""
        runs: list[tuple[int, int]] = []
        for b in candidates.tolist():
            if runs and b < runs[-1][1]:
                continue
            if _first_not_ws(view[b : b + BLOCK]) < BLOCK:
                continue
            run = (_run_start(view, b), _run_end(buf, view, b + BLOCK, hi))
            if run[1] - run[0] >= 2 * BLOCK:
                runs.append(run)
        return runs

    def _outside(self, view: np.ndarray, start: int, end: int) -> bool:
        """Whether the whitespace run ``view[start:end]`` lies outside strings: quotes are
        lexed from where the state is known up to it (whitespace leaves the state as it is,
        so a state known anywhere in the run is the run's; a run wholly before that point was
        judged already: it was kept, so it is inside a string)."""
        if end < self.lexed:  # judged before, and kept: inside a string
            return False
        if self.lexed < start:
            part = view[self.lexed : start]
            quotes = np.flatnonzero(part == 0x22)
            if len(quotes):
                unescaped = len(quotes) - int(np.count_nonzero(_escaped(part, quotes)))
                self.in_string ^= bool(unescaped & 1)
        self.lexed = end
        return not self.in_string

    def _cut(self, buf: bytearray, runs: list[tuple[int, int]], hi: int) -> int:
        """Take ``runs`` out of ``buf[:hi]`` but their first bytes, in one pass (each kept
        byte moves once); returns the new end."""
        write = src = runs[0][0]
        taken_here = 0
        with memoryview(buf) as mv:
            for start, end in runs:
                if start > src:  # the text between the previous run and this one
                    mv[write : write + start - src] = mv[src:start]
                    write += start - src
                mv[write] = mv[start]
                write += 1
                self.cuts.append((self.base + write, end - start - 1))
                taken_here += end - start - 1
                src = end
            mv[write : write + hi - src] = mv[src:hi]
        self.lexed -= taken_here  # every run taken out lies before it
        self.removed += taken_here
        return write + hi - src

    def original(self, offset: int) -> int:
        """The offset in the original text of ``offset`` in the squeezed text (as decoded)."""
        extra = 0
        for at, taken in self.cuts:
            if at > offset:
                break
            extra += taken
        return offset + extra


def _run_start(view: np.ndarray, b: int) -> int:
    """The first byte of the whitespace run that holds ``view[b]``."""
    lo = b
    while lo > 0:
        back = max(0, lo - (BLOCK << 4))
        k = _first_not_ws(view[back:lo][::-1])
        if k < lo - back:
            return lo - k
        lo = back
    return 0


def _run_end(buf: bytearray, view: np.ndarray, b: int, hi: int) -> int:
    """The end of the whitespace run that holds ``view[b - 1]`` (at most ``hi``): spaces are
    skipped a MiB at a time by comparing memory, the rest is looked at a MiB at a time."""
    at = b
    while hi - at >= len(_SPACES) and buf.startswith(_SPACES, at):
        at += len(_SPACES)
    if buf.startswith(_SPACES[: hi - at], at):
        return hi
    while at < hi:
        part = view[at : min(hi, at + len(_SPACES))]
        k = _first_not_ws(part)
        if k < len(part):
            return at + k
        at += len(part)
    return hi


def _first_not_ws(v: np.ndarray) -> int:
    """The index of the first byte of ``v`` that is not JSON whitespace, else ``len(v)``.
    (Bytes above the space are found by one vectorised compare; the few below it are looked
    up: a lookup of every byte is ten times slower.)"""
    above = v > 0x20
    first = int(np.argmax(above)) if above.any() else len(v)
    low = np.flatnonzero(v[:first] < 0x20)
    if len(low):
        bad = low[~_WS[v[low]]]
        if len(bad):
            return int(bad[0])
    return first


def _escaped(part: np.ndarray, quotes: np.ndarray) -> np.ndarray:
    """Which quotes of ``part`` follow an odd run of backslashes (``part`` starts where the
    state is known: after whitespace, or at the start of the text)."""
    is_bs = part == 0x5C
    if not is_bs.any():
        return np.zeros(len(quotes), dtype=bool)
    last_other = np.maximum.accumulate(np.where(is_bs, -1, np.arange(len(part))))
    before = np.maximum(quotes - 1, 0)
    run = np.where(quotes > 0, before - last_other[before], 0)
    return (run & 1) == 1
