"""List the distinct device-kernel names of every ../shared trace with the CPU op that launched
them most often: the source of the labelled corpus tests/data/kernel_corpus.csv.

    python tests/kernel_names.py > /tmp/names.csv

Columns: trace, name, op (leaf launching op, "" when none), count, total_ms, group and
category the current rules give (a starting point for labelling by hand, never the label).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from shared_traces import shared_traces


def main() -> int:
    import tracekit

    out = csv.writer(sys.stdout)
    out.writerow(["trace", "name", "op", "count", "total_ms", "group", "category"])
    for src in shared_traces():
        a = tracekit.load(src, cache=False, jobs=1)
        for att in a.ranks.values():
            iv = att.intervals
            iv = iv[iv["group"].astype(str).isin(["compute", "comm"])]
            df = iv.assign(
                name=iv["name"].astype(str), op=iv["op"].astype(str), ms=(iv["end"] - iv["start"]) / 1e6
            )
            for name, g in df.groupby("name"):
                op = g["op"].value_counts().index[0]
                out.writerow(
                    [
                        src.name,
                        name,
                        op,
                        len(g),
                        round(g["ms"].sum(), 4),
                        g["group"].astype(str).iloc[0],
                        g["kernel_category"].astype(str).iloc[0],
                    ]
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
