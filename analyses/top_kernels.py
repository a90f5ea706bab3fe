"""Top kernels: the device activities that take the most time, by kernel name.

Per step and (name, category, module, phase) of the complete steps' device activities:

* ``count``: how many ran; ``total_ms``: sum of their durations (overlap included);
* ``mean_us``: total_ms / count, in microseconds (a ratio of the step means);
* ``percent``: total_ms / the total of all rows x 100: the row's share of the device time
  (sum of durations) of the activities the table covers; the rows add up to 100.

``category`` is the kernel category (Table X), ``module`` the module category of the launching
op (Table VI), ``phase`` the launching op's phase. Each step keeps its :data:`KEEP` largest rows
and one ``(other kernels)`` row for the rest, so the rows still add up to all device time.
Rows are sorted by ``total_ms``; files keep full names, the terminal shows the top 20 with names
shortened by :func:`short_name` (``--wide``: full names).
"""

from __future__ import annotations

import re

import pandas as pd

from tracekit.pipeline.windows import Windows

from ._common import as_text, narrow, sums, text
from ._registry import COUNT, MS, PCT, US, Ratio, register

#: Rows kept per step; the rest are summed into one "(other kernels)" row.
KEEP = 50
OTHER = "(other kernels)"
#: Display length of a shortened kernel name.
SHORT = 60
_PRIMITIVE = {
    "int",
    "unsigned",
    "long",
    "float",
    "double",
    "char",
    "bool",
    "short",
    "void",
    "signed",
    "const",
    "half",
    "true",
    "false",
    "at",
    "c10",
    "std",
    "detail",
    "native",
}


def _outline(s: str) -> tuple[str, list[str]]:
    """``s`` with each outermost ``<...>`` replaced by ``\x00i\x00`` and the texts inside."""
    out: list[str] = []
    inner: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in s:
        if ch == "<":
            depth += 1
            if depth == 1:
                continue
        elif ch == ">" and depth:
            depth -= 1
            if depth == 0:
                out.append(f"\x00{len(inner)}\x00")
                inner.append("".join(cur))
                cur = []
                continue
        (cur if depth else out).append(ch)
    return "".join(out), inner


def _cut_arguments(s: str) -> str:
    """``s`` without its trailing ``(...)`` argument list."""
    if not s.endswith(")"):
        return s
    depth = 0
    for i in range(len(s) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(s[i], 0)
        if depth == 0:
            return s[:i].rstrip()
    return s


def short_name(name: str) -> str:
    """A kernel name for display: no return type, argument list or namespaces; template
    arguments reduced to the first named type (``multimem_all_reduce_kernel<BFloat16>``).
    Names that are not C++ signatures (``Memcpy DtoD (Device -> Device)``, ``nvjet_...``) are
    kept, cut to :data:`SHORT` characters."""
    s = str(name).strip()
    if "<" in s or "::" in s:
        s = re.sub(r"^void\s+", "", s.replace("(anonymous namespace)::", ""))
        outer, inner = _outline(s)
        outer = _cut_arguments(outer)
        last = outer.split()[-1] if outer.split() else outer
        last = last.rsplit("::", 1)[-1] or last
        m = re.search(r"\x00(\d+)\x00", last)
        base = re.sub(r"\x00\d+\x00", "", last)
        named = []
        if m:
            words = [w.rsplit("::", 1)[-1] for w in re.findall(r"[A-Za-z_][\w:]*", inner[int(m.group(1))])]
            named = [w for w in words if w.lower() not in _PRIMITIVE and len(w) > 2]
        s = f"{base}<{named[0]}>" if named else base or s
    elif re.match(r"^[\w.$]+\(", s):  # a C signature: name(args)
        s = _cut_arguments(s)
    return s if len(s) <= SHORT else s[: SHORT - 1] + "\u2026"


def _finish(df: pd.DataFrame) -> pd.DataFrame:
    """Largest total first."""
    by = [c for c in ("rank", "step", "stage") if c in df.columns]
    return df.sort_values(by + ["total_ms"], ascending=[True] * len(by) + [False], kind="stable").reset_index(
        drop=True
    )


def _keep_top(rows: pd.DataFrame) -> pd.DataFrame:
    """Each step's :data:`KEEP` largest rows, and the rest summed into one row."""
    rank = rows.groupby("step")["total_ms"].rank(method="first", ascending=False)
    top, rest = rows[(rank <= KEEP).to_numpy()], rows[(rank > KEEP).to_numpy()]
    if rest.empty:
        return top
    other = sums(rest, "step", {"count": "count", "total_ms": "total_ms"}, sort=False)
    other = other.reset_index().assign(name=OTHER, category="", module="", phase="")
    return pd.concat([top, other[top.columns]], ignore_index=True)


COLUMNS = ["step", "name", "category", "module", "phase", "count", "total_ms"]


@register(
    "top_kernels",
    title="Top kernels",
    keys=("name", "category", "module", "phase"),
    values={"count": COUNT, "total_ms": MS, "mean_us": US, "percent": PCT},
    ratios={
        "mean_us": Ratio("total_ms", "count", scale=1000.0),
        "percent": Ratio("total_ms", "total_ms", within=()),
    },
    finish=_finish,
    filters=frozenset({"phase", "module"}),
    top=20,
    sort_by="total_ms",
    shorten={"name": short_name},
    chart="bar",
)
def table(intervals: pd.DataFrame, windows: Windows) -> pd.DataFrame:
    used = ["step", "name", "kernel_category", "module", "phase", "start", "end", "count"]
    iv = narrow(intervals, used, intervals["step"].isin(windows.steps["step"]).to_numpy())
    if iv.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame = pd.DataFrame(
        {
            "step": iv["step"].to_numpy(),
            "name": text(iv["name"]),
            "category": text(iv["kernel_category"]),
            "module": text(iv["module"], {"": "Other"}),
            "phase": text(iv["phase"], {"": "unattributed"}),
            "dur": (iv["end"] - iv["start"]).to_numpy() / 1e6,
            "count": iv["count"].to_numpy(),
        }
    )
    keys = ["step", "name", "category", "module", "phase"]
    out = sums(frame, keys, {"count": "count", "total_ms": "dur"}, sort=False, observed=True).reset_index()
    out = as_text(out, ["name", "category", "module", "phase"])
    out = _keep_top(out)
    out["count"] = out["count"].astype("int64")
    return _finish(out)[COLUMNS]
