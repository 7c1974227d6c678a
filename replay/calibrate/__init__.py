"""Calibrating the delay model from a cluster's own metrics: ``replay calibrate``.

    from replay.calibrate import calibrate, write_config
    result = calibrate(["t0.prom", "t1.prom", "scheduler.prom"], resource="pods")
    write_config(result, "calibrated.toml")

``calibrate`` reads the sources (``replay.calibrate.sources``), takes from each histogram family
the series the mapping table names (``replay.calibrate.mapping``), and returns what each row
found; ``write_config`` writes the run config (``replay.calibrate.output``).  Warnings (a family
missing, a counter reset, buckets that do not match) are returned, one line each, not printed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from replay import models
from replay.atomic import atomic_file
from replay.calibrate.mapping import MAPPINGS, Mapping, Use, event_resource
from replay.calibrate.output import render_config
from replay.calibrate.series import Series, layouts, merged, selector_of
from replay.calibrate.sources import Family, Window, check_given_once, collect, read_source
from replay.engine.config import load_config
from replay.errors import ReplayError
from replay.outputs import check_output

__all__ = ["Calibration", "Result", "Window", "calibrate", "write_config"]


@dataclass
class Result:
    """What one row of the mapping table found: the series it merged, or why there are none."""

    mapping: Mapping
    split_value: str = ""  # the split label's value, for a check reported per label value
    series: Series | None = None
    selector: str = ""  # the series merged, as a PromQL selector
    interval: str = ""
    note: str = ""  # why nothing was found

    @property
    def found(self) -> bool:
        return self.series is not None and self.series.observations > 0


@dataclass
class Calibration:
    sources: list[str]
    resource: str
    model: str | None  # the model whose parameters are written; None: they are shown only
    results: list[Result]
    warnings: list[str] = field(default_factory=list)
    model_params: frozenset[str] = frozenset()  # the parameters ``model`` takes

    def written(self) -> list[Result]:
        """The rows that set a stage or a model parameter."""
        return [r for r in self.results if r.found and r.mapping.use is not Use.CHECK]


def calibrate(sources: list[str], resource: str = "pods", window: Window | None = None,
              model: str | None = None) -> Calibration:
    """What the ``sources`` (scrapes, Prometheus API results) measured, row by row of the
    mapping table, for ``resource``'s series."""
    params = frozenset(p.name for p in models.load(model).params) if model else frozenset()
    warnings: list[str] = []
    check_given_once(sources)
    read = [read_source(spec, window, warnings.append) for spec in sources]
    families, others = collect(read, warnings.append)
    results: list[Result] = []
    for mapping in MAPPINGS:
        found = _apply(mapping, families, others, resource)
        results += found
        warnings += [f"{r.selector}: {r.note}" for r in found if r.found and r.note]
        if mapping.use is not Use.CHECK and not any(r.found for r in found):
            warnings.append(f"{mapping.selector(resource)}: {found[0].note}; "
                            f"{mapping.target} keeps {_kept(mapping)}")
    calibration = Calibration(list(sources), resource, model, results, warnings, params)
    if model is not None:
        for result in calibration.written():
            absent = [n for n in (result.mapping.target, *dict(result.mapping.also))
                      if result.mapping.use is Use.MEAN and n not in calibration.model_params]
            if absent:
                warnings.append(f"model {model!r} has no parameter {absent[0]!r}: the mean of "
                                f"{result.mapping.metric} is not written")
    return calibration


def _resources_taken(mapping: Mapping, family: Family) -> list[str]:
    """The resources whose series this row would take, were ``--resource`` one of them: a
    misspelt or absent resource is told what the sources hold."""
    taken = set()
    for series in family.series.values():
        labels = series.label_map
        for candidate in (labels.get("resource"), event_resource(labels.get("event", ""))):
            if candidate and mapping.select(labels, candidate):
                taken.add(candidate)
    return sorted(taken)


def _kept(mapping: Mapping) -> str:
    return "the model's default" if mapping.use is Use.MEAN else "the profile's value"


def _apply(mapping: Mapping, families: dict[str, Family], others: dict[str, str],
           resource: str) -> list[Result]:
    """The results of one row: one, or one per value of the row's split label."""
    family = families.get(mapping.metric)
    if family is None:
        kind = others.get(mapping.metric)
        return [Result(mapping, note=f"a {kind}, not a histogram" if kind
                       else "not in the sources")]
    chosen = [s for s in family.series.values() if mapping.select(s.label_map, resource)]
    if not chosen:
        held = _resources_taken(mapping, family) if "{resource}" in mapping.selection else []
        return [Result(mapping, note="no such series in the sources" + (
            f" (they hold those of {', '.join(held)}: --resource chooses)" if held else ""))]
    groups: dict[str, list[Series]] = {}
    for series in chosen:
        groups.setdefault(series.label_map.get(mapping.split, "") if mapping.split else "",
                          []).append(series)
    return [_merge(mapping, value, group, family) for value, group in sorted(groups.items())]


def _merge(mapping: Mapping, value: str, group: list[Series], family: Family) -> Result:
    """The series of one group summed; series whose buckets differ from the most observed
    layout's are left out, with a note."""
    by_layout = list(layouts(group).values())
    taken = by_layout[0]
    series = merged(taken)
    selector = selector_of(family.name, [s.labels for s in taken])
    result = Result(mapping, value, series, selector, series.interval)
    others = [s for layout in by_layout[1:] for s in layout]
    if others:
        result.note = (f"{len(others)} series with other buckets than the {len(taken)} taken "
                       f"left out (e.g. {others[0].selector()})")
    elif not result.found:
        result.note = "no observations in the interval"
    return result


def write_config(calibration: Calibration, out: str | os.PathLike) -> Path:
    """Write the calibrated run config to ``out`` atomically, never over one of its sources;
    an error if nothing was calibrated."""
    out = Path(out)
    if not calibration.written():
        reasons = "; ".join(sorted({f"{r.mapping.metric}: {r.note}" for r in calibration.results
                                    if r.mapping.use is not Use.CHECK}))
        raise ReplayError(f"nothing to calibrate from {', '.join(calibration.sources)} "
                          f"({reasons})")
    check_output(out, [path for source in calibration.sources  # (METRIC=FILE.json: FILE.json)
                       for path in (source, source.partition("=")[2]) if path])
    text = render_config(calibration)
    try:
        with atomic_file(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
            load_config(tmp)  # what was written is a valid run config, or nothing is written
    except OSError as err:
        raise ReplayError(f"{out}: cannot write it ({err.strerror or err})") from None
    return out
