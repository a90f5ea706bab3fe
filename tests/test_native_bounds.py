"""The native scanner never reads past the end of the range it is given.

Each text is placed so that its range ends right before a page that cannot be read
(``mprotect(PROT_NONE)``): a read past the end is a segfault, not a quiet read of whatever bytes
follow (which ASan cannot see either, inside a larger Python buffer). The texts are every prefix
of real and odd events (so every cut: inside strings, numbers, escapes, keys, nesting) and
mutated runs of events, scanned in the three modes (to a given end, to the buffer's end, text
times). The results themselves are checked against msgspec in test_native_reader.py.
"""

from __future__ import annotations

import ctypes
import mmap
import random
import sys

import pytest

import tracekit.read.native as N

pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or N._kineto is None, reason="Linux mprotect, compiled scanner"
    ),
]

EVENTS = [
    b'{"ph": "X", "cat": "cpu_op", "name": "aten::slice", "pid": 6583, "tid": 6583, '
    b'"ts": 1365627863588.761, "dur": 57.843, "args": {"External id": 2, "Record function id": 0, '
    b'"Concrete Inputs": ["", "0", "0", "1", "1"], "Input Strides": [[1], [], []], '
    b'"Input Dims": [[512], [], []], "Ev Idx": 1}}',
    b'{"ph": "X", "cat": "kernel", "name": "k\\u00e9\\ud83d\\ude00", "pid": 1, "tid": "7", "ts": 1.5e3, '
    b'"dur": 2, "args": {"stream": 7, "bytes": 1.25, "Collective name": "x", "correlation": "12", '
    b'"Sequence number": -3, "Fwd thread id": 99999999999999999999, "x": [1, {"a": [true, false, '
    b"null, -0.5e-3]}]}}",
    b'{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "m"}}',
    b'{"ph":"f","id":565581,"pid":6583,"tid":6583,"ts":12345678901234.5678,"cat":"ac2g","name":"ac2g",'
    b'"bp":"e"}',
    b'{ "ph" : "X" ,\n"cat"\t:\t"k" , "ts" : 00 , "dur": 1E400, "args" : { } }',
]
INSERTS = [b"[", b"{", b'"', b"\\", b",", b"}", b"]", b"\xc3", b"1e9", b" ", b"0", b"12345678", b"[" * 70]


@pytest.fixture(scope="module")
def guarded():
    """A writable buffer whose last byte is followed by an unreadable page."""
    libc = ctypes.CDLL(None, use_errno=True)
    page = mmap.PAGESIZE
    size = 4 * page
    m = mmap.mmap(-1, size + page)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    assert libc.mprotect(ctypes.c_void_p(addr + size), page, 0) == 0
    with memoryview(m) as whole, whole[:size] as mv:
        yield mv, size
        libc.mprotect(ctypes.c_void_p(addr + size), page, mmap.PROT_READ | mmap.PROT_WRITE)
    m.close()


def _scan_at_end(guarded, text: bytes) -> None:
    mv, size = guarded
    start = size - len(text)
    mv[start:size] = text
    for end, text_times in ((size, False), (None, False), (size, True)):
        N._kineto.scan(mv, start, end, text_times, N.event_class)


def test_every_prefix_ends_at_the_guard(guarded):
    for event in [*EVENTS, b", ".join(EVENTS)]:
        for k in range(len(event) + 1):
            _scan_at_end(guarded, event[:k])


def test_mutated_runs_end_at_the_guard(guarded):
    rnd = random.Random(15)
    for _ in range(3000):
        text = bytearray(b", ".join(rnd.sample(EVENTS, rnd.randint(1, 3))))
        for _ in range(rnd.randint(1, 3)):
            i = rnd.randrange(len(text) + 1)
            what = rnd.randrange(4)
            if what == 0 and i < len(text):
                text[i] = rnd.randrange(256)
            elif what == 1:
                text[i:i] = rnd.choice(INSERTS)
            elif what == 2:
                del text[i : i + rnd.randint(1, 8)]
            else:
                del text[i:]
        _scan_at_end(guarded, bytes(text))
