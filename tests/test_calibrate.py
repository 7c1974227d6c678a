"""``replay calibrate``: real scrapes to a run config, JSON results, two scrapes, resets, errors.

The source histograms are read back from the scrapes' text with a regular expression here, not
with the parser calibrate uses, so that the comparisons check calibrate against the file itself.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from replay.api import run_replay
from replay.calibrate import calibrate
from replay.calibrate.mapping import event_resource
from replay.engine.config import load_config, read_toml
from replay.engine.distributions import Histogram
from replay.errors import ReplayError
from replay.rng import Stream
from replay.trace.io import write_trace

from conftest import SAMPLE_TRACE, shared_data

HANDLING = "scheduler_event_handling_duration_seconds"
DISPATCH = "apiserver_watch_events_dispatch_duration_seconds"
POD_EVENTS = ("AssignedPodAdd", "AssignedPodDelete", "AssignedPodUpdate", "UnschedulablePodAdd",
              "UnschedulablePodDelete", "UnschedulablePodUpdate")
LINE = re.compile(r'^(?P<name>[a-z_:]+?)_(?P<part>bucket|sum|count)\{(?P<labels>[^}]*)\} '
                  r'(?P<value>\S+)$')
DRAWS = np.arange(100_000, dtype=np.uint64)


# --- scrapes as text ----------------------------------------------------------------------------

def labels_of(text: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', text))


def buckets(text: str, family: str, keep) -> dict[float, float]:
    """The cumulative bucket counts of ``family``'s series whose labels ``keep`` accepts,
    summed by bound, read from the scrape's text."""
    out: dict[float, float] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match and match["name"] == family and match["part"] == "bucket":
            labels = labels_of(match["labels"])
            if keep(labels):
                le = float(labels["le"])
                out[le] = out.get(le, 0.0) + float(match["value"])
    return dict(sorted(out.items()))


def bumped(text: str, family: str, keep, added: dict[float, int], sum_added: float = 0.0,
           restart: bool = False) -> str:
    """``text`` with ``added`` observations (per bucket, by bound) added to every series of
    ``family`` that ``keep`` accepts, as a later scrape of the same component would show; with
    ``restart``, those series hold only the added observations (the component restarted)."""
    total = sum(added.values())
    out = []
    for line in text.splitlines():
        match = LINE.match(line)
        if match and match["name"] == family and keep(labels_of(match["labels"])):
            value = 0.0 if restart else float(match["value"])
            if match["part"] == "bucket":
                le = float(labels_of(match["labels"])["le"])
                value += sum(n for bound, n in added.items() if bound <= le)
            else:
                value += total if match["part"] == "count" else sum_added
            line = f"{line.rsplit(' ', 1)[0]} {value:g}"
        out.append(line)
    return "\n".join(out) + "\n"


def pod_event(labels: dict[str, str]) -> bool:
    return labels.get("event") in POD_EVENTS


def per_bucket(cumulative: dict[float, float]) -> np.ndarray:
    values = np.array(list(cumulative.values()))
    return np.diff(np.r_[0.0, values])


def fractions_of_draws(h: Histogram, seed: int = 3) -> np.ndarray:
    draws = h.sample_us(Stream.of(seed, "calibrated"), DRAWS)
    bucket = np.searchsorted(np.asarray(h.le_ms) * 1000, draws, side="left")
    return np.bincount(bucket, minlength=len(h.counts)) / len(draws)


def dispatch_scrape(per_resource: dict[str, dict[str, list[int]]],
                    bounds=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, math.inf)) -> str:
    """A scrape of apiserver_watch_events_dispatch_duration_seconds in its upstream shape: labels
    group, resource and stage, cumulative buckets, _sum and _count; counts given per bucket."""
    lines = [f"# HELP {DISPATCH} [ALPHA] Duration of watch event dispatch stages.",
             f"# TYPE {DISPATCH} histogram"]
    for resource, stages in per_resource.items():
        for stage, counts in stages.items():
            labels = f'group="",resource="{resource}",stage="{stage}"'
            running = 0
            for bound, count in zip(bounds, counts):
                running += count
                le = "+Inf" if math.isinf(bound) else f"{bound:g}"
                lines.append(f'{DISPATCH}_bucket{{{labels},le="{le}"}} {running}')
            mids = [(a + b) / 2 for a, b in zip((0,) + bounds[:-2], bounds[:-1])]
            total = sum(c * m for c, m in zip(counts, mids)) + counts[-1] * 0.1
            lines += [f"{DISPATCH}_sum{{{labels}}} {total:.6g}",
                      f"{DISPATCH}_count{{{labels}}} {running}"]
    return "\n".join(lines) + "\n"


STAGES_POD = {"storage_to_cache": [100, 500, 300, 80, 15, 4, 1],
              "cacher_queue_latency": [700, 200, 80, 15, 4, 1, 0],
              "watcher_queue_latency": [900, 80, 15, 4, 1, 0, 0],
              "watcher_to_client_handler": [950, 40, 10, 0, 0, 0, 0],
              "total": [50, 300, 400, 200, 40, 9, 1]}
STAGES_NODE = {"storage_to_cache": [0, 10, 20, 30, 0, 0, 0]}


@pytest.fixture(scope="module")
def scrapes():
    folder = shared_data("prometheus")
    return {name: folder / f"{name}-1.36.prom" for name in ("apiserver", "scheduler",
                                                             "controller-manager")}


@pytest.fixture(scope="module")
def calibrated(scrapes, tmp_path_factory):
    """The API server and scheduler scrapes calibrated twice: for kube and model-neutral."""
    folder = tmp_path_factory.mktemp("calibrated")
    from replay.cli.main import main

    for name, extra in (("kube", ["--model", "kube"]), ("plain", [])):
        args = ["calibrate", str(scrapes["apiserver"]), str(scrapes["scheduler"]),
                "--out", str(folder / f"{name}.toml"), *extra]
        assert main(args) == 0
    return folder


def short_trace(tmp_path: Path) -> Path:
    trace = pl.read_parquet(SAMPLE_TRACE)
    path = tmp_path / "short.parquet"
    write_trace(trace.filter(pl.col("ts") < trace["ts"].min() + dt.timedelta(seconds=20)),
                path, source="test", source_args={})
    return path


# --- the real scrapes -----------------------------------------------------------------------------

def test_real_scrapes_give_a_config_replay_run_accepts(calibrated, tmp_path):
    """Both configs load and replay: the kube one as a what-if run, the plain one observing."""
    trace = short_trace(tmp_path)
    kube = load_config(calibrated / "kube.toml")
    assert kube.model == "kube" and kube.model_params["per_node_ms"] == 0.0
    assert kube.model_params["commit_ms"] == pytest.approx(0.044253499999999994 / 15 * 1000,
                                                           rel=1e-5)
    assert isinstance(kube.stages["handler"]["service"], Histogram)
    result = run_replay(trace, kube, out=tmp_path / "kube")
    assert result.model == "kube" and result.attempts > 0
    plain = load_config(calibrated / "plain.toml")
    assert plain.model is None and plain.model_params == {}
    assert run_replay(trace, plain, out=tmp_path / "observe").model == "observe"


def test_every_calibrated_key_says_where_it_came_from(calibrated, scrapes):
    text = (calibrated / "kube.toml").read_text()
    for key in ("service = {", "commit_ms =", "per_attempt_ms ="):
        at = text.index(key)
        comment = text[text.rindex("\n\n", 0, at):at]
        assert "observations" in comment and "counted since the component started" in comment
    assert f'{HANDLING}{{event=~"{"|".join(sorted(POD_EVENTS))}"}}' in text
    assert "522 observations" in text
    assert 'subresource="binding",verb="POST"' in text
    # the stages no metric calibrated here are listed, with the reason
    for stage in ("storage_to_cache: not in the sources", "network:", "cacher_queue:",
                  "watcher_queue:"):
        assert f"#   {stage}" in text
    plain = (calibrated / "plain.toml").read_text()
    assert "# commit_ms = 2.95023" in plain and "\n[model]" not in plain


def test_calibrated_stages_reproduce_the_source_histograms(calibrated, scrapes, tmp_path):
    """100,000 draws of each calibrated stage fall in the source's buckets as often as the
    source counted, within one percentage point per bucket: the handler from the scheduler's
    scrape, storage_to_cache from a dispatch-metric scrape."""
    text = scrapes["scheduler"].read_text()
    source = per_bucket(buckets(text, HANDLING, pod_event))
    handler = load_config(calibrated / "kube.toml").stages["handler"]["service"]
    assert np.abs(fractions_of_draws(handler) - source / source.sum()).max() < 0.01

    scrape = tmp_path / "dispatch.prom"
    scrape.write_text(dispatch_scrape({"pods": STAGES_POD, "nodes": STAGES_NODE}))
    out = tmp_path / "dispatch.toml"
    from replay.calibrate import write_config
    write_config(calibrate([str(scrape)]), out)
    stage = load_config(out).stages["storage_to_cache"]
    expected = np.array(STAGES_POD["storage_to_cache"]) / sum(STAGES_POD["storage_to_cache"])
    assert np.abs(fractions_of_draws(stage["latency"]) - expected).max() < 0.01
    assert stage["service"].is_zero


def test_the_bucket_comparison_can_fail(scrapes):
    """Draws from another series (node events) do not match the pod events' buckets."""
    text = scrapes["scheduler"].read_text()
    pods = per_bucket(buckets(text, HANDLING, pod_event))
    other = Histogram((0.1, 0.2, 0.4, 0.8), (0.0, 1.0, 1.0, 1.0, 0.0))
    assert np.abs(fractions_of_draws(other)[:5] - (pods / pods.sum())[:5]).max() > 0.01


# --- the dispatch metric, in the shape it has upstream ---------------------------------------------

def test_dispatch_metric_stages_by_resource(tmp_path):
    scrape = tmp_path / "apiserver-1.37.prom"
    scrape.write_text(dispatch_scrape({"pods": STAGES_POD, "nodes": STAGES_NODE}))
    pods = calibrate([str(scrape)])
    by_target = {(r.mapping.target, r.mapping.use.value): r for r in pods.results if r.found}
    latency = by_target[("storage_to_cache", "latency")]
    assert latency.series.observations == 1000
    assert 'resource="pods",stage="storage_to_cache"' in latency.selector
    for stage in ("cacher_queue", "watcher_queue"):
        assert (stage, "check") in by_target  # measured waits are checks, not costs
    nodes = calibrate([str(scrape)], resource="nodes")
    latency = next(r for r in nodes.written() if r.mapping.target == "storage_to_cache")
    assert latency.series.histogram().counts == (0.0, 10.0, 20.0, 30.0, 0.0, 0.0, 0.0)
    assert any("scheduler_event_handling" in w and "not in the sources" in w
               for w in nodes.warnings)


def test_the_inf_bucket_is_capped_from_the_sum(tmp_path):
    """One observation above 50 ms; _sum leaves it 100 ms, so it is drawn from (50, 150]."""
    scrape = tmp_path / "a.prom"
    scrape.write_text(dispatch_scrape({"pods": STAGES_POD}))
    result = next(r for r in calibrate([str(scrape)]).written())
    histogram = result.series.histogram()
    assert histogram.counts[-1] == 1 and histogram.max_ms == pytest.approx(150.0)


# --- Prometheus API results ---------------------------------------------------------------------

def vector_from(text: str, family: str, keep, by: str, name: bool) -> dict:
    """The answer of ``sum by (le, BY) (FAMILY_bucket{...})`` built from a scrape."""
    sums: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match and match["name"] == family and match["part"] == "bucket":
            labels = labels_of(match["labels"])
            if keep(labels):
                key = (labels[by], labels["le"])
                sums[key] = sums.get(key, 0.0) + float(match["value"])
    result = [{"metric": {**({"__name__": f"{family}_bucket"} if name else {}), by: value,
                          "le": le}, "value": [1783940000.0, f"{count:g}"]}
              for (value, le), count in sorted(sums.items())]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_a_vector_result_gives_the_scrapes_histogram(scrapes, tmp_path):
    text = scrapes["scheduler"].read_text()
    from_text = next(r for r in calibrate([str(scrapes["scheduler"])]).written()
                     if r.mapping.target == "handler").series.histogram()
    unnamed = tmp_path / "handling.json"
    unnamed.write_text(json.dumps(vector_from(text, HANDLING, pod_event, "event", name=False)))
    result = calibrate([f"{HANDLING}={unnamed}"])
    handler = next(r for r in result.written() if r.mapping.target == "handler")
    assert handler.series.histogram().counts == from_text.counts
    assert "evaluated at 2026-07-13T" in handler.interval
    named = tmp_path / "named.json"
    named.write_text(json.dumps(vector_from(text, HANDLING, pod_event, "event", name=True)))
    assert calibrate([str(named)]).written()[0].series.histogram().counts \
        == from_text.counts


def test_a_window_that_ends_before_it_starts_is_a_usage_error(cli, scrapes, tmp_path):
    result = cli("calibrate", scrapes["scheduler"], "--window", "2024-02-01/2024-01-01",
                 "--out", tmp_path / "c.toml")
    assert result.code == 2 and "START is after END: '2024-02-01/2024-01-01'" in result.err
    assert not (tmp_path / "c.toml").exists()


def test_a_matrix_result_is_differenced_within_the_window(scrapes, tmp_path):
    """Two samples per series, the second the scrape plus known observations: the histogram is
    those observations; a window that holds only the first sample leaves nothing."""
    text = scrapes["scheduler"].read_text()
    added = {0.0001: 50, 0.0004: 30, 0.0016: 20}
    later = bumped(text, HANDLING, pod_event, added)
    first = vector_from(text, HANDLING, pod_event, "event", name=True)["data"]["result"]
    second = vector_from(later, HANDLING, pod_event, "event", name=True)["data"]["result"]
    matrix = [{"metric": a["metric"], "values": [[1783940000, a["value"][1]],
                                                 [1783943600, b["value"][1]]]}
              for a, b in zip(first, second)]
    path = tmp_path / "range.json"
    path.write_text(json.dumps({"status": "success",
                                "data": {"resultType": "matrix", "result": matrix}}))
    handler = calibrate([str(path)]).written()[0]
    events = len(POD_EVENTS)
    assert handler.series.histogram().counts[:5] == (50.0 * events, 0.0, 30.0 * events, 0.0,
                                                     20.0 * events)
    assert handler.interval.endswith("from 2026-07-13T10:53:20Z to 2026-07-13T11:53:20Z")
    from replay.calibrate.sources import Window
    early = Window(None, dt.datetime(2026, 7, 13, 11, 0, tzinfo=dt.timezone.utc))
    with pytest.raises(ReplayError, match="no histogram series"):
        calibrate([str(path)], window=early)


# --- two scrapes, counter resets, and what cannot be calibrated ------------------------------------

def test_a_byte_order_mark_is_not_part_of_the_scrape(calibrated, scrapes, tmp_path):
    marked = {}
    for name in ("apiserver", "scheduler"):
        marked[name] = tmp_path / f"{name}.prom"
        marked[name].write_bytes(b"\xef\xbb\xbf" + scrapes[name].read_bytes())
    out = tmp_path / "marked.toml"
    from replay.cli.main import main
    assert main(["calibrate", str(marked["apiserver"]), str(marked["scheduler"]), "--out",
                 str(out)]) == 0
    assert read_toml(out) == read_toml(calibrated / "plain.toml")  # every value; comments aside


def test_two_scrapes_are_differenced(scrapes, tmp_path):
    """t1 is the real scrape plus known observations: the calibrated histogram is exactly
    those, summed over the pod events, with the interval between the scrapes."""
    text = scrapes["scheduler"].read_text()
    added = {0.0001: 7, 0.0002: 5, 0.0008: 2, math.inf: 1}
    later = tmp_path / "t1.prom"
    later.write_text(bumped(text, HANDLING, pod_event, added, sum_added=0.5))
    result = calibrate([str(scrapes["scheduler"]), str(later)])
    handler = next(r for r in result.written() if r.mapping.target == "handler")
    events = len(POD_EVENTS)
    counts = handler.series.histogram().counts
    assert counts[:4] == (7.0 * events, 5.0 * events, 0.0, 2.0 * events)
    assert counts[-1] == events and sum(counts) == 15 * events
    assert handler.interval == f"kube-scheduler, between {scrapes['scheduler']} and {later}"
    assert not any("reset" in w for w in result.warnings)


def test_a_counter_reset_is_reported_and_the_later_scrape_taken(scrapes, tmp_path):
    """The scheduler restarted between the scrapes: one series fell.  It is reported, and taken
    from the later scrape alone; the others are differenced."""
    text = scrapes["scheduler"].read_text()
    grown = bumped(text, HANDLING, lambda labels: pod_event(labels) and
                   labels["event"] != "AssignedPodUpdate", {0.0001: 3})
    later = tmp_path / "t1.prom"
    later.write_text(bumped(grown, HANDLING, lambda labels: labels["event"] == "AssignedPodUpdate",
                            {0.0001: 2, 0.0004: 1}, restart=True))
    result = calibrate([str(scrapes["scheduler"]), str(later)])
    reset = [w for w in result.warnings if "counter reset" in w]
    assert len(reset) == 1 and 'event="AssignedPodUpdate"' in reset[0]
    assert "count fell from 380 to 3" in reset[0]
    handler = next(r for r in result.written() if r.mapping.target == "handler")
    assert handler.series.histogram().counts[:3] == (3.0 * 5 + 2, 0.0, 1.0)
    assert handler.interval.endswith(f"between {scrapes['scheduler']} and {later}, since a "
                                     "restart in between")


def test_scrapes_of_different_components_are_not_differenced(scrapes):
    """The scheduler and the controller manager both export workqueue histograms (one queue of
    the same name, too): put together, not subtracted; the controllers' queues are checks."""
    result = calibrate([str(scrapes["scheduler"]), str(scrapes["controller-manager"])])
    assert not any("reset" in w for w in result.warnings)
    queues = {r.split_value: r for r in result.results
              if r.mapping.metric == "workqueue_queue_duration_seconds"}
    text = scrapes["controller-manager"].read_text()
    for name in ("deployment", "replicaset", "job"):
        counts = buckets(text, "workqueue_queue_duration_seconds",
                         lambda labels, name=name: labels["name"] == name)
        assert queues[name].series.observations == list(counts.values())[-1] > 0
    assert queues["deployment"].series.observations == 3905


def test_identical_scrapes_have_nothing_to_calibrate(cli, scrapes, tmp_path):
    out, again = tmp_path / "c.toml", tmp_path / "again.prom"
    again.write_bytes(scrapes["scheduler"].read_bytes())
    result = cli("calibrate", scrapes["scheduler"], again, "--out", out)
    assert result.code == 1 and not out.exists()
    assert result.err.count("\n") == result.err.count("replay: ")  # one line each, no traceback
    assert "no observations in the interval" in result.err
    assert result.err.splitlines()[-1].startswith("replay: error: nothing to calibrate")


def test_a_source_given_twice_is_refused(cli, scrapes, tmp_path):
    """Not differenced to nothing, as two scrapes of one component would be."""
    out = tmp_path / "c.toml"
    twice = cli("calibrate", scrapes["scheduler"], scrapes["scheduler"], "--out", out)
    assert twice.code == 1 and twice.err == f"replay: error: {scrapes['scheduler']}: given twice\n"
    other_name = scrapes["scheduler"].parent / ".." / "prometheus" / scrapes["scheduler"].name
    again = cli("calibrate", scrapes["scheduler"], other_name, "--out", out)
    assert again.code == 1 and f"the same source as {scrapes['scheduler']}" in again.err
    assert not out.exists()


def test_a_gzip_compressed_scrape_is_read_as_ingest_reads_a_log(calibrated, scrapes, tmp_path):
    packed = {}
    for name in ("apiserver", "scheduler"):
        packed[name] = tmp_path / f"{name}.prom.gz"
        packed[name].write_bytes(gzip.compress(scrapes[name].read_bytes()))
    out = tmp_path / "packed.toml"
    from replay.cli.main import main
    assert main(["calibrate", str(packed["apiserver"]), str(packed["scheduler"]), "--out",
                 str(out)]) == 0
    assert read_toml(out) == read_toml(calibrated / "plain.toml")
    cut = tmp_path / "cut.prom.gz"
    cut.write_bytes(packed["scheduler"].read_bytes()[:4000])
    with pytest.raises(ReplayError, match="cut.prom.gz: not a complete gzip stream"):
        calibrate([str(cut)])


# a scrape of one histogram series, its three buckets' counts to be filled in
ONE_SERIES = (f"# TYPE {HANDLING} histogram\n"
              + "".join(f'{HANDLING}_bucket{{{{event="AssignedPodAdd",le="{le}"}}}} {{}}\n'
                        for le in ("0.0001", "0.0002", "+Inf"))
              + f'{HANDLING}_sum{{{{event="AssignedPodAdd"}}}} 0.002\n'
              + f'{HANDLING}_count{{{{event="AssignedPodAdd"}}}} 40\n')


@pytest.mark.parametrize("content, message", [
    ("hello world\n", "not a Prometheus text-format scrape"),
    ("", "no metrics in it"),
    ('{"status": "error", "errorType": "bad_data", "error": "parse error"}',
     "the Prometheus API answered an error: bad_data: parse error"),
    ('{"status": "success", "data": {"resultType": "scalar", "result": [1, "2"]}}',
     "not a Prometheus API result of type vector or matrix"),
    ('{"data": {"resultType": "vector", "result": [{"metric": {"le": "1"}, "value": [1, "2"]}]}}',
     "its series have no metric name"),
    ('{"data": {"resultType": "vector", "result": [{"metric": {"__name__": "up"}, '
     '"value": [1, "1"]}]}}', "no histogram series in it"),
    ("{", "not valid JSON"),
    ("# TYPE scheduler_event_handling_duration_seconds gauge\n"
     'scheduler_event_handling_duration_seconds{event="AssignedPodAdd"} 3\n',
     "nothing to calibrate"),
    (b"PAR1\xc0\x15", "not text (byte 4), so not a Prometheus scrape or JSON result"),
    (ONE_SERIES.format(38, 10, 40), 'scheduler_event_handling_duration_seconds{event="AssignedPodAdd"}:'
     " the bucket le=0.0002 counts 10, fewer than le=0.0001 (38), but a histogram's buckets are "
     "cumulative"),
    (ONE_SERIES.format(38, -5, 40), "the bucket le=0.0002 counts -5, not a number of observations"),
    (ONE_SERIES.format(38, "NaN", 40), "the bucket le=0.0002 counts nan, not a number"),
    (ONE_SERIES.format(38, "+Inf", 40), "the bucket le=0.0002 counts inf, not a number"),
    ('{"data": {"resultType": "vector", "result": ['
     '{"metric": {"__name__": "x_bucket", "le": "1"}, "value": [1, "5"]}, '
     '{"metric": {"__name__": "x_bucket", "le": "+Inf"}, "value": [1, "3"]}]}}',
     "x: the bucket le=inf counts 3, fewer than le=1 (5)"),
    (ONE_SERIES.format(38, 40, 40) * 2,  # cat t0.prom t1.prom > both.prom
     f'{HANDLING}_bucket{{event="AssignedPodAdd",le="0.0001"}} appears twice, but a source '
     "holds each series once (two scrapes or results in one file?"),
    ('{"data": {"resultType": "vector", "result": ['
     '{"metric": {"__name__": "x_bucket", "le": "1"}, "value": [1, "5"]}, '
     '{"metric": {"__name__": "x_bucket", "le": "1"}, "value": [1, "7"]}]}}',
     'x_bucket{le="1"} appears twice'),
    (ONE_SERIES.format(38, 40, 40).replace('le="+Inf"', 'le="0.0004"')
     .replace('_count{event="AssignedPodAdd"} 40', '_count{event="AssignedPodAdd"} 39'),
     "its _count 39 is fewer than its bucket le=0.0004 (40), but the count is the +Inf bucket"),
])
def test_bad_input_is_one_line(cli, tmp_path, content, message):
    source = tmp_path / "in.prom"
    source.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "out.toml"
    result = cli("calibrate", source, "--out", out)
    assert result.code == 1 and not out.exists()
    assert message in result.err and "Traceback" not in result.err
    assert result.err.splitlines()[-1].startswith("replay: error: ")


def test_a_missing_inf_bucket_is_the_count(tmp_path):
    """A source without the +Inf bucket (a query that filtered le) still has every observation:
    the 2 that _count holds above the last bound are the +Inf bucket's."""
    source = tmp_path / "in.prom"
    source.write_text(ONE_SERIES.format(38, 40, 0)
                      .replace(f'{HANDLING}_bucket{{event="AssignedPodAdd",le="+Inf"}} 0\n', "")
                      .replace('AssignedPodAdd"} 40', 'AssignedPodAdd"} 42'))
    assert 'le="+Inf"' not in source.read_text()
    histogram = calibrate([str(source)]).written()[0].series.histogram()
    assert histogram.counts == (38.0, 2.0, 2.0)


def test_a_resource_the_sources_lack_is_told_what_they_hold(scrapes):
    result = calibrate([str(scrapes["scheduler"])], resource="pod")
    assert not any(r.mapping.target == "handler" for r in result.written())
    told = [w for w in result.warnings if w.startswith(HANDLING)]
    assert told and "no such series in the sources (they hold those of " in told[0]
    assert ", nodes, " in told[0] and ", pods, " in told[0] and "--resource chooses" in told[0]


def test_a_gauge_is_not_a_histogram(tmp_path):
    source = tmp_path / "in.prom"
    source.write_text("# TYPE scheduler_event_handling_duration_seconds gauge\n"
                      'scheduler_event_handling_duration_seconds{event="AssignedPodAdd"} 3\n')
    result = calibrate([str(source)])
    assert any("a gauge, not a histogram" in w for w in result.warnings)


def test_mismatched_buckets_are_left_out(tmp_path):
    """Two pod event series with other bounds than the rest: the larger layout is taken."""
    scrape = dispatch_scrape({"pods": {"storage_to_cache": [1, 2, 3, 4, 0, 0, 0]}})
    other = dispatch_scrape({"pods": {"storage_to_cache": [9, 0, 0]}}, bounds=(0.1, 1, math.inf))
    other = other.replace('group=""', 'group="other.example"')
    source = tmp_path / "mixed.prom"
    source.write_text(scrape + "\n".join(other.splitlines()[2:]) + "\n")
    result = calibrate([str(source)])
    latency = result.written()[0]
    assert latency.series.observations == 10
    assert "1 series with other buckets than the 1 taken left out" in latency.note
    assert any("other buckets" in w and 'group="other.example"' in w for w in result.warnings)


def test_never_over_an_input_and_the_static_table(cli, scrapes, tmp_path):
    copy = tmp_path / "scheduler.prom"
    copy.write_bytes(scrapes["scheduler"].read_bytes())
    result = cli("calibrate", copy, "--out", copy)
    assert result.code == 1 and f"{copy}: is the input {copy}; choose another" in result.err
    assert copy.read_bytes() == scrapes["scheduler"].read_bytes()
    table = cli("calibrate", "--explain")
    assert table.code == 0
    assert f"stages.storage_to_cache.latency <- {DISPATCH}" in table.out
    assert "stages.network <- no metric" in table.out
    assert cli("calibrate", copy).code == 2  # --out or --explain


def test_event_labels_name_their_resource():
    assert [event_resource(e) for e in ("AssignedPodAdd", "UnschedulablePodDelete",
                                        "NodeUpdateNodeTaint", "PersistentVolumeClaimUpdate",
                                        "storage.k8s.io/CSINodeAdd",
                                        "storage.k8s.io/StorageClassAdd", "Unknown")] == [
        "pods", "pods", "nodes", "persistentvolumeclaims", "csinodes", "storageclasses", ""]
