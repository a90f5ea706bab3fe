"""tracekit.read.inflate: ISA-L and zlib give the readers the same text, or the same kind of
failure, on every gzip input: valid, concatenated members, empty members, truncated, bytes
damaged anywhere (header, deflate blocks, CRC, length), trailing garbage, bombs past the bound.

Each input goes through tracekit's own gzip readers (``files.read_bytes``, ``iter_text``'s
pieces and the rank-head reader), once per library, and the results must match: the same
bytes read, or both refused. Bytes after the last member are refused alike ("corrupt gzip",
said by tracekit). On a stream damaged inside, the libraries may find the damage at other
points, so one may say "truncated" or reach the size bound first where the other says
"corrupt": both refuse it, and neither gives a byte the other does not."""

from __future__ import annotations

import gzip
import importlib
import random
import struct
import zlib

import pytest

from tracekit.errors import TraceError
from tracekit.read import files, inflate

isal_zlib = pytest.importorskip("isal.isal_zlib")

KINDS = ("corrupt gzip", "truncated gzip", "limit")
#: The inputs of :func:`_inputs` with bytes after a valid member.
TRAILING = (3, 4)


def _text(rng: random.Random) -> bytes:
    words = [
        b'{"ph": "X", "name": "aten::mm", "ts": %d, "dur": %d}' % (rng.randrange(10**9), rng.randrange(99))
    ]
    return b'{"traceEvents": [' + b", ".join(words * rng.randrange(1, 400)) + b"]}"


def _inputs(rng: random.Random) -> list[bytes]:
    good = gzip.compress(_text(rng), compresslevel=rng.choice([1, 6, 9]))
    out = [
        good,
        good + gzip.compress(_text(rng)),  # two members
        gzip.compress(b"") + good,  # an empty member first
        good + b"\0" * rng.randrange(1, 9),  # padding after the member
        good + b"garbage",
        good[: rng.randrange(1, len(good))],  # truncated anywhere
        good[:-4],  # no length
        good[:10],  # header only
    ]
    for _ in range(12):  # damaged anywhere: header, blocks, CRC, length
        b = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] ^= rng.randrange(1, 256)
        out.append(bytes(b))
    return out


def _outcome(path, max_bytes: int) -> tuple[str, bytes]:
    try:
        whole = bytes(files.read_bytes(path, max_bytes))
    except TraceError as e:
        whole_kind = next((k for k in KINDS if k in str(e)), str(e))
        return "error", whole_kind.encode()
    pieces = b"".join(files.iter_text(path, max_bytes))
    assert pieces == whole
    return "ok", whole


@pytest.fixture
def backends(monkeypatch):
    """Run a callable under zlib, then under ISA-L; the two results."""

    def both(fn):
        got = []
        for z in (zlib, isal_zlib):
            monkeypatch.setattr(inflate, "_z", z)
            monkeypatch.setattr(inflate, "ERRORS", (zlib.error, isal_zlib.error))
            got.append(fn())
        return got

    return both


def test_the_default_backend_is_isal_when_installed(monkeypatch):
    assert inflate.BACKEND == "isal"
    monkeypatch.setenv("TRACEKIT_ZLIB", "1")
    assert importlib.reload(inflate).BACKEND == "zlib"
    monkeypatch.delenv("TRACEKIT_ZLIB")
    assert importlib.reload(inflate).BACKEND == "isal"


def test_isal_and_zlib_read_the_same_bytes_or_fail_alike(tmp_path, backends):
    rng = random.Random(4)
    n_ok = n_err = 0
    for case in range(25):
        for k, data in enumerate(_inputs(rng)):
            p = tmp_path / f"t{case}_{k}.json.gz"
            p.write_bytes(data)
            limit = rng.choice([files.DEFAULT_MAX_BYTES, 5000])  # 5000: a bomb for the bigger texts
            a, b = backends(lambda: _outcome(p, limit))
            assert a[0] == b[0], (case, k)  # both read it, or both refuse it
            if a[0] == "ok" or k in TRAILING:
                assert a == b, (case, k)
            n_ok += a[0] == "ok"
            n_err += a[0] == "error"
    assert n_ok > 50 and n_err > 50  # both paths were exercised


def test_the_rank_head_reader_agrees_under_both(tmp_path, backends):
    from tracekit.ranks import rankhead

    rng = random.Random(5)
    inputs = _inputs(rng)
    ranked = gzip.decompress(inputs[0]).replace(b"{", b'{"distributedInfo": {"rank": 3}, ', 1)
    inputs.append(gzip.compress(ranked))
    got = []
    for k, data in enumerate(inputs):
        p = tmp_path / f"r{k}.json.gz"
        p.write_bytes(data)

        def rank():
            try:
                return rankhead.head_rank(p, files.DEFAULT_MAX_BYTES)
            except rankhead.Unknown:
                return "unknown"

        a, b = backends(rank)
        assert a == b, k
        got.append(a)
    assert got[-1] == 3 and "unknown" in got


def _member(raw: bytes, flags: int, extra: bytes = b"", method: int = 8) -> bytes:
    head = b"\x1f\x8b" + bytes([method, flags]) + b"\0\0\0\0\0\x03" + extra
    return head + zlib.compress(raw, 6, wbits=-15) + struct.pack("<II", zlib.crc32(raw), len(raw))


def test_gzip_headers_are_judged_alike(tmp_path, backends):
    """Header fields the libraries judge differently (found by the fuzz target reader: ISA-L
    ignores the reserved flag bits, zlib refuses them) are checked by tracekit itself."""
    raw = b'{"traceEvents": []}' * 40
    good_hcrc = _member(raw, 2, b"")
    hcrc = struct.pack("<H", zlib.crc32(good_hcrc[:10]) & 0xFFFF)
    cases = {
        "plain": (_member(raw, 0), "ok"),
        "name and extra": (_member(raw, 8 | 4, b"\x03\x00abcx.json\x00"), "ok"),
        "header crc": (good_hcrc[:10] + hcrc + good_hcrc[10:], "ok"),
        "bad header crc": (good_hcrc[:10] + b"\0\0" + good_hcrc[10:], "error"),
        "reserved flag 0x20": (_member(raw, 0x20), "error"),
        "reserved flag 0x80": (_member(raw, 0x80), "error"),
        "method 7": (_member(raw, 0, method=7), "error"),
        "second member with a reserved flag": (_member(raw, 0) + _member(raw, 0x40), "error"),
    }
    for name, (data, want) in cases.items():
        p = tmp_path / "h.json.gz"
        p.write_bytes(data)
        a, b = backends(lambda: _outcome(p, files.DEFAULT_MAX_BYTES))
        assert a[0] == b[0] == want, name
        if want == "ok":
            assert a == b and a[1] == raw * (2 if "second" in name else 1), name
