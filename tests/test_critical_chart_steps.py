"""The critical-path timeline's step menu (issue 35, the HTML report): each rank's chart offers
up to MAX_STEPS of its steps (spread evenly, first and last included) in a dropdown, each step
drawn from exactly its rows of ``critical_path_timeline``, at most STEP_BARS bars a step."""

from __future__ import annotations

import re
import shutil

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from test_charts import check_charts, read_figures
from test_critical_path import _build
from test_report import _chromium, needs_chromium

from tracekit.cli import main
from tracekit.render.critical_chart import MAX_STEPS, STEP_BARS, critical_charts, fitted, offered
from tracekit.render.html import render_report

NAME = "critical_path_timeline"


def _rows(steps, kinds=(("cpu", 0.0, 1.0), ("kernel", 1.0, 3.5))) -> pd.DataFrame:
    rows = [
        {"rank": 0, "step": s, "kind": k, "phase": "forward", "module": "Linear", "start_ms": a, "end_ms": b}
        for s in steps
        for k, a, b in kinds
    ]
    return pd.DataFrame(rows).assign(pieces=1)


def test_the_steps_offered():
    assert offered(list(range(5))) == list(range(5))
    assert offered(list(range(MAX_STEPS))) == list(range(MAX_STEPS))
    many = offered(list(range(100, 157)))
    assert len(many) == MAX_STEPS and many[0] == 100 and many[-1] == 156
    assert many == sorted(set(many))


def test_one_dropdown_button_per_step_each_showing_its_own_bars():
    steps = [7, 3, 5]
    ((_, fig),) = critical_charts(_rows(steps))
    assert fig["meta"]["bars"]["steps"] == [3, 5, 7] and fig["meta"]["bars"]["step"] == 3
    (menu,) = fig["layout"]["updatemenus"]
    assert [b["label"] for b in menu["buttons"]] == ["step 3", "step 5", "step 7"]
    for b, step in zip(menu["buttons"], [3, 5, 7]):
        visible, look = b["args"]
        assert visible["visible"] == [t["meta"]["step"] == step for t in fig["data"]]
        assert f"step {step}" in look["title.text"] and look["yaxis.categoryarray"] == ["cpu", "kernel"]
    assert [t["visible"] for t in fig["data"]] == [True, True, False, False, False, False]
    one = critical_charts(_rows([4]))[0][1]
    assert "updatemenus" not in one["layout"]  # one step: nothing to pick


def test_many_steps_offer_at_most_the_bound_and_say_so():
    fig = critical_charts(_rows(range(60)))[0][1]
    assert len(fig["layout"]["updatemenus"][0]["buttons"]) == MAX_STEPS
    assert len(fig["data"]) == 2 * MAX_STEPS
    assert f"{MAX_STEPS} of 60 steps in the menu" in fig["layout"]["title"]["text"]


def test_a_full_series_step_is_thinned_to_the_bar_budget():
    n = 3 * STEP_BARS
    edges = np.arange(n + 1) * 0.01
    kinds = np.array(["cpu", "kernel", "idle"])[np.arange(n) % 3]
    rows = pd.DataFrame({"rank": 0, "step": 1, "kind": kinds, "phase": "forward", "module": "Linear"}).assign(
        start_ms=edges[:-1], end_ms=edges[1:], pieces=1
    )
    rows.loc[5, "end_ms"] = rows.loc[5, "start_ms"] + 0.5  # a long one, kept
    rows.loc[6:, ["start_ms", "end_ms"]] += 0.49
    thin = fitted(rows)
    assert len(thin) <= STEP_BARS and thin["pieces"].sum() == n
    assert thin["start_ms"].iloc[0] == 0 and thin["end_ms"].iloc[-1] == pytest.approx(rows["end_ms"].iloc[-1])
    assert np.allclose(thin["start_ms"].to_numpy()[1:], thin["end_ms"].to_numpy()[:-1])
    fig = critical_charts(rows)[0][1]
    assert fig["meta"]["bars"]["thinned"] == [1] and "thinned" in fig["layout"]["title"]["text"]
    assert check_charts({NAME: rows}, render_report({}, {NAME: rows})) == len(thin)


def test_the_report_checks_every_offered_step(tmp_path):
    _, _, a, _ = _build(tmp_path, "item")
    tables = a.tables()
    page = render_report(a.meta, tables)
    fig = {f["name"]: f["fig"] for f in read_figures(page)}["critical-timeline"]
    assert fig["meta"]["bars"]["steps"] == [1, 2, 3]
    assert check_charts(tables, page) > 0


#: After the charts render, press the timeline's last menu button (Plotly's own update, as a
#: click does) and record the title and the visible bars' steps on the body.
PRESS = """<script>
(function(){
  function press(){
    var el = document.querySelector('.js-plotly-plot .updatemenu-container') && document.querySelectorAll('.chart');
    if (!document.body.getAttribute('data-charts-rendered') || !el) { return setTimeout(press, 50); }
    var gd = Array.prototype.filter.call(el, function(c){ return c.layout && c.layout.updatemenus; })[0];
    var b = gd.layout.updatemenus[0].buttons; var last = b[b.length - 1];
    Plotly.update(gd, last.args[0], last.args[1]).then(function(){
      var shown = gd.data.filter(function(t){ return t.visible !== false; }).map(function(t){ return t.meta.step; });
      document.body.setAttribute('data-pressed', gd.layout.title.text + ' | ' + shown.join(','));
    });
  }
  press();
})();
</script></body>"""


def _press_and_dump(html_path, tmp_path):
    page = html_path.read_text()
    html_path.write_text(page.replace("</body>", PRESS, 1))
    return _chromium(
        "--enable-logging=stderr", "--v=0", "--dump-dom", html_path.resolve().as_uri(), tmp=tmp_path
    )


@pytest.mark.browser
@needs_chromium
def test_the_menu_renders_and_switches_steps_in_headless_chromium(tmp_path):
    _build(tmp_path, "optimizer")
    out = tmp_path / "report.html"
    trace = str(tmp_path / "optimizer.pt.trace.json")
    r = CliRunner().invoke(main, ["analyze", trace, "--no-cache", "--format", "html", "--out", str(out)])
    assert r.exit_code == 0, r.output
    run = _press_and_dump(out, tmp_path)
    n = int(re.search(r'data-charts="(\d+)"', run.stdout).group(1))
    assert re.search(r'data-charts-rendered="(\d+)"', run.stdout).group(1) == str(n)
    assert "updatemenu-container" in run.stdout
    pressed = re.search(r'data-pressed="([^"]*)"', run.stdout).group(1)
    assert "step 3" in pressed and pressed.endswith(
        "| " + ",".join(["3"] * pressed.split("| ")[1].count("3"))
    )
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console


@pytest.mark.shared
@pytest.mark.browser
@needs_chromium
def test_a_real_trace_renders_its_step_menu(tmp_path):
    from shared_traces import shared_traces

    real = [p for p in shared_traces() if "resnet50" in p.name]
    if not real:
        pytest.skip("../shared/traces absent")
    shutil.copy(real[0], tmp_path / real[0].name)
    out = tmp_path / "report.html"
    r = CliRunner().invoke(
        main, ["analyze", str(tmp_path / real[0].name), "--no-cache", "--format", "html", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    fig = {f["name"]: f["fig"] for f in read_figures(out.read_text())}["critical-timeline"]
    steps = fig["meta"]["bars"]["steps"]
    assert len(steps) > 1
    run = _press_and_dump(out, tmp_path)
    assert re.search(r'data-charts-rendered="(\d+)"', run.stdout).group(1) == re.search(
        r'data-charts="(\d+)"', run.stdout
    ).group(1)
    pressed = re.search(r'data-pressed="([^"]*)"', run.stdout).group(1)
    assert f"step {steps[-1]}" in pressed and set(pressed.split("| ")[1].split(",")) == {str(steps[-1])}
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == [], console
