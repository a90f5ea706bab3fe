"""tracekit.read.blanks: long runs of whitespace squeezed out of JSON text as it arrives, never out
of a string, whatever the pieces it arrives in (issue 31, item 1)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tracekit.read.blanks import BLOCK, Blanks

RUN = 2 * BLOCK + 7
WS = st.sampled_from([" ", "\n", "\t", "\r\n", "  \t"])


def _squeezed(text: bytes, cuts: list[int]) -> tuple[bytes, Blanks]:
    """``text`` fed to a Blanks in pieces cut at ``cuts``, as the streaming reader feeds it.
    (What is left of a run is less than ``2 * BLOCK`` bytes, whatever the pieces.)"""
    blanks, buf, n, at = Blanks(), bytearray(), 0, 0
    for end in [*sorted(set(cuts)), len(text)]:
        piece = text[at:end]
        buf[n : n + len(piece)] = piece
        n = blanks.squeeze(buf, n, n + len(piece))
        at = end
    return bytes(buf[:n]), blanks


@st.composite
def documents(draw):
    """A JSON text of strings (with long runs of spaces, quotes and backslashes inside them)
    and numbers, with long runs of whitespace between its tokens, and where they were put."""
    words = st.text(alphabet=' "\\ab', max_size=12) | st.just(" " * RUN) | st.just('\\" ' + " " * RUN)
    value = st.lists(words | st.integers(), max_size=6)
    doc = {"traceEvents": draw(value), "name": draw(words)}
    tokens = json.dumps(doc).split(", ")
    gaps = [draw(WS) * draw(st.sampled_from([0, 1, RUN // 3, RUN])) for _ in tokens]
    text = "".join(t + ("," if i < len(tokens) - 1 else "") + g for i, (t, g) in enumerate(zip(tokens, gaps)))
    return doc, text.encode()


@given(documents(), st.lists(st.integers(0, 4 * RUN), max_size=6))
def test_squeezing_keeps_the_document(doc_text, cuts):
    doc, text = doc_text
    out, blanks = _squeezed(text, [c for c in cuts if c < len(text)])
    assert json.loads(out) == doc
    assert len(out) + blanks.removed == len(text)


def test_a_long_run_between_tokens_is_one_byte_and_offsets_map_back():
    text = b'{"traceEvents": [' + b" " * (10 * BLOCK) + b"1, x]}"
    out, blanks = _squeezed(text, [100])
    assert out == b'{"traceEvents": [ 1, x]}'
    assert blanks.original(out.index(b"x")) == text.index(b"x")
    out, blanks = _squeezed(text, list(range(0, len(text), 1000)))  # pieces smaller than a block
    assert len(out) < 2 * BLOCK + 30 and out.endswith(b" 1, x]}")
    assert blanks.original(out.index(b"x")) == text.index(b"x")
    assert blanks.original(3) == 3


def test_a_long_run_inside_a_string_is_kept():
    name = "a" + " " * (10 * BLOCK) + '\\"' + " " * (10 * BLOCK)
    text = json.dumps({"traceEvents": [], "n": name, "m": "\\\\"}).encode()
    text = text.replace(b', "m"', b"," + b" " * (10 * BLOCK) + b'"m"')
    out, _ = _squeezed(text, [100, 5000, 3 * BLOCK])
    assert json.loads(out)["n"] == name
    assert len(out) < len(text) - 9 * BLOCK  # the run between the members went


def test_bytes_arriving_one_at_a_time_are_still_squeezed():
    text = b"[" + b" " * (4 * BLOCK) + b"1]"
    out, _ = _squeezed(text, list(range(1, len(text))))
    assert json.loads(out) == [1] and len(out) < 3 * BLOCK
