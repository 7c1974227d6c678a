"""The report in a real browser: headless Chromium from the system's packages, driven by Playwright.

For the sample run of the README and a comparison of Gödel, peer and Omega runs: the page loads
without a console error, makes no network request, draws every figure (as many plot elements as
the figure has series, each with data), its overview shows the DuckDB queries' numbers, and a
screenshot is written.  Playwright must not download a browser of its own: it launches
REPLAY_CHROMIUM (default /usr/bin/chromium, Debian's `chromium` package).  Without both, the tests
skip, except when REPLAY_BROWSER_TESTS=required (CI's report stage), where that is a failure.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from replay.api import run_replay
from replay.engine.config import load_config
from replay.report import write_report

from conftest import SAMPLE_TRACE
from report_checks import QueryAnswers, same_number

CHROMIUM = os.environ.get("REPLAY_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
# Where to keep the screenshots besides the test's folder (docs/ keeps one: README shows it)
SCREENSHOTS = os.environ.get("REPLAY_SCREENSHOTS")


def missing(reason: str):
    if os.environ.get("REPLAY_BROWSER_TESTS") == "required":
        pytest.fail(f"browser tests are required here: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("playwright is not installed (pip install playwright; it drives the system's "
                "Chromium)")
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        missing(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set REPLAY_CHROMIUM)")
    pytest.importorskip("plotly", reason="the report extra is not installed")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def sample_runs(tmp_path_factory):
    """The README's run (the sample through Gödel, bin-packing), then peer and Omega."""
    folder = tmp_path_factory.mktemp("runs")
    made = {}
    for model, params in (("godel", ["policy=most-allocated"]), ("peer", []), ("omega", [])):
        out = folder / f"sample-{model}"
        run_replay(SAMPLE_TRACE, load_config(model=model, overrides=params), out=out)
        made[model] = out
    return made


FIGURES_JS = """() => [...document.querySelectorAll('div.figure')].map(div => ({
    id: div.id,
    declared: Number(div.dataset.traces),
    plotted: div.classList.contains('js-plotly-plot'),
    traces: (div.data || []).map(t => ({
        type: t.type,
        points: t.type === 'heatmap' ? (t.z || []).flat().filter(v => v !== null).length
                                     : (t.y || []).filter(v => v !== null).length})),
    drawn: div.querySelectorAll('g.trace, g.hm').length,
    svg: div.querySelectorAll('svg.main-svg').length}))"""

NUMBERS_JS = """() => [...document.querySelectorAll('#table-headline td.number')].map(td => ({
    source: td.title, value: td.dataset.value, text: td.textContent}))"""


def open_report(browser, path: Path, screenshot: Path) -> dict:
    """Load the page; what it logged, requested and drew."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors, requests = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("requestfailed", lambda r: errors.append(f"failed: {r.url}"))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function("() => document.querySelectorAll('div.figure').length === "
                           "document.querySelectorAll('div.figure.js-plotly-plot').length")
    seen = {"errors": errors, "requests": requests, "figures": page.evaluate(FIGURES_JS),
            "numbers": page.evaluate(NUMBERS_JS),
            "sections": page.evaluate("() => [...document.querySelectorAll('section')]"
                                      ".map(s => s.id)")}
    page.screenshot(path=str(screenshot), full_page=True)
    page.close()
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        shutil.copy(screenshot, Path(SCREENSHOTS) / screenshot.name)
    return seen


def check_page(seen: dict, path: Path, run_dirs: list[Path], sections: list[str]) -> None:
    assert seen["errors"] == []
    assert seen["requests"] == [path.as_uri()]  # the page itself, nothing else
    assert seen["sections"] == sections
    assert seen["figures"], "no figure"
    for figure in seen["figures"]:
        assert figure["plotted"] and figure["svg"] > 0, figure["id"]
        assert len(figure["traces"]) == figure["declared"] == figure["drawn"], figure
        assert all(trace["points"] > 0 for trace in figure["traces"]), figure["id"]
    answers = QueryAnswers(run_dirs)
    assert len(seen["numbers"]) >= 15 * len(run_dirs)
    for number in seen["numbers"]:
        expected = answers.value(number["source"])
        assert same_number(number["value"], expected), number


def figure(seen: dict, key: str) -> dict:
    return next(f for f in seen["figures"] if f["id"] == f"fig-{key}")


def test_the_sample_report_in_a_browser(browser, sample_runs, tmp_path):
    run = sample_runs["godel"]
    out = tmp_path / "report.html"
    write_report([str(run)], out)
    seen = open_report(browser, out, tmp_path / "report-sample-godel.png")
    check_page(seen, out, [run], ["overview", "delay", "timeline", "conflicts", "capacity"])
    answers = QueryAnswers([run])
    roles = answers.answer("delay_cdf")["watcher_role"].unique().to_list()
    assert len(figure(seen, "delay-cdf")["traces"]) == len(roles) == 4
    assert len(figure(seen, "delay-stages")["traces"]) == 6  # one per pipeline stage
    assert len(figure(seen, "delay-timeline")["traces"]) == 2 * len(roles)  # p50 and p99
    assert len(figure(seen, "capacity-nodes")["traces"]) == 1
    assert figure(seen, "capacity-nodes")["traces"][0]["points"] == answers.answer(
        "stale_capacity_by_node").height
    assert (tmp_path / "report-sample-godel.png").stat().st_size > 10_000


def test_a_comparison_of_godel_peer_and_omega_in_a_browser(browser, sample_runs, tmp_path):
    runs = [sample_runs[m] for m in ("godel", "peer", "omega")]
    out = tmp_path / "compare.html"
    write_report([str(r) for r in runs], out)
    seen = open_report(browser, out, tmp_path / "report-compare.png")
    check_page(seen, out, runs, ["overview", "delay", "timeline", "conflicts", "capacity"])
    answers = QueryAnswers(runs)
    pairs = answers.answer("delay_cdf").select("run", "watcher_role").unique().height
    assert len(figure(seen, "delay-cdf")["traces"]) == pairs
    assert len(figure(seen, "capacity-nodes")["traces"]) == 3  # a heat map per run
    columns = {n["source"].split("run=")[1].split(",")[0] for n in seen["numbers"]}
    assert columns == {"sample-godel", "sample-peer", "sample-omega"}
