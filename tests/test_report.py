"""``replay report``: what the page shows is the shipped queries' answers, section by section.

These tests need neither a browser nor, mostly, the report extra: the sections are built from
the queries in plain Python.  The page itself (Plotly) and ``--static`` (matplotlib) are tested
when the extra is installed; tests/test_report_browser.py opens the page in Chromium.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import re
import sys
from pathlib import Path

import polars as pl
import pytest
from strategies import bind, delete, node, pod
from test_queries import network, replay_rows, sample_prefix

from replay.api import run_replay
from replay.engine.config import load_config
from replay.analysis.runs import open_runs
from replay.errors import ReplayError
from replay.report import build_page, write_report
from replay.report.data import MOST_BUCKETS, QUERIES, narrowest_width
from replay.report.figures import Mark
from replay.report.sections import swept_parameters
from replay.sweep import LocalExecutor, load_sweep, run_sweep

from report_checks import QueryAnswers, same_number

SECTIONS = ["overview", "delay", "timeline", "conflicts", "capacity"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The sample's first 3 s through Gödel with two and with three schedulers."""
    folder = tmp_path_factory.mktemp("report")
    trace = sample_prefix(folder)
    made = []
    for schedulers in (2, 3):
        out = folder / f"godel-{schedulers}"
        run_replay(trace, load_config(model="godel", overrides=[f"schedulers={schedulers}"]),
                   out=out)
        made.append(out)
    return made


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """A busy trace through Gödel while one scheduler's watches drain slowly: they are
    terminated and re-watch or re-list (tests/test_watch_pipeline.py's GODEL_UNDER_LOAD)."""
    from replay.trace.synth import SynthSpec, synthesize
    from test_watch_pipeline import GODEL_UNDER_LOAD

    folder = tmp_path_factory.mktemp("loaded")
    trace, config = folder / "busy.parquet", folder / "load.toml"
    synthesize(SynthSpec(nodes=20, pods=300, arrival_rate=400.0, mean_lifetime=2.0, seed=4),
               trace)
    config.write_text(GODEL_UNDER_LOAD)
    out = folder / "godel-loaded"
    run_replay(trace, load_config(config, model="godel", overrides=["schedulers=3"]), out=out)
    return out


def cells(page):
    return [cell for section in page.sections for table in section.tables
            for row in table.rows for cell in row if cell.source]


def test_every_number_is_its_querys_answer(runs):
    """Each number in a table names its query, row and column; running that query gives it."""
    page = build_page([str(r) for r in runs])
    answers = QueryAnswers(runs)
    numbers = cells(page)
    assert len(numbers) > 40
    for cell in numbers:
        assert same_number(cell.value, answers.value(cell.source)), cell


def test_one_run_has_every_section_and_every_figure_has_data(runs):
    page = build_page([str(runs[0])])
    assert [s.key for s in page.sections] == SECTIONS
    answers = QueryAnswers(runs[:1])
    roles = answers.answer("delay_cdf")["watcher_role"].unique().sort().to_list()
    assert roles == ["binder", "dispatcher", "kubelet", "scheduler"]
    for section in page.sections:
        for figure in section.figures:
            assert figure.panels, figure.key
            for panel in figure.panels:
                assert panel.has_data(), (figure.key, panel.title)
    figures = {f.key: f for s in page.sections for f in s.figures}
    cdf = figures["delay-cdf"].panels[0]
    assert sorted(s.name for s in cdf.series) == roles
    scheduler = next(s for s in cdf.series if s.name == "scheduler")
    expected = answers.answer("delay_cdf").filter(watcher_role="scheduler")
    assert list(scheduler.x) == expected["delay_ms"].to_list()
    assert len(figures["capacity-nodes"].panels) == 1
    assert figures["capacity-nodes"].panels[0].heatmap.y == tuple(
        answers.answer("stale_capacity_by_node").sort("rank")["node"].unique(
            maintain_order=True))


def test_a_month_long_run_is_drawn_half_an_hour_a_point(tmp_path):
    """The timelines of a long run come in wider buckets, at most MOST_BUCKETS points a line
    (the Alibaba trace's five months made a 64 MB page), and the figures say how wide."""
    day = 86_400_000
    rows = [node(0, "n0", 4000)] + [
        row for k in range(20)  # 28.5 days: 41,047 minutes, so 30 a bucket (1,369 buckets)
        for row in (pod(k * day * 3 // 2, f"p{k}", 1000), bind(k * day * 3 // 2 + 5, f"p{k}", "n0"),
                    delete(k * day * 3 // 2 + 400_000, f"p{k}"))]
    page = build_page([str(replay_rows(tmp_path, rows, network(3)))])
    figures = {f.key: f for s in page.sections for f in s.figures}
    assert figures["delay-timeline"].title == "End-to-end delay per 30 minutes"
    assert figures["capacity-timeline"].title == "Blind and phantom core-seconds per 30 minutes"
    for key in ("delay-timeline", "capacity-timeline", "capacity-nodes"):
        for panel in figures[key].panels:
            assert panel.x.title == "time (UTC), a point per 30 minutes"
            lines = [s.x for s in panel.series] + ([panel.heatmap.x] if panel.heatmap else [])
            assert lines and all(1 < len(x) <= MOST_BUCKETS for x in lines), key
    assert len(figures["capacity-timeline"].panels[0].series[0].x) == 1369


@pytest.mark.parametrize(("minutes", "width"), [
    (0, 1), (1440, 1), (1441, 2), (2881, 5), (1440 * 60, 60), (1440 * 60 + 1, 120),
    (1440 * 1440, 1440), (1440 * 1440 + 1, 2880), (1440 * 1440 * 7, 7 * 1440)])
def test_a_bucket_is_the_narrowest_width_that_fits(minutes, width):
    assert narrowest_width(minutes) == width


def test_several_runs_are_overlaid_and_their_parameters_compared(runs):
    page = build_page([str(r) for r in runs])
    keys = [s.key for s in page.sections]
    assert keys == SECTIONS + ["parameters"]
    figures = {f.key: f for s in page.sections for f in s.figures}
    names = [s.name for s in figures["delay-cdf"].panels[0].series]
    assert "godel-2 · scheduler" in names and "godel-3 · scheduler" in names
    assert len(figures["capacity-nodes"].panels) == 2  # one heat map per run
    headline = page.sections[0].tables[1]
    assert headline.header == ("", "godel-2", "godel-3")
    swept = figures["parameter-schedulers"]
    for panel in swept.panels:
        (line,) = panel.series
        assert line.x == (2, 3) and line.mark is Mark.LINE and None not in line.y


def test_watch_health_is_drawn_when_watches_are_terminated(loaded, runs):
    """The section shows the troubled watches (waited on, terminated or re-listed), every number
    its watch_health row's; a run without terminations or re-lists has no such section (the
    tests above)."""
    page = build_page([str(loaded), str(runs[0])])
    sections = {s.key: s for s in page.sections}
    health = sections["watch-health"]
    (table,) = health.tables
    answers = QueryAnswers([loaded, runs[0]])
    expected = answers.answer("watch_health").filter(
        (pl.col("blocked_waits") > 0) | (pl.col("terminations") > 0) | (pl.col("relists") > 0))
    assert 0 < len(table.rows) == min(expected.height, 20)
    assert {row[0].text for row in table.rows} == {loaded.name}
    assert ("godel-scheduler-2", "pods") in {(row[2].text, row[1].text) for row in table.rows}
    frozen = [row[table.header.index("frozen_seconds")].value for row in table.rows]
    assert frozen == sorted(frozen, reverse=True) and frozen[0] > 0
    numbers = [cell for row in table.rows for cell in row if cell.source]
    assert len(numbers) == len(table.rows) * 10
    for cell in numbers:
        assert same_number(cell.value, answers.value(cell.source)), cell
    terminations, stalls = health.figures
    for figure in health.figures:
        assert all(panel.has_data() for panel in figure.panels), figure.key
    rewatched, relisted = terminations.panels[0].series
    column = table.header.index("terminations")
    assert [a + b for a, b in zip(rewatched.y, relisted.y)] == [
        row[column].value for row in table.rows]
    assert [s.name for s in stalls.panels[0].series] == [
        "dispatcher blocked", "view frozen", "re-listing"]


def test_a_sweeps_directory_is_its_finished_points(tmp_path):
    """A sweep's directory stands for its points: the swept stage key is a parameter drawn
    against the headline numbers; the sweep's name and a model key already among the model's
    parameters are not."""
    trace = sample_prefix(tmp_path, seconds=1.0)
    (tmp_path / "study.toml").write_text(f"""trace = "{trace.name}"
seeds = [1]
[matrix]
model = ["kube"]
"model.schedulers" = [1, 2]
"stages.network.latency.p99_ms" = [2, 200]
""")
    out = tmp_path / "study"
    report = run_sweep(load_sweep(tmp_path / "study.toml"), out, LocalExecutor(1, None))
    assert report.done == 4
    page = build_page([str(out)])
    assert page.title == "replay report: study"
    assert [s.key for s in page.sections] == SECTIONS + ["parameters"]
    figures = {f.key for s in page.sections for f in s.figures}
    assert {"parameter-stages_network_latency_p99_ms", "parameter-schedulers"} <= figures
    assert not {"parameter-sweep", "parameter-model_schedulers"} & figures
    runs_table = page.sections[0].tables[0]
    assert len(runs_table.rows) == 4


def test_swept_parameters_are_those_that_differ_within_a_model():
    from replay.report.data import Run

    def run(name, model, **parameters):
        return Run(name, name, model, 0, "default", "t.parquet", parameters)

    runs = [run("a", "godel", schedulers=2, policy="x"), run("b", "godel", schedulers=3,
                                                              policy="x"),
            run("c", "omega", schedulers=5, conflict="fine")]
    assert swept_parameters(runs) == ["schedulers"]
    assert swept_parameters(runs[1:]) == []  # differ across models only: nothing is swept


def test_a_time_window_with_nothing_leaves_the_overview_only(runs):
    """A window that holds the run's last instant alone, when nothing begins; one outside every
    run is refused."""
    (end,), = open_runs([str(runs[0])]).sql("SELECT end_ts FROM run_bounds").fetchall()
    page = build_page([str(runs[0])], from_ts=end)
    assert [s.key for s in page.sections] == ["overview"]
    assert page.options == ("--from", end.isoformat())
    with pytest.raises(ReplayError, match="holds no time of the runs"):
        build_page([str(runs[0])], from_ts=dt.datetime(2099, 1, 1, tzinfo=dt.timezone.utc))


def test_headline_fits_a_terminal(cli, runs):
    """200 kubelets: the headline shows the 3 worst and ALL, and how to see every one."""
    result = cli("query", runs[0])
    assert result.code == 0, result.err
    capacity = result.out.split("stale_capacity_by_role:")[1]
    kubelet_rows = [line for line in capacity.splitlines() if "│ kubelet " in line]
    assert len(kubelet_rows) == 4 and "│ ALL " in kubelet_rows[-1]
    assert f"replay query {runs[0]} stale_capacity_summary" in capacity
    assert len(result.out.splitlines()) < 70


def test_the_report_reads_only_shipped_queries():
    from replay.analysis.catalog import shipped

    assert set(QUERIES) <= set(shipped())


def test_never_written_into_a_run(runs, tmp_path):
    with pytest.raises(ReplayError, match="inside the run directory"):
        write_report([str(runs[0])], runs[0] / "report.html")
    with pytest.raises(ReplayError, match="inside the run directory"):
        write_report([str(runs[0])], tmp_path / "r.html", static=runs[0] / "figures")
    assert not (runs[0] / "report.html").exists()


def test_never_written_over_a_trace(tmp_path):
    pytest.importorskip("plotly", reason="the report extra is not installed")
    trace = tmp_path / "prefix.parquet"
    sample_prefix(tmp_path)  # the runs' trace, made again here
    run = tmp_path / "run"
    run_replay(trace, load_config(model="oracle"), out=run)
    before = trace.read_bytes()
    with pytest.raises(ReplayError, match="the trace of a run"):
        write_report([str(run)], trace)
    assert trace.read_bytes() == before


def test_without_the_extra_one_line_says_which(cli, runs, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)
    result = cli("report", runs[0], "--out", tmp_path / "r.html")
    assert result.code == 1
    assert result.err.strip().count("\n") == 0
    assert "k8s-watch-replay[report]" in result.err
    assert not (tmp_path / "r.html").exists()


def test_bad_runs_are_one_line(cli, tmp_path):
    result = cli("report", tmp_path / "nothing", "--out", tmp_path / "r.html")
    assert result.code == 1 and "no such run directory" in result.err


def test_an_empty_window_is_one_line(cli, runs, tmp_path):
    result = cli("report", runs[0], "--from", "2024-02-01", "--to", "2024-01-01T12:00+02:00",
                 "--out", tmp_path / "r.html")
    assert result.code == 1 and result.err == (
        "replay: error: --from 2024-02-01T00:00:00+00:00 is not before --to "
        "2024-01-01T12:00:00+02:00: the window holds nothing\n")
    assert not (tmp_path / "r.html").exists()


def test_a_window_outside_every_run_is_one_line(cli, runs, tmp_path):
    pytest.importorskip("plotly", reason="the report extra is not installed")
    result = cli("report", runs[0], "--from", "2030-01-01", "--out", tmp_path / "r.html")
    assert result.code == 1 and result.err.startswith(
        "replay: error: --from 2030-01-01T00:00:00+00:00: holds no time of the runs, which span ")
    assert not (tmp_path / "r.html").exists()


# --- with the report extra -----------------------------------------------------------------------

def test_the_page_is_self_contained_small_and_the_same_every_time(cli, runs, tmp_path):
    pytest.importorskip("plotly", reason="the report extra is not installed")
    first, second = tmp_path / "a.html", tmp_path / "b.html"
    result = cli("report", *runs, "--out", first)
    assert result.code == 0, result.err
    assert "sections: overview, delay, timeline, conflicts, capacity, parameters" in result.out
    assert cli("report", *runs, "--out", second).code == 0
    text = first.read_text()
    assert first.read_bytes() == second.read_bytes()
    assert len(first.read_bytes()) < 10_000_000
    assert text.count("Plotly.newPlot(") == 10  # 9 figures, and schedulers against the metrics
    assert text.count("plotly.js v") == 1  # the library, inlined once
    lowered = text.lower()
    for fetching in ('src="http', "src='http", "<link", "@import", "url(http"):
        assert fetching not in lowered


def test_static_figures_for_papers(runs, tmp_path):
    pytest.importorskip("matplotlib", reason="the report extra is not installed")
    pytest.importorskip("plotly", reason="the report extra is not installed")
    folder = tmp_path / "figures"
    result = write_report([str(runs[0])], tmp_path / "r.html", static=folder)
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 2 * result.figures == len(result.static)
    assert "delay-cdf.png" in names and "delay-cdf.svg" in names
    assert (folder / "capacity-nodes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (folder / "delay-cdf.svg").read_bytes()
    write_report([str(runs[0])], tmp_path / "r.html", static=folder)  # replaces earlier figures
    assert (folder / "delay-cdf.svg").read_bytes() == svg
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(ReplayError, match="holds other files"):
        write_report([str(runs[0])], tmp_path / "r.html", static=folder)
    assert (folder / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("static, message", [
    ("a-file", "a-file: not a folder"),
    ("r.html", "r.html: is or holds the --out file"),
    (".", ".: is or holds the --out file"),
])
def test_a_static_folder_that_cannot_be_written_is_refused_before_the_page(runs, tmp_path,
                                                                          monkeypatch, static,
                                                                          message):
    """The page used to be written first, and the command then failed on the folder."""
    pytest.importorskip("matplotlib", reason="the report extra is not installed")
    pytest.importorskip("plotly", reason="the report extra is not installed")
    monkeypatch.chdir(tmp_path)
    Path("a-file").write_text("mine")
    with pytest.raises(ReplayError, match=re.escape(message)):
        write_report([str(runs[0])], "r.html", static=static)
    assert sorted(os.listdir()) == ["a-file"]


def test_figures_that_fail_leave_no_page(runs, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib", reason="the report extra is not installed")
    pytest.importorskip("plotly", reason="the report extra is not installed")
    from replay.report import static

    def full(figure):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(static, "draw", full)
    with pytest.raises(ReplayError, match="No space left on device"):
        write_report([str(runs[0])], tmp_path / "r.html", static=tmp_path / "figures")
    assert os.listdir(tmp_path) == []
