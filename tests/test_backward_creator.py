"""Backward nodes link to their creator: the fwdbwd flow's start where the trace has flows, else
the LAST forward op with the node's Sequence number (issue 12, item 2).

An input ``aten::to`` outside the model carries the same Sequence number as the embedding that
creates the node; linking to the FIRST op with that number put backward Embedding work in Other.
"""

from __future__ import annotations

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, K_EMB_BW, K_INDEX

US = 1e-3


def _plant(tmp_path, flows: bool):
    b = TraceBuilder(flows=flows)
    with b.step():
        seq = b._seq  # the number the embedding's node will carry
        with b.w.rng_(b.w.main, "aten::to", "cpu_op", args={"Sequence number": seq, "Fwd thread id": 0}):
            b.cpu(1)
        with b.module("Embedding", "model.embed_tokens"):
            emb = b.kernel(K_INDEX, 5, op="aten::embedding")
        with b.module("Linear", "lm_head"):
            mm = b.kernel(GEMM_A, 10, op="aten::mm")
        with b.backward():
            b.kernel(GEMM_A, 20, op="aten::mm", creator=mm)
            b.kernel(K_EMB_BW, 7, op="aten::embedding_dense_backward", creator=emb)
    assert emb.op.seq == seq
    return b.write(tmp_path / f"creator_{flows}.json")


@pytest.mark.parametrize("flows", [False, True], ids=["sequence-number", "fwdbwd-flow"])
def test_backward_embedding_goes_to_its_creator(tmp_path, flows):
    a = tracekit.load(_plant(tmp_path, flows), cache=False, jobs=1)
    m = a.table("modules")
    bwd = m[m["phase"] == "backward"].set_index("module")["time_ms"]
    assert bwd["Embedding"] == pytest.approx(7 * US, abs=1e-9)
    assert bwd["Other"] == pytest.approx(20 * US, abs=1e-9)  # the mm outside any category
    iv = a.ranks[0].intervals
    emb = iv[iv["name"].astype(str) == K_EMB_BW].iloc[0]
    assert str(emb["fwd_op"]) == "aten::embedding"
    assert str(emb["bwd_link"]) == ("flow" if flows else "seq")
