"""Tile a real Kineto trace into a bigger one: N copies laid end to end in time.

Every copy shifts ``ts`` past the previous copy's end and offsets every id that tracekit, HTA
or a viewer might join on (correlation / External id / flow ``id``, Python id / parent id,
Sequence number, Record function id, Ev Idx) so that ids stay unique per copy, and renumbers
``ProfilerStep#N``. Metadata (``ph: M``) events are written once. The output is streamed, so
tiling to a few GB needs only the source trace in memory.

    python benchmarks/tile.py SRC.json.gz OUT.json --mb 250
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re

_CORR_KEYS = ("correlation", "External id")
_PY_KEYS = ("Python id", "Python parent id")
_OTHER_KEYS = ("Sequence number", "Record function id", "Ev Idx")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(path: str) -> dict:
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        return json.load(f)


def _max_int(values) -> int:
    return max((v for v in values if isinstance(v, int) and not isinstance(v, bool)), default=0)


def tile(src: str, out: str, copies: int | None = None, mb: float | None = None) -> dict:
    doc = _load(src)
    events = doc.pop("traceEvents")
    meta_ev = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    args = [e.get("args") or {} for e in body]
    corr_off = (
        max(_max_int(a.get(k) for a in args for k in _CORR_KEYS), _max_int(e.get("id") for e in body)) + 1
    )
    py_off = _max_int(a.get(k) for a in args for k in _PY_KEYS) + 1
    other_off = {k: _max_int(a.get(k) for a in args) + 1 for k in _OTHER_KEYS}
    steps = [int(m.group(1)) for e in body if (m := _STEP.match(str(e.get("name", ""))))]
    step_off = (max(steps) - min(steps) + 1) if steps else 0
    ts = [e["ts"] for e in body if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + (e.get("dur") or 0) for e in body if isinstance(e.get("ts"), (int, float))]
    span = int(max(ends) - min(ts)) + 1000  # whole microseconds: ns decimals stay as they are

    per_copy = len(json.dumps({"traceEvents": body}))
    if copies is None:
        copies = max(1, round((mb or 250) * 1e6 / per_copy))

    with open(out, "w") as f:
        head = dict(doc.items())
        f.write(json.dumps(head)[:-1] + (", " if head else "") + '"traceEvents": [\n')
        first = True
        for e in meta_ev:
            f.write(("" if first else ",\n") + json.dumps(e))
            first = False
        for k in range(copies):
            for e in body:
                if k:
                    e = dict(e)
                    if isinstance(e.get("ts"), (int, float)):
                        e["ts"] = e["ts"] + k * span
                    if isinstance(e.get("id"), int):
                        e["id"] = e["id"] + k * corr_off
                    m = _STEP.match(str(e.get("name", "")))
                    if m:
                        e["name"] = f"ProfilerStep#{int(m.group(1)) + k * step_off}"
                    a = e.get("args")
                    if a:
                        a = dict(a)
                        for key in _CORR_KEYS:
                            if isinstance(a.get(key), int):
                                a[key] += k * corr_off
                        for key in _PY_KEYS:
                            if isinstance(a.get(key), int) and a[key] >= 0:
                                a[key] += k * py_off
                        for key, off in other_off.items():
                            if isinstance(a.get(key), int) and a[key] >= 0:
                                a[key] += k * off
                        e["args"] = a
                f.write(("" if first else ",\n") + json.dumps(e))
                first = False
        f.write("\n]}\n")
    return {"copies": copies, "bytes": os.path.getsize(out), "events": len(meta_ev) + copies * len(body)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--copies", type=int)
    g.add_argument("--mb", type=float, default=250.0, help="target size in MB (1e6 bytes)")
    a = ap.parse_args()
    print(tile(a.src, a.out, copies=a.copies, mb=None if a.copies else a.mb))


if __name__ == "__main__":
    main()
