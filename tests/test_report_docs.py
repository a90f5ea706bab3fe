"""Issue 38.15 (part): reports are readable by others (0644 under umask 022, the write still
atomic), ``--warmup`` shows its default, and docs/cli.md labels no rate column "sum per step"."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import click

from tracekit import safewrite

ROOT = Path(__file__).resolve().parents[1]


def test_reports_are_readable_by_others(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        f = safewrite.write_text(tmp_path / "report.md", "x")
        assert stat.S_IMODE(f.stat().st_mode) == 0o644
        os.chmod(f, 0o600)  # a file replaced keeps its mode
        safewrite.write_text(f, "y")
        assert stat.S_IMODE(f.stat().st_mode) == 0o600 and f.read_text() == "y"
        paths = safewrite.write_members(tmp_path / "csv", {"a.csv": lambda fh: fh.write(b"1")})
        assert stat.S_IMODE((tmp_path / "csv").stat().st_mode) == 0o755
        assert stat.S_IMODE(paths[0].stat().st_mode) == 0o644
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_warmup_help_shows_its_default() -> None:
    from capture.options import COMMON_OPTIONS

    cmd = click.Command("x", callback=lambda **_: None)
    for opt in COMMON_OPTIONS:
        cmd = opt(cmd)
    warmup = next(p for p in cmd.params if p.name == "warmup")
    assert "[default: 2 for train and sweep, 1 for infer]" in (warmup.help or "")


def test_cli_md_labels_no_rate_column_sum_per_step() -> None:
    rows = [ln for ln in (ROOT / "docs/cli.md").read_text().splitlines() if ln.endswith("| sum per step |")]
    units = {ln.split("|")[4].strip() for ln in rows}
    assert not units & {"TFLOP/s", "TB/s", "FLOP/B", "us", "label"}, units
    assert (
        "| `tflops` | TFLOP/s | derived after the mean: `total_gflop` / `time_ms` |"
        in (ROOT / "docs/cli.md").read_text()
    )
