"""One op, one module (issue 28 item 8): the backward of a forward op is charged to the module
category its forward got, however the trace links them and however the op sits in its layer.

Planted: an OPT decoder layer (fc1, activation, fc2 directly under ``OPTDecoderLayer``), run
forward then backward, with the activation as an ``nn.ReLU`` module (current transformers) or
as a plain function called by the layer (older transformers' ``ACT2FN``: the op sits directly
in the decoder layer), and the node linked by ``fwdbwd`` flows, by sequence number only, or by
neither (the legacy profiler). Every linked backward kernel must land in the row of its
creator's forward kernel; the activation module is MLP, the bare function Other, both ways.
With no link at all the backward has no forward op, so it is Other (docs/metrics.md).
"""

from __future__ import annotations

import pytest

import tracekit
from tracekit.testing import TraceBuilder
from tracekit.testing.kernels import GEMM_A, GEMM_NN, K_ADD

LINKS = {
    "flows": {"flows": True},
    "sequence-number": {"flows": False},
    "legacy": {"legacy": True},
}


def _opt_layer(b: TraceBuilder, activation_module: bool) -> list:
    """Forward of one OPT layer's FFN, then its backward; the (forward, backward) kernel names."""
    pairs = []
    with b.step():
        with b.forward(), b.module("OPTDecoderLayer", "model.decoder.layers.0"):
            with b.module("Linear", "model.decoder.layers.0.fc1"):
                fc1 = b.kernel(GEMM_A, dur_us=30, op="aten::addmm")
            if activation_module:
                with b.module("ReLU", "model.decoder.layers.0.activation_fn"):
                    act = b.kernel(K_ADD, dur_us=7, op="aten::relu")
            else:
                act = b.kernel(K_ADD, dur_us=7, op="aten::relu")
            with b.module("Linear", "model.decoder.layers.0.fc2"):
                fc2 = b.kernel(GEMM_A, dur_us=31, op="aten::addmm")
        with b.backward():
            for fwd, name, op in (
                (fc2, GEMM_NN, "aten::mm"),
                (act, K_ADD, "aten::threshold_backward"),
                (fc1, GEMM_NN, "aten::mm"),
            ):
                back = b.kernel(name, dur_us=9, op=op, creator=fwd)
                pairs.append((fwd.activity.name, fwd.start, back.start))
    return pairs


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("activation_module", [True, False], ids=["nn.ReLU", "functional"])
def test_backward_takes_the_module_of_its_forward(tmp_path, link, activation_module):
    b = TraceBuilder(**LINKS[link])
    pairs = _opt_layer(b, activation_module)
    iv = tracekit.load(b.write(tmp_path / "opt.json"), cache=False, jobs=1).intervals
    row = dict(zip(iv["start"].to_numpy().tolist(), iv["module"].astype(str)))
    phase = dict(zip(iv["start"].to_numpy().tolist(), iv["phase"].astype(str)))
    for name, fwd_start, back_start in pairs:
        assert phase[fwd_start] == "forward" and phase[back_start] == "backward", (name, link)
        want = "Other" if link == "legacy" else row[fwd_start]
        assert row[back_start] == want, (name, link, row[fwd_start], row[back_start])
    act_row = row[pairs[1][1]]
    assert act_row == ("MLP" if activation_module else "Other"), act_row
    assert row[pairs[0][1]] == row[pairs[2][1]] == "MLP"
