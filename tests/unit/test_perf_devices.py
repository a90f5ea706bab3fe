"""Device peaks: every device name of the shared traces matches its row or none, never a guess;
a user's TOML and explicit values override the table."""

from __future__ import annotations

import pytest

from tracekit.errors import TraceError
from tracekit.perf import devices

#: Every deviceProperties name in ../shared/traces, with the row it must match ("" none).
SHARED_NAMES = {
    "NVIDIA B200": "NVIDIA B200 (HGX)",
    "AMD Instinct MI300X": "AMD Instinct MI300X",
    "AMD Instinct MI210": "AMD Instinct MI210",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 SXM4 80GB",
    "NVIDIA A100-PG509-200": "NVIDIA A100 SXM4 40GB",
    "Tesla V100-SXM2-32GB": "NVIDIA V100 SXM2",
    "Tesla V100-SXM2-16GB": "NVIDIA V100 SXM2",
    "Tesla V100-DGXS-32GB": "NVIDIA V100 SXM2",
    "AMD Radeon Graphics": "",  # an MI250 die or an MI210 (64 GB, 104 CUs): ambiguous
    "ARTEMIS": "",  # an MTIA accelerator
}
#: Real names of the other devices the table covers.
OTHER_NAMES = {
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM5 80GB",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe 80GB",
    "NVIDIA H200": "NVIDIA H200 SXM 141GB",
    "NVIDIA A800-SXM4-80GB": "NVIDIA A800 SXM4 80GB",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 SXM4 40GB",
    "NVIDIA L40S": "NVIDIA L40S",
    "AMD Instinct MI250X": "AMD Instinct MI250X (one GCD)",
    "AMD Instinct MI325X": "AMD Instinct MI325X",
}


@pytest.mark.parametrize("name,row", sorted({**SHARED_NAMES, **OTHER_NAMES}.items()))
def test_device_names_match_their_row_or_none(name: str, row: str) -> None:
    got = devices.resolve([name])
    assert got.row == row
    assert bool(got.notice) == (row == "")


def test_known_peaks_are_dense() -> None:
    h100 = devices.resolve(["NVIDIA H100 80GB HBM3"])
    assert h100.flops_peak("bf16") == 989.4e12 and h100.bytes_peak() == 3.35e12
    assert devices.resolve(["AMD Instinct MI300X"]).tflops["bf16"] == 1307.4
    assert devices.resolve(["Tesla V100-SXM2-32GB"]).flops_peak("bf16") is None  # V100: no bf16


def test_a_name_like_a_known_one_is_not_guessed() -> None:
    for name in ("NVIDIA H100", "H100 80GB HBM3", "NVIDIA H100 80GB HBM3e", "AMD Instinct MI300"):
        assert devices.resolve([name]).row == ""


def test_case_and_spacing_do_not_matter_but_mixed_devices_are_ambiguous() -> None:
    assert devices.resolve(["nvidia  h100 80gb hbm3"]).row == "NVIDIA H100 SXM5 80GB"
    mixed = devices.resolve(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])
    assert mixed.row == "" and "different devices" in mixed.notice


def test_explicit_values_override_the_table(tmp_path) -> None:
    got = devices.resolve(["NVIDIA H100 80GB HBM3"], peak_tflops="bf16=800", peak_bandwidth=3.0)
    assert got.tflops["bf16"] == 800 and got.tflops["fp8"] == 1978.9 and got.tbps == 3.0
    every = devices.resolve(["ARTEMIS"], peak_tflops="100")
    assert every.flops_peak("fp32") == 100e12 and every.flops_peak("bf16") == 100e12 and every.notice == ""


def test_a_user_table_is_tried_first(tmp_path) -> None:
    f = tmp_path / "mine.toml"
    f.write_text(
        '[[device]]\nname = "my H100"\nmatch = ["NVIDIA H100 80GB HBM3", "ARTEMIS"]\n'
        'tflops = { bf16 = 700 }\ntbps = 3.0\nsource = "measured"\n'
    )
    assert devices.resolve(["NVIDIA H100 80GB HBM3"], devices_file=str(f)).tflops == {"bf16": 700}
    assert devices.resolve(["ARTEMIS"], devices_file=str(f)).row == "my H100"


@pytest.mark.parametrize(
    "text",
    [
        "not toml [",
        '[[device]]\nmatch = ["x"]\n',
        '[[device]]\nname = "x"\nmatch = ["x"]\ntflops = { bf17 = 1 }\n',
        '[[device]]\nname = "x"\nmatch = ["x"]\ntflops = { bf16 = -1 }\n',
        '[[device]]\nname = "x"\nmatch = ["x"]\ntbps = "fast"\n',
        "device = 3\n",
    ],
)
def test_a_bad_user_table_is_one_line_error(tmp_path, text: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(TraceError) as e:
        devices.resolve(["x"], devices_file=str(f))
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("text", ["abc", "bf16=x", "bf17=3", "-5", "0"])
def test_bad_peak_values_are_errors(text: str) -> None:
    with pytest.raises(TraceError):
        devices.parse_tflops(text)
