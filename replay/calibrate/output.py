"""What ``replay calibrate`` writes: the run config, with a comment on every key, and the mapping
table ``--explain`` prints.

The config is TOML written by hand (Python reads TOML but does not write it); the values are
numbers, strings and the inline tables of distributions, and ``write_config`` reads the result
back as a run config before it appears.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from replay.calibrate.mapping import MAPPINGS, UNMEASURED, Mapping, Use
from replay.engine.distributions import Histogram

if TYPE_CHECKING:
    from replay.calibrate import Calibration, Result
    from replay.calibrate.series import Series

QUANTILES = np.array([0.5, 0.99])
LATENCY_NOTE = ("A measured duration includes its queueing: it is the stage's latency, and its "
                "service is zero, or the model would queue on top of it.")
SCALAR_NOTE = ("The model takes one number here, so this is the histogram's mean ({how}); "
               "taking the whole distribution is a later step.")


def stage_table(stage: str, resource: str) -> str:
    """The config table a calibrated stage goes in.  Today's stages are run-wide, so the
    resource's series set ``[stages.STAGE]``; when per-resource stage keys exist, this returns
    ``resources.RESOURCE.stages.STAGE`` and each resource's series set its own."""
    return f"stages.{stage}"


def render_config(calibration: Calibration) -> str:
    lines = _header(calibration) + ['profile = "default"']
    by_stage: dict[str, list[Result]] = {}
    for result in calibration.written():
        if result.mapping.use in (Use.LATENCY, Use.SERVICE):
            by_stage.setdefault(result.mapping.target, []).append(result)
    for stage, results in by_stage.items():
        lines += ["", f"[{stage_table(stage, calibration.resource)}]"]
        for result in results:
            lines += _stage_keys(result)
    lines += _model_table(calibration)
    return "\n".join(lines) + "\n"


def _header(calibration: Calibration) -> list[str]:
    calibrated = {r.mapping.target for r in calibration.written()}
    kept = [(m.target, r.note) for m, r in _first_results(calibration)
            if m.use in (Use.LATENCY, Use.SERVICE) and m.target not in calibrated]
    kept += [(stage, why) for stage, why in UNMEASURED.items() if stage not in calibrated]
    lines = ["# Run configuration calibrated by `replay calibrate` (docs/calibration.md) from:",
             *_wrapped(", ".join(calibration.sources), "#   "),
             f'# The run-wide [stages.*] take the series of resource "{calibration.resource}" '
             "(stage keys per resource do not exist yet).",
             "# Stages kept at the profile's values:"]
    lines += [f"#   {stage}: {why}" for stage, why in kept]
    checks = [r for r in calibration.results if r.mapping.use is Use.CHECK and r.found]
    if checks:
        lines += _comment("Checks, not written: compare them with a run of this config "
                          "(replay query RUN per_component_delay, reaction_lag):")
        for result in checks:
            lines += _wrapped(f"{result.selector}: {_figures(result, interval=False)}; "
                              f"compare with {result.mapping.target}", "#   ")
    return lines + [""]


def _first_results(calibration: Calibration) -> list[tuple[Mapping, Result]]:
    seen: dict[Mapping, Result] = {}
    for result in calibration.results:
        seen.setdefault(result.mapping, result)
    return list(seen.items())


def _stage_keys(result: Result) -> list[str]:
    mapping, histogram = result.mapping, _found(result).histogram()
    lines = _comment(_provenance(result)) + _comment(f"{mapping.why}.")
    if mapping.use is Use.LATENCY:
        lines += _comment(LATENCY_NOTE)
        lines += [f"latency = {_distribution(histogram)}",
                  'service = { dist = "constant", ms = 0.0 }  # zero: see above']
    else:
        lines.append(f"service = {_distribution(histogram)}")
    return lines


def _model_table(calibration: Calibration) -> list[str]:
    means = [r for r in calibration.written() if r.mapping.use is Use.MEAN]
    if not means:
        return []
    live = calibration.model is not None
    if live:
        lines = ["", "[model]", f'name = "{calibration.model}"']
    else:
        lines = ["", "# Model parameters for the what-if models that take them; "
                 "`replay calibrate --model NAME` writes them", "# [model]"]
    for result in means:
        names = [result.mapping.target, *dict(result.mapping.also)]
        if live and not all(n in calibration.model_params for n in names):
            continue
        series = _found(result)
        how = ("exact, from _sum and _count" if series.sum is not None and series.count
               else "from the buckets' midpoints")
        lines += _comment(_provenance(result)) + _comment(f"{result.mapping.why}.")
        lines += _comment(SCALAR_NOTE.format(how=how))
        values = {result.mapping.target: series.mean_ms(), **dict(result.mapping.also)}
        lines += [("" if live else "# ") + f"{name} = {float(f'{value:.6g}')!r}"
                  for name, value in values.items()]
    return lines


def _found(result: Result) -> Series:
    """The series of a result that found some: the only results described with figures."""
    assert result.series is not None
    return result.series


def _provenance(result: Result) -> str:
    return (f"{result.selector}: {_count(_found(result).observations)} observations, "
            f"{result.interval}")


def _figures(result: Result, interval: bool = True) -> str:
    series = _found(result)
    p50, p99 = series.histogram().quantiles_ms(QUANTILES)
    when = f", {result.interval}" if interval else ""
    return (f"{_count(series.observations)} observations{when}; mean "
            f"{_ms(series.mean_ms())}, p50 {_ms(p50)}, p99 {_ms(p99)}")


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.3g} ms"


def _distribution(histogram: Histogram) -> str:
    fields = [f'dist = "{histogram.kind}"',
              f"le_ms = [{', '.join(_number(v, 9) for v in histogram.le_ms)}]",
              f"counts = [{', '.join(_number(v, 9) for v in histogram.counts)}]",
              "cumulative = false"]
    if histogram.max_ms is not None:
        fields.append(f"max_ms = {_number(histogram.max_ms, 6)}")
    return "{ " + ", ".join(fields) + " }"


def _number(value: float, digits: int) -> str:
    """A TOML number: an integer when it is one, else the float to ``digits`` digits."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(f"{value:.{digits}g}"))


def _count(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _comment(text: str) -> list[str]:
    return _wrapped(text, "# ")


def _wrapped(text: str, prefix: str, width: int = 100) -> list[str]:
    lines, line = [], prefix
    for word in text.split(" "):
        if len(line) + len(word) > width and line.strip() not in ("#", ""):
            lines.append(line.rstrip())
            line = prefix + ("  " if prefix == "#   " else "")
        line += word + " "
    return lines + [line.rstrip()]


def explain(calibration: Calibration | None, resource: str = "pods") -> str:
    """The mapping table: each row's target, metric and series, why; and with a calibration,
    what it found."""
    resource = calibration.resource if calibration else resource
    found: dict[Mapping, list[Result]] = {}
    for result in calibration.results if calibration else []:
        found.setdefault(result.mapping, []).append(result)
    blocks = []
    for mapping in MAPPINGS:
        block = [f"{_target(mapping)} <- {mapping.selector(resource)}",
                 *_wrapped(f"{_use(mapping)}: {mapping.why}", "    ")]
        for result in found.get(mapping, []):
            label = f"{mapping.split}={result.split_value}: " if result.split_value else ""
            if result.found:
                block += _wrapped(f"{label}found {_figures(result)}", "    ")
            if result.note:
                block += _wrapped(f"{label}{result.note}", "    ")
        blocks.append("\n".join(block))
    stages = "\n".join(f"stages.{stage} <- no metric\n    {why}"
                       for stage, why in UNMEASURED.items())
    return "\n\n".join(blocks + [stages]) + "\n"


def _target(mapping: Mapping) -> str:
    if mapping.use is Use.CHECK:
        return f"check ({mapping.target})"
    if mapping.use is Use.MEAN:
        return f"model.{mapping.target}"
    return f"stages.{mapping.target}.{mapping.use.value}"


def _use(mapping: Mapping) -> str:
    return {Use.LATENCY: "latency, service 0", Use.SERVICE: "service",
            Use.MEAN: "the mean" + (" (and " + ", ".join(f"{k} = {v:g}" for k, v in
                                                         mapping.also) + ")"
                                    if mapping.also else ""),
            Use.CHECK: "reported, not written"}[mapping.use]

