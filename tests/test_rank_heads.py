"""--rank R on a directory reads only rank R's files: every other file's rank comes from its
head (or tail, or the capture manifest), never from its events (tracekit.ranks.rankhead)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import tracekit
from tracekit.cli import main
from tracekit.errors import TraceError
from tracekit.ranks.rankhead import Unknown, head_rank
from tracekit.read.reader import read_trace
from tracekit.testing import TraceBuilder, write_trace
from tracekit.testing.kernels import GEMM_A, K_ADAM, K_MUL

sys.path.insert(0, str(Path(__file__).parent))
from shared_traces import SHARED

GARBAGE = b"\x00\xff not json at all {{{[[[ " * 4000  # ~100 KB: beyond any head window


def one_rank(rank: int, world: int = 4) -> dict:
    b = TraceBuilder(rank=rank, world_size=world)
    for _ in range(2):
        with b.step():
            with b.module("LlamaMLP", "model.layers.0.mlp"):
                b.kernel(GEMM_A, 10 + rank, op="aten::mm", gap_us=2)
                b.kernel(K_MUL, 2, op="aten::mul", gap_us=3)
            with b.optimizer():
                b.kernel(K_ADAM, 5, op="aten::_fused_adam_", gap_us=4)
            b.synchronize()
    return b.trace()


def head_then_garbage(trace: dict) -> bytes:
    """The document's head (up to the start of ``traceEvents``), then garbage: a file whose
    rank can be told from its head and which cannot be read any further."""
    text = json.dumps({k: v for k, v in trace.items() if k != "traceEvents"})
    return (text[:-1] + ', "traceEvents": [').encode() + GARBAGE


def garbage_then_tail(trace: dict) -> bytes:
    """``traceEvents`` first (garbage inside), ``distributedInfo`` after it: the tail says the rank."""
    return (
        b'{"traceEvents": ['
        + GARBAGE
        + b'{}], "distributedInfo": '
        + json.dumps(trace["distributedInfo"]).encode()
        + b"}"
    )


def _tables(a) -> dict[str, pd.DataFrame]:
    return {k: v.reset_index(drop=True) for k, v in a.tables(per_step=True).items()}


@pytest.fixture
def mixed_dir(tmp_path: Path) -> Path:
    """Rank 2 is a real file; ranks 0, 1, 3 are heads (or tails) around garbage."""
    write_trace(tmp_path / "rank2.pt.trace.json", one_rank(2))
    (tmp_path / "rank0.pt.trace.json").write_bytes(head_then_garbage(one_rank(0)))
    with gzip.open(tmp_path / "rank1.pt.trace.json.gz", "wb") as f:
        f.write(head_then_garbage(one_rank(1)))
    (tmp_path / "rank3.pt.trace.json").write_bytes(garbage_then_tail(one_rank(3)))
    return tmp_path


@pytest.mark.parametrize("jobs", [1, 2])
def test_rank_reads_only_its_files(mixed_dir: Path, tmp_path_factory, jobs: int) -> None:
    alone = tmp_path_factory.mktemp("alone")
    write_trace(alone / "rank2.pt.trace.json", one_rank(2))
    want = tracekit.load(alone / "rank2.pt.trace.json", cache=False)
    got = tracekit.load(mixed_dir, rank=2, cache=False, jobs=jobs)
    assert sorted(got.ranks) == [2] and not got.skipped and not got.meta["partial"]
    assert got.meta["rank_grouping"].startswith("ranks from distributedInfo")
    w, g = _tables(want), _tables(got)
    assert w.keys() == g.keys()
    for name in w:
        pd.testing.assert_frame_equal(g[name], w[name], obj=name)
    # the other files really are unreadable: reading them all skips three
    everything = tracekit.load(mixed_dir, cache=False, jobs=1)
    assert sorted(s["file"] for s in everything.skipped) == [
        "rank0.pt.trace.json",
        "rank1.pt.trace.json.gz",
        "rank3.pt.trace.json",
    ]


def test_unknown_rank_names_the_ranks_from_heads(mixed_dir: Path) -> None:
    with pytest.raises(TraceError, match=r"no rank 7; ranks here: 0, 1, 2, 3"):
        tracekit.load(mixed_dir, rank=7, cache=False)


def _explain(path: Path, *args: str):
    return CliRunner().invoke(main, ["explain", str(path), "gemm", "--no-cache", *args])


def test_explain_rank_reads_only_its_files(mixed_dir: Path, tmp_path_factory) -> None:
    """explain --rank shares analyze's path: the other ranks' files are garbage past their
    heads, and the chains are those of the rank's file alone."""
    alone = tmp_path_factory.mktemp("alone")
    write_trace(alone / "rank2.pt.trace.json", one_rank(2))
    want = _explain(alone / "rank2.pt.trace.json", "--format", "json")
    got = _explain(mixed_dir, "--rank", "2", "--format", "json")
    assert want.exit_code == 0 and got.exit_code == 0, got.output
    w, g = json.loads(want.stdout), json.loads(got.stdout)
    assert g["meta"]["rank"] == 2 and g["meta"]["files"] == ["rank2.pt.trace.json"]
    assert g["meta"]["matched"] == 2 and g["chains"] == w["chains"]
    missing = _explain(mixed_dir, "--rank", "7")
    assert missing.exit_code == 2 and "no rank 7; ranks here: 0, 1, 2, 3" in missing.output
    # the other files really are unreadable: a rank among them fails
    assert _explain(mixed_dir, "--rank", "0").exit_code == 2


def test_explain_without_rank_reads_only_the_lowest_rank(tmp_path: Path, monkeypatch) -> None:
    """No --rank: explain shows the lowest rank, found from the heads, and reads its file alone
    (the others are garbage past their heads or tails)."""
    import tracekit.ranks.analyse

    write_trace(tmp_path / "rank1.pt.trace.json", one_rank(1))
    (tmp_path / "rank2.pt.trace.json").write_bytes(head_then_garbage(one_rank(2)))
    (tmp_path / "rank3.pt.trace.json").write_bytes(garbage_then_tail(one_rank(3)))
    (tmp_path / "rank4.pt.trace.json").write_bytes(head_then_garbage(one_rank(4)))
    read, seen = tracekit.ranks.analyse._read, []
    monkeypatch.setattr(tracekit.ranks.analyse, "_read", lambda f, o: seen.append(f.name) or read(f, o))
    got = _explain(tmp_path, "--format", "json")
    assert got.exit_code == 0, got.output
    assert seen == ["rank1.pt.trace.json"]
    doc = json.loads(got.stdout)
    assert doc["meta"]["rank"] == 1 and doc["meta"]["files"] == ["rank1.pt.trace.json"]
    assert doc["meta"]["matched"] == 2


def test_manifest_names_ranks_of_files_without_distributed_info(tmp_path: Path) -> None:
    write_trace(tmp_path / "rank1.pt.trace.json", one_rank(1) | {"distributedInfo": None})
    doc = one_rank(0)
    del doc["distributedInfo"]
    # no distributedInfo in the head: the tail (after the array) is read, and has none either
    (tmp_path / "rank0.pt.trace.json").write_bytes(head_then_garbage(doc) + b"{}]}")
    (tmp_path / "manifest.json").write_text(
        json.dumps({"ranks": [{"rank": r, "trace": f"rank{r}.pt.trace.json"} for r in (0, 1)]})
    )
    a = tracekit.load(tmp_path, rank=1, cache=False, jobs=1)
    assert sorted(a.ranks) == [1] and not a.skipped


def test_a_file_without_a_rank_means_every_file_is_read(tmp_path: Path) -> None:
    """No distributedInfo and no manifest: ranks come from processes, which needs each file
    read; the unreadable file is then found and skipped."""
    write_trace(tmp_path / "rank2.pt.trace.json", one_rank(2))
    doc = one_rank(0)
    del doc["distributedInfo"]
    write_trace(tmp_path / "norank.pt.trace.json", doc)
    (tmp_path / "rank1.pt.trace.json").write_bytes(head_then_garbage(one_rank(1)))
    a = tracekit.load(tmp_path, rank=2, cache=False, jobs=1)
    assert sorted(a.ranks) == [2]
    assert [s["file"] for s in a.skipped] == ["rank1.pt.trace.json"]


EV = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1, "dur": 2}'


@pytest.mark.parametrize(
    "doc, rank",
    [
        (b'{"distributedInfo": {"rank": 5}, "traceEvents": [EV]}', 5),
        (b'\xef\xbb\xbf{"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": [EV, EV]}', 3),
        (b'{"traceEvents": [EV], "deviceProperties": [{"id": 0}], "distributedInfo": {"rank": 7}}', 7),
        (b'{"traceEvents": [EV],\n "distributedInfo": {"rank": 6}}\n', 6),
        (b'{"traceEvents": [EV, {"name": "]"}]}', None),
        (b'{"distributedInfo": {"rank": true}, "traceEvents": [EV]}', None),
        (b'{"distributedInfo": {"backend": "nccl"}, "traceEvents": [EV]}', None),
        (b"[EV]", None),  # the bare event array: no header, no rank
        (b"\xef\xbb\xbf\n [EV, EV,\n", None),  # unterminated
    ],
)
def test_head_rank_agrees_with_the_reader(tmp_path: Path, doc: bytes, rank: int | None) -> None:
    doc = doc.replace(b"EV", EV)
    for name, data in (("t.json", doc), ("t.json.gz", gzip.compress(doc))):
        p = tmp_path / name
        p.write_bytes(data)
        assert head_rank(p, 1 << 30) == rank == read_trace(p).meta["rank"]


@pytest.mark.parametrize(
    "doc",
    [b"not json", b'{"foo": {"traceEvents": [', b'{"distributedInfo": [1], "traceEvents": []}', b"{[]"],
)
def test_head_rank_unknown(tmp_path: Path, doc: bytes) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(doc)
    with pytest.raises(Unknown):
        head_rank(p, 1 << 30)


def test_gzip_tail_is_bounded(tmp_path: Path) -> None:
    p = tmp_path / "t.json.gz"
    p.write_bytes(
        gzip.compress(b'{"traceEvents": [' + b" " * (2 << 20) + b'], "distributedInfo": {"rank": 1}}')
    )
    assert head_rank(p, 8 << 20) == 1
    with pytest.raises(Unknown):
        head_rank(p, 1 << 20)


@pytest.mark.shared
def test_head_rank_of_every_shared_trace() -> None:
    files = sorted(SHARED.glob("*/*.json*"))
    if not files:
        pytest.skip(f"shared traces not found at {SHARED}")
    for f in files:
        assert head_rank(f, 8 << 30) == read_trace(f).meta["rank"], f.name
