"""Print docs/peers.md's table: tracekit vs HolisticTraceAnalysis on every shared GPU trace.

python benchmarks/peers_table.py ../shared/traces > /tmp/peers_table.md
"""

from __future__ import annotations

import logging
import sys
import warnings
from pathlib import Path

import tracekit
from tracekit.peers import hta_numbers, tracekit_like_hta


def main(root: str) -> None:
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    keys = ["idle_us", "compute_us", "non_compute_us", "comm_comp_overlap_pct"]
    print("| trace | " + " | ".join(f"{k} tracekit / HTA" for k in keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for f in sorted(Path(root).glob("*/*.json*")):
        a = tracekit.load(f)
        if a.mode != "gpu":
            continue
        ours = tracekit_like_hta(a)
        try:
            theirs = hta_numbers(f)
        except Exception as e:  # HTA's own failures are part of the comparison
            print(f"| {f.parent.name}/{f.name} | HTA failed: {type(e).__name__} | | | |")
            continue
        cells = [f"{ours[k]:,.1f} / {theirs[k]:,.1f}" for k in keys]
        print(f"| {f.parent.name}/{f.name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces")
