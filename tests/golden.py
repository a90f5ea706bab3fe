"""The golden safety net: every table of every real trace, as JSON, held still through refactors.

    python tests/golden.py --update          # rewrite tests/golden/*.json from the current code
    python tests/golden.py --diff            # print what differs from the stored goldens

A commit that changes a golden on purpose names the rule that changed and why. The traces are
copied into a temporary directory first: nothing is ever written beside ../shared.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
SAMPLES = HERE.parent / "sample_traces"
sys.path.insert(0, str(HERE))

from shared_traces import shared_traces

#: Relative and absolute tolerance for a float to count as unchanged (ms).
REL, ABS = 1e-9, 1e-9


def sources() -> list[Path]:
    """Every real trace (../shared) and every sample run directory tracekit captured itself."""
    out = list(shared_traces())
    if SAMPLES.is_dir():
        out += sorted(p for p in SAMPLES.iterdir() if p.is_dir())
    return out


def golden_name(src: Path) -> str:
    kind = "sample" if src.parent == SAMPLES else src.parent.name
    return f"{kind}__{src.name.removesuffix('.gz').removesuffix('.json')}.json"


def snapshot(src: Path) -> dict:
    """All tables per step, plus the meta that describes them, of a copy of ``src``."""
    import tracekit

    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / src.name
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
        a = tracekit.load(dst, cache=False, jobs=1)
        tables = {
            name: json.loads(df.to_json(orient="records", double_precision=15))
            for name, df in a.tables(per_step=True).items()
        }
        meta = {k: v for k, v in a.meta.items() if k not in ("path", "files")}
        meta = json.loads(json.dumps(meta, default=str).replace(tmp, "<tmp>"))
    return {"meta": meta, "tables": tables}


def diff(old, new, where: str = "") -> list[str]:
    """Human-readable differences between two JSON values (floats within REL/ABS are equal)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{where}.{k}: removed" for k in old.keys() - new.keys()]
        out += [f"{where}.{k}: added" for k in new.keys() - old.keys()]
        for k in old.keys() & new.keys():
            out += diff(old[k], new[k], f"{where}.{k}")
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where}: {len(old)} rows -> {len(new)} rows"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in diff(a, b, f"{where}[{i}]")]
    if isinstance(old, float) or isinstance(new, float):
        if (
            isinstance(old, (int, float))
            and isinstance(new, (int, float))
            and math.isclose(old, new, rel_tol=REL, abs_tol=ABS)
        ):
            return []
    elif old == new:
        return []
    return [f"{where}: {old!r} -> {new!r}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="rewrite the golden files")
    ap.add_argument("--diff", action="store_true", help="print differences (default)")
    ap.add_argument("filter", nargs="?", default="", help="only sources whose name contains this")
    args = ap.parse_args(argv)
    GOLDEN.mkdir(exist_ok=True)
    changed = 0
    for src in sources():
        if args.filter not in src.name:
            continue
        path = GOLDEN / golden_name(src)
        new = snapshot(src)
        if args.update:
            path.write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
            continue
        old = json.loads(path.read_text()) if path.exists() else {}
        d = diff(old, new)
        if d:
            changed += 1
            print(f"{path.name}: {len(d)} differences", *d[:20], sep="\n  ")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())
