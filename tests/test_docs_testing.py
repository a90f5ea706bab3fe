"""docs/testing.md's example runs as written (in a temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "testing.md"


def test_the_documented_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert blocks, "docs/testing.md has no python example"
    monkeypatch.chdir(tmp_path)
    tests = {}
    for code in blocks:
        namespace: dict = {"__name__": "__doc_example__"}
        exec(compile(code, "<docs/testing.md>", "exec"), namespace)
        tests.update({k: v for k, v in namespace.items() if k.startswith("test_")})
    assert (tmp_path / "rank0.pt.trace.json").is_file()
    assert tests, "the hypothesis example defines no test"
    for test in tests.values():
        test()  # hypothesis runs it over its examples
