"""The HTML report: self-contained, escaped, and rendered by a real headless browser.

The browser tests need Debian's chromium (``apt-get install -y chromium``; .ci/run installs
it) and skip with that reason when /usr/bin/chromium is absent.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from shared_traces import PAPER_MD

import tracekit
from tracekit.cli import main
from tracekit.render.html import render_report, script_json, write_report
from tracekit.testing import llama_training, write_trace

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium here (apt-get install -y chromium); the browser rendering test needs it",
)
EVIL = '</script><img src=x onerror="window.__pwned=1"><a href="javascript:alert(1)">k</a>'
# Chromium's own service traffic (component updates, account checks) that flags cannot stop.
BROWSER_HOSTS = re.compile(
    r"^https?://([a-z0-9-]+\.)*(google\.com|googleapis\.com|gvt1\.com|"
    r"gstatic\.com|googleusercontent\.com)(:\d+)?/"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """A report of a synthetic run in which trace-derived text is hostile: the file name, a
    kernel category (as a user's rule could name it) and a module name."""
    d = tmp_path_factory.mktemp("report")
    trace, _ = llama_training(n_steps=2, n_layers=2)
    path = write_trace(d / "run.json", trace)
    r = CliRunner().invoke(
        main, ["analyze", str(path), "--per-step", "--format", "html", "--out", str(d / "cli.html")]
    )
    assert r.exit_code == 0, r.output
    assert (d / "cli.html").stat().st_size > 3_000_000
    a = tracekit.load(path)
    tables = a.tables(per_step=True)
    k = tables["kernels"]
    k["category"] = k["category"].astype(object)
    k.loc[k.index[0], "category"] = EVIL
    m = tables["modules"]
    m["module"] = m["module"].astype(object)
    m.loc[m.index[0], "module"] = EVIL
    meta = {**a.meta, "path": EVIL}
    return write_report(meta, tables, d / "report.html")


def test_script_json_cannot_close_script():
    s = script_json({"k": "</script><!-- \u2028 & >"})
    assert "</" not in s and "<!--" not in s and "\u2028" not in s and "&" not in s
    assert json.loads(s) == {"k": "</script><!-- \u2028 & >"}


def test_report_is_self_contained_and_escaped(report):
    text = report.read_text()
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert "<script src" not in text and "cdn.plot.ly" not in text.split("<script>", 2)[-1]
    assert len(text) > 3_000_000  # plotly.js is inline
    # The hostile name appears only escaped: never as markup.
    assert EVIL not in text and "<img src=x" not in text
    assert html_escaped(EVIL) in text  # shown, as text, in the tables and the header
    # In chart data it is entity-escaped too, and no string can close the <script>.
    assert script_json(html_escaped(EVIL))[1:-1] in text


def html_escaped(s: str) -> str:
    import html

    return html.escape(s)


def test_compare_report(tmp_path):
    paths = []
    for att in ("eager", "sdpa"):
        trace, _ = llama_training(attention=att, n_steps=2, n_layers=1)
        paths.append(str(write_trace(tmp_path / f"{att}.json", trace)))
    from tracekit.compare import compare, compare_meta

    a, b = tracekit.load(paths[0]), tracekit.load(paths[1])
    text = render_report(compare_meta(a, b), compare(a, b))
    assert "Attention time, A vs B (Table VIII)" in text and "tracekit comparison" in text


def _chromium(*args: str, tmp: Path, timeout: int = 90) -> subprocess.CompletedProcess:
    profile = tmp / "profile"
    profile.mkdir(exist_ok=True)
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=8000",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _page_requests(netlog: Path) -> list[str]:
    urls = re.findall(r'"url":"([^"]+)"', netlog.read_text(errors="replace"))
    return sorted(
        {u for u in urls if u.startswith(("http:", "https:", "ws:", "wss:")) and not BROWSER_HOSTS.match(u)}
    )


@pytest.mark.browser
@needs_chromium
def test_report_renders_in_headless_chromium(report, tmp_path):
    url = report.resolve().as_uri()
    net = tmp_path / "net.json"
    dom = _chromium(f"--log-net-log={net}", "--dump-dom", url, tmp=tmp_path).stdout
    n = int(re.search(r'data-charts="(\d+)"', dom).group(1))
    assert n >= 5  # phases, exposed/idle, modules, kernels, timeline
    assert re.search(r'data-charts-rendered="(\d+)"', dom).group(1) == str(n)
    assert dom.count('class="main-svg"') >= n  # plotly drew an SVG per chart
    # The hostile kernel name made no element: no image, no javascript: link in the page.
    assert not re.search(r"<img[^>]*src=\"?x", dom) and not re.search(r'<a [^>]*href="javascript:', dom)
    assert _page_requests(net) == []

    png = tmp_path / "shot.png"
    _chromium("--hide-scrollbars", "--window-size=1400,1800", f"--screenshot={png}", url, tmp=tmp_path)
    from PIL import Image

    img = Image.open(png).convert("RGB")
    assert img.size == (1400, 1800)
    colours = img.resize((350, 450)).getcolors(maxcolors=1 << 16) or []
    # Bars in the palette's colours cover a visible part of the page (charts, not a blank page).
    blue = sum(
        c
        for c, rgb in colours
        if abs(rgb[0] - 0x4C) < 12 and abs(rgb[1] - 0x78) < 12 and abs(rgb[2] - 0xA8) < 12
    )
    assert blue > 0.01 * 350 * 450


@pytest.mark.browser
@needs_chromium
def test_network_check_can_fail(tmp_path):
    """The request check above sees a page's request (a control, so that check can fail)."""
    page = tmp_path / "net.html"
    page.write_text('<html><body><img src="http://198.51.100.7/x.png"></body></html>')
    net = tmp_path / "net.json"
    _chromium(f"--log-net-log={net}", "--dump-dom", page.as_uri(), tmp=tmp_path)
    assert any("198.51.100.7" in u for u in _page_requests(net))


def test_write_report_returns_path(tmp_path):
    trace, _ = llama_training(n_steps=1, n_layers=1)
    a = tracekit.load(write_trace(tmp_path / "t.json", trace))
    out = write_report(a.meta, a.tables(), tmp_path / "r.html")
    assert out.exists() and out.stat().st_size > 3_000_000


# --- --paper ------------------------------------------------------------------------------------


@pytest.mark.shared
def test_paper_values_match_the_paper_text():
    from tracekit.paper import paper_values

    v = paper_values()
    assert "2311.03687" in v["citation"] and "Zhang" in v["citation"]
    if not PAPER_MD.exists():
        pytest.skip("paper text not here (../shared/paper)")
    text = PAPER_MD.read_text()
    tabs = v["tables"]
    ph = {r["phase"]: r for r in tabs["phases"]["rows"]}
    assert (
        f"Overall (ms)\t{ph['forward']['wall_ms']}\t{ph['backward']['wall_ms']}\t{ph['optimizer']['wall_ms']}"
        in text
    )
    rc = {r["phase"]: r for r in tabs["phases_recomputation"]["rows"]}
    assert (
        f"Compute kernel (ms)\t{rc['forward']['compute_ms']}\t{rc['backward']['compute_ms']}\t{rc['optimizer']['compute_ms']}"
        in text
    )
    att = {r["phase"]: r for r in tabs["attention"]["rows"]}
    assert (
        f"Improvement(%)\t{att['forward']['improvement_pct']}\t{att['backward']['improvement_pct']}" in text
    )
    for r in tabs["modules"]["rows"]:
        assert f"\t{r['time_ms']}\t" in text or f"\t{r['time_ms']:.2f}\t" in text, r
    tl = {r["block"]: r for r in tabs["timeline"]["rows"]}
    assert f"32 x FFN\t\t{tl['ffn']['time_ms']}" in text
    k = {r["category"]: r for r in tabs["kernels"]["rows"] if r["group"] == "compute"}
    assert f"Triton\t\t{k['Triton']['time_ms']}\t\t{k['Triton']['percent']}" in text
    g = {r["phase"]: r for r in tabs["gemm"]["rows"]}
    assert f"Naive\t{g['forward']['percent']}%\t{g['backward']['percent']}%" in text


def test_paper_flag_adds_columns_and_citation(tmp_path):
    trace, _ = llama_training(n_steps=2, n_layers=1)
    path = write_trace(tmp_path / "t.json", trace)
    plain = json.loads(CliRunner().invoke(main, ["analyze", str(path), "--format", "json"]).stdout)
    r = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--paper"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "2311.03687" in doc["meta"]["paper"]["citation"]
    ph = {x["phase"]: x for x in doc["tables"]["phases"]}
    assert ph["forward"]["paper_wall_ms"] == 75.0 and ph["backward"]["paper_percent"] == 47.5
    # The user's own numbers are unchanged.
    assert [x["wall_ms"] for x in doc["tables"]["phases"]] == [
        x["wall_ms"] for x in plain["tables"]["phases"]
    ]
    mods = {(x["phase"], x["module"]): x for x in doc["tables"]["modules"]}
    assert mods[("forward", "MLP")]["paper_time_ms"] == 29.06
    assert mods[("forward", "Idle")]["paper_time_ms"] is None  # the paper has no such row
    assert doc["tables"]["memcpy"] == plain["tables"]["memcpy"]  # no paper counterpart
    html_out = tmp_path / "p.html"
    r = CliRunner().invoke(
        main, ["analyze", str(path), "--format", "html", "--paper", "--out", str(html_out)]
    )
    assert (
        r.exit_code == 0 and "paper_wall_ms" in html_out.read_text() and "2311.03687" in html_out.read_text()
    )


def test_compare_paper_table_viii(tmp_path):
    paths = []
    for att in ("eager", "sdpa"):
        trace, _ = llama_training(attention=att, n_steps=1, n_layers=1)
        paths.append(str(write_trace(tmp_path / f"{att}.json", trace)))
    r = CliRunner().invoke(main, ["compare", *paths, "--format", "json", "--paper"])
    assert r.exit_code == 0, r.output
    att = {x["phase"]: x for x in json.loads(r.stdout)["tables"]["attention"]}
    assert att["forward"]["paper_improvement_pct"] == 34.9 and att["backward"]["paper_b_ms"] == 2.07


@pytest.mark.browser
@needs_chromium
def test_multi_rank_report_renders_without_console_errors(tmp_path):
    """``analyze DIR --format html`` on a 2-rank run (it used to end in a traceback): every
    chart, the per-rank one included, renders, and the page logs no JavaScript error."""
    d = tmp_path / "z2"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_traces" / "tiny-zero2-2ranks", d)
    out = tmp_path / "z2.html"
    r = CliRunner().invoke(main, ["analyze", str(d), "--format", "html", "--out", str(out)])
    assert r.exit_code == 0, r.output
    run = _chromium("--enable-logging=stderr", "--v=0", "--dump-dom", out.resolve().as_uri(), tmp=tmp_path)
    n = int(re.search(r'data-charts="(\d+)"', run.stdout).group(1))
    assert n >= 6 and re.search(r'data-charts-rendered="(\d+)"', run.stdout).group(1) == str(n)
    assert "Step time per rank" in run.stdout
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console


@pytest.mark.browser
@needs_chromium
def test_console_check_can_fail(tmp_path):
    """The console check above sees a page's JavaScript error (a control)."""
    page = tmp_path / "err.html"
    page.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    run = _chromium("--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri(), tmp=tmp_path)
    assert any("Uncaught" in line for line in run.stderr.splitlines())
