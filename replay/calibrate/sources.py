"""Reading what a cluster measured: Prometheus scrapes and Prometheus HTTP API results.

A SOURCE is a text-format scrape (``kubectl get --raw /metrics > t0.prom``), parsed by
``prometheus_client``'s parser, or the JSON a Prometheus server answers to a query
(``/api/v1/query``: an instant ``vector``; ``/api/v1/query_range`` or a range selector: a
``matrix``) holding ``_bucket`` series.  An aggregation such as ``sum by (le, resource)`` drops the
metric's name, so such a result is given as ``METRIC=FILE.json``.

Scrapes of one component (``component_of``: the API server, the scheduler, the controller
manager), in the order given, are successive scrapes: each series is the later scrape minus the
earlier (``Series.since``).  A matrix holds the
counters over time: each series is their increase between its first and last samples in the
window, a drop counting as a restart (Prometheus's ``increase`` rule, without its extrapolation to
the window's edges).
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from replay.calibrate.series import Labels, Series, merged, selector_of
from replay.errors import ReplayError, unreadable
from replay.trace.audit.reader import GZIP_MAGIC

# Families only the API server exports (a scheduler's or a controller manager's scrape has
# apiserver_* families too: its own serving and authentication)
APISERVER_FAMILIES = ("apiserver_request_duration_seconds", "etcd_request_duration_seconds",
                      "apiserver_watch_events_dispatch_duration_seconds",
                      "apiserver_watch_cache_read_wait_seconds")
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
SUFFIXES = ("_bucket", "_sum", "_count")

Warn = Callable[[str], None]


class SourceKind(Enum):
    SCRAPE = "scrape"
    VECTOR = "vector"
    MATRIX = "matrix"


@dataclass(frozen=True)
class Window:
    """The time range a matrix's samples are taken from (either end open)."""

    start: datetime | None = None
    end: datetime | None = None

    def holds(self, seconds: float) -> bool:
        at = datetime.fromtimestamp(seconds, timezone.utc)
        return ((self.start is None or at >= self.start)
                and (self.end is None or at <= self.end))


@dataclass
class Source:
    """One input: its histogram series by family and label set, the other families' types, and
    the time its counts cover."""

    name: str
    kind: SourceKind
    histograms: dict[str, dict[Labels, Series]] = field(default_factory=dict)
    other_types: dict[str, str] = field(default_factory=dict)
    interval: str = ""


@dataclass
class Family:
    """One histogram family over all sources: its series, each with the interval it counts."""

    name: str
    series: dict[Labels, Series]


def source_parts(spec: str) -> tuple[str | None, Path]:
    """The metric a ``METRIC=FILE.json`` names (None for a plain file), and the file."""
    path = Path(spec)
    name, sep, rest = spec.partition("=")
    if sep and not path.exists() and METRIC_NAME.fullmatch(name):
        return name, Path(rest)
    return None, path


def check_given_once(specs: list[str]) -> None:
    """Refuse a source given twice (under any name of the file): as successive scrapes its
    counts would be differenced to nothing, as results summed twice."""
    seen: dict[tuple[str | None, Path], str] = {}
    for spec in specs:
        family, path = source_parts(spec)
        first = seen.get((family, path.resolve()))
        if first is not None:
            same = "given twice" if first == spec else f"the same source as {first}"
            raise ReplayError(f"{spec}: {same}")
        seen[family, path.resolve()] = spec


def read_source(spec: str, window: Window | None, warn: Warn) -> Source:
    """The source ``spec`` names: a scrape, a JSON result, or ``METRIC=FILE.json``; either may
    be gzip-compressed (``metrics.prom.gz``)."""
    family, path = source_parts(spec)
    try:
        text = _text(path)
    except FileNotFoundError:
        raise ReplayError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise unreadable(path, "Prometheus scrape or JSON result", err) from None
    if text.lstrip().startswith(("{", "[")):
        return _read_json(str(path), text, family, window, warn)
    if family is not None:
        raise ReplayError(f"{spec}: METRIC=FILE names the metric of a JSON result; "
                          f"{path} is not JSON")
    if window is not None:
        warn(f"{path}: --window selects samples of a range (matrix) result; a scrape has none, "
             "so it is taken whole")
    return _read_scrape(str(path), text)


def _text(path: Path) -> str:
    """The file's text, decompressed if it is gzip (by its magic bytes, as ``replay ingest``
    tells), without a byte order mark (not the scrape's)."""
    data = path.read_bytes()
    if data.startswith(GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:
            raise ReplayError(f"{path}: not a complete gzip stream ({err})") from None
    return data.decode("utf-8-sig")


def _read_scrape(name: str, text: str) -> Source:
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, IndexError, KeyError, TypeError) as err:
        raise ReplayError(f"{name}: not a Prometheus text-format scrape ({err})") from None
    if not families:
        raise ReplayError(f"{name}: no metrics in it (expected a Prometheus text-format scrape, "
                          "e.g. kubectl get --raw /metrics)")
    source = Source(name, SourceKind.SCRAPE,
                    interval=f"counted since the component started (one scrape: {name})")
    seen: set[tuple[str, Labels]] = set()
    for family in families:
        if family.type != "histogram":
            source.other_types[family.name] = family.type
            continue
        values: dict[Labels, dict] = {}
        for sample in family.samples:
            _once(name, sample.name, _labels(sample.labels), seen)
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            entry = values.setdefault(_labels(labels), {"buckets": {}})
            if sample.name.endswith("_bucket") and "le" in sample.labels:
                entry["buckets"][_le(sample.labels["le"], name)] = float(sample.value)
            elif sample.name.endswith("_sum"):
                entry["sum"] = float(sample.value)
            elif sample.name.endswith("_count"):
                entry["count"] = float(sample.value)
        source.histograms.setdefault(family.name, {}).update(
            _series(name, family.name, values, source.interval))
    return source


def _once(name: str, metric: str, labels: Labels, seen: set[tuple[str, Labels]]) -> None:
    """Refuses a sample of a series seen before in the same source: a scrape or a result holds
    each series once, so a second one is a second scrape or result in the file (``cat t0 t1``),
    and keeping either would calibrate from something other than what the user meant."""
    if (metric, labels) in seen:
        raise ReplayError(f"{name}: {selector_of(metric, [labels])} appears twice, but a source "
                          "holds each series once (two scrapes or results in one file? give "
                          "each as its own SOURCE, earlier first)")
    seen.add((metric, labels))


def _read_json(name: str, text: str, family: str | None, window: Window | None,
               warn: Warn) -> Source:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ReplayError(f"{name}: not valid JSON ({err})") from None
    data = document.get("data", document) if isinstance(document, dict) else None
    if isinstance(document, dict) and document.get("status") == "error":
        raise ReplayError(f"{name}: the Prometheus API answered an error: "
                          f"{document.get('errorType')}: {document.get('error')}")
    if not isinstance(data, dict) or data.get("resultType") not in ("vector", "matrix") \
            or not isinstance(data.get("result"), list):
        raise ReplayError(f"{name}: not a Prometheus API result of type vector or matrix "
                          "(the JSON /api/v1/query and /api/v1/query_range answer)")
    kind = SourceKind(data["resultType"])
    if kind is SourceKind.VECTOR and window is not None:
        warn(f"{name}: --window selects samples of a range (matrix) result; an instant vector "
             "has one per series, so it is taken whole")
    families: dict[str, dict[Labels, dict]] = {}
    times: list[float] = []
    skipped, restarted = 0, set()
    seen: set[tuple[str, Labels]] = set()
    for item in data["result"]:
        parsed = _result_item(name, item, family, kind, window, times)
        if parsed is None:
            skipped += 1
            continue
        metric, labels, part, le, value, reset = parsed
        _once(name, metric + part, _labels(labels if le is None else {**labels, "le": le}), seen)
        entry = families.setdefault(metric, {}).setdefault(_labels(labels), {"buckets": {}})
        if part == "_bucket":
            entry["buckets"][_le(le, name)] = value
        else:
            entry[part[1:]] = value
        if reset:
            restarted.add((metric, _labels(labels)))
    if not families:
        raise ReplayError(f"{name}: no histogram series in it: a result of _bucket series is "
                          "needed (series with an le label; NaN and empty series do not count)")
    if skipped:
        warn(f"{name}: {skipped} series skipped (not _bucket, _sum or _count series, NaN, or "
             "fewer than two samples in the window)")
    if restarted:
        warn(f"{name}: {len(restarted)} series fell within the window (counter resets: the "
             "component restarted); their increase counts from each restart on")
    interval = _interval(name, kind, times)
    return Source(name, kind, {m: _series(name, m, v, interval) for m, v in families.items()},
                  interval=interval)


def _result_item(name: str, item: object, family: str | None, kind: SourceKind,
                 window: Window | None, times: list[float]):
    """(family, labels without le and __name__, suffix, le, value, whether the counter fell) of
    one result item, or None if it is not a finite sample of a histogram's series."""
    if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
        raise ReplayError(f"{name}: a result item without a metric object")
    metric = dict(item["metric"])
    full = metric.pop("__name__", None)
    if full is None:
        if family is None:
            raise ReplayError(f"{name}: its series have no metric name (an aggregation such as "
                              "sum by (le) drops it): give it as METRIC=FILE.json")
        full = family + ("_bucket" if "le" in metric else "")
    part = next((s for s in SUFFIXES if full.endswith(s)), None)
    if part is None or (part == "_bucket") != ("le" in metric):
        return None
    labels = {k: v for k, v in metric.items() if k != "le"}
    reset = False
    if kind is SourceKind.VECTOR:
        _, value = _point(name, item.get("value"), times)
    else:
        points = [_point(name, p, None) for p in item.get("values") or []]
        points = [(t, v) for t, v in points if window is None or window.holds(t)]
        if len(points) < 2:
            return None
        value, reset = _increase([v for _, v in points])
        times += [points[0][0], points[-1][0]]
    if not math.isfinite(value):
        return None
    return full[: -len(part)], labels, part, metric.get("le"), value, reset


def _point(name: str, point: Any, times: list[float] | None) -> tuple[float, float]:
    """``point``, a value of the JSON answer, as a sample; one clear line when it is not one."""
    try:
        at, value = float(point[0]), float(point[1])
    except (TypeError, ValueError, IndexError, KeyError):
        raise ReplayError(f"{name}: not a Prometheus sample [time, \"value\"]: {point!r}") from None
    if times is not None:
        times.append(at)
    return at, value


def _increase(values: list[float]) -> tuple[float, bool]:
    """How much a counter grew over its samples, and whether it fell: a drop is a restart from
    zero, so the value after it is all growth."""
    grown, fell = 0.0, False
    for before, now in zip(values, values[1:]):
        grown += now - before if now >= before else now
        fell |= now < before
    return grown, fell


def _interval(name: str, kind: SourceKind, times: list[float]) -> str:
    def iso(seconds: float) -> str:
        return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")

    if not times:
        return name
    if kind is SourceKind.VECTOR:
        return f"{name}: as the query counted it, evaluated at {iso(max(times))}"
    return f"{name}: increase from {iso(min(times))} to {iso(max(times))}"


def _le(text: str, name: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ReplayError(f"{name}: a bucket bound le={text!r} is not a number") from None


def _labels(labels: dict[str, str]) -> Labels:
    return tuple(sorted((str(k), str(v)) for k, v in labels.items()))


def _series(name: str, family: str, values: dict[Labels, dict],
            interval: str) -> dict[Labels, Series]:
    out = {}
    for labels, entry in values.items():
        buckets = sorted(_with_inf(name, family, labels, entry).items())
        if buckets:
            out[labels] = _cumulative(name, Series(
                family, labels, tuple(b for b, _ in buckets), tuple(v for _, v in buckets),
                entry.get("sum"), entry.get("count"), interval))
    return out


def _with_inf(name: str, family: str, labels: Labels, entry: dict) -> dict[float, float]:
    """A series' buckets with its ``+Inf`` bucket, which is its ``_count`` when the source left
    it out (a query that filtered ``le``): without it, the observations above the last bound
    would be dropped from the histogram."""
    buckets, count = entry["buckets"], entry.get("count")
    if not buckets or math.inf in buckets or count is None or not math.isfinite(count):
        return buckets
    last = max(buckets)
    if count < buckets[last]:
        raise ReplayError(f"{name}: {selector_of(family, [labels])}: its _count {count:g} is "
                          f"fewer than its bucket le={last:g} ({buckets[last]:g}), but the "
                          "count is the +Inf bucket, which holds every observation")
    return {**buckets, math.inf: count}


def _cumulative(name: str, series: Series) -> Series:
    """``series``, whose bucket counts must be counts (finite, >= 0) that never fall from one
    bound to the next, as a histogram's cumulative buckets are; else the source is damaged, and
    differencing its buckets would make up a histogram (a count that fell gave the bucket after
    it the difference, and the bucket before it a negative count)."""
    previous = (-math.inf, 0.0)
    for le, count in zip(series.le, series.cumulative):
        if not (math.isfinite(count) and count >= 0):
            raise ReplayError(f"{name}: {series.selector()}: the bucket le={le:g} counts "
                              f"{count:g}, not a number of observations")
        if count < previous[1]:
            raise ReplayError(f"{name}: {series.selector()}: the bucket le={le:g} counts "
                              f"{count:g}, fewer than le={previous[0]:g} ({previous[1]:g}), "
                              f"but a histogram's buckets are cumulative")
        previous = (le, count)
    return series


def component_of(source: Source) -> str:
    """Which component a scrape is of, by the families only it exports; a query result is a
    component of its own (it may sum many), and so is a scrape of anything else."""
    names = set(source.histograms) | set(source.other_types)
    if source.kind is SourceKind.SCRAPE:
        if names & set(APISERVER_FAMILIES):
            return "kube-apiserver"
        if any(name.startswith("scheduler_") for name in names):
            return "kube-scheduler"
        if "workqueue_queue_duration_seconds" in names:
            return "kube-controller-manager"
    return source.name


def collect(sources: list[Source], warn: Warn) -> tuple[dict[str, Family], dict[str, str]]:
    """Every histogram family over all sources, and the type of every family that is not a
    histogram.  Successive scrapes of one component are differenced; the families of different
    components (or query results) are put together, series of the same labels summed."""
    components: dict[str, list[Source]] = {}
    for source in sources:
        components.setdefault(component_of(source), []).append(source)
    families: dict[str, Family] = {}
    for component, scrapes in components.items():
        for name in sorted({f for s in scrapes for f in s.histograms}):
            family = _family(name, [s for s in scrapes if name in s.histograms], component, warn)
            families[name] = _joined(families[name], family) if name in families else family
    others = {f: t for s in sources for f, t in s.other_types.items() if f not in families}
    return dict(sorted(families.items())), others


def _family(name: str, sources: list[Source], component: str, warn: Warn) -> Family:
    """One component's family: its one scrape, or its last scrape minus the ones before."""
    family = Family(name, dict(sources[0].histograms[name]))
    for earlier, later in zip(sources, sources[1:]):
        interval = f"{component}, between {earlier.name} and {later.name}"
        series: dict[Labels, Series] = {}
        for labels, now in later.histograms[name].items():
            before = family.series.get(labels)
            if before is None:
                series[labels] = now  # appeared after the earlier scrape: all of it is new
                continue
            series[labels], reset = now.since(before, interval)
            if reset:
                why = ("its buckets changed" if now.le != before.le
                       else f"its count fell from {before.observations:g} to "
                            f"{now.observations:g}")
                warn(f"{later.name}: {now.selector()}: counter reset ({why}: the component "
                     f"restarted); this series is taken from {later.name} alone")
        family.series = series
    return family


def _joined(one: Family, other: Family) -> Family:
    """The series of two components' family together; a label set both have is summed when
    its buckets agree, else the first component's is kept."""
    series = dict(one.series)
    for labels, more in other.series.items():
        mine = series.get(labels)
        series[labels] = more if mine is None else (
            merged([mine, more]) if mine.le == more.le else mine)
    return Family(one.name, series)
