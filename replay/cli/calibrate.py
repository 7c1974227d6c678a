"""``replay calibrate SOURCE... --out FILE.toml``: a run config from a cluster's own metrics."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from replay.cli.arguments import output_path
from replay.times import parse_time

if TYPE_CHECKING:
    from replay.calibrate import Calibration
    from replay.calibrate.sources import Window


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "calibrate", help="write a run config from a cluster's Prometheus histograms",
        description="Read what a cluster measured (Prometheus text-format scrapes such as "
                    "`kubectl get --raw /metrics`, or Prometheus HTTP API JSON results of "
                    "_bucket series) and write a run config whose stage costs and model "
                    "parameters come from those histograms, every key with a comment naming "
                    "its metric, series, observations and interval. Two scrapes of one "
                    "component, earlier first, are differenced. docs/calibration.md has the "
                    "commands to collect the inputs and the mapping table.")
    parser.add_argument("sources", nargs="*", metavar="SOURCE",
                        help="a scrape (FILE.prom), a JSON result (FILE.json), or "
                             "METRIC=FILE.json for a result whose series have no metric name")
    parser.add_argument("--out", type=output_path, metavar="FILE.toml",
                        help="the run config to write")
    parser.add_argument("--resource", default="pods",
                        help="whose series calibrate the run-wide stages (default: pods)")
    parser.add_argument("--window", type=_window, metavar="START/END",
                        help="only the samples of range (matrix) results within START/END "
                             "(ISO 8601; either side may be empty)")
    parser.add_argument("--model", metavar="NAME",
                        help="write the model parameters (commit_ms, per_attempt_ms) for this "
                             "model and name it in [model]; without it they are written as "
                             "comments")
    parser.add_argument("--explain", action="store_true",
                        help="print the mapping table (with SOURCEs: what each row found)")
    parser.set_defaults(run=run, parser=parser)


def describe_written(result: Calibration) -> str:
    """Which stages and model parameters the config sets, in a few words."""
    from replay.calibrate.mapping import Use

    stages = [f"stages.{r.mapping.target}.{r.mapping.use.value}" for r in result.written()
              if r.mapping.use is not Use.MEAN]
    params = [r.mapping.target for r in result.written() if r.mapping.use is Use.MEAN
              and (result.model is None or r.mapping.target in result.model_params)]
    parts = [", ".join(stages)] if stages else []
    if params and result.model is not None:
        parts.append(f"model {result.model}: {', '.join(params)}")
    elif params:
        parts.append(f"{', '.join(params)} as comments (--model NAME writes them)")
    return "; ".join(parts)


def _window(text: str) -> Window:
    from replay.calibrate.sources import Window

    start, sep, end = text.partition("/")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected START/END, got {text!r}")
    try:
        window = Window(parse_time(start) if start else None, parse_time(end) if end else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not ISO 8601 times: {text!r}") from None
    if window.start is not None and window.end is not None and window.start > window.end:
        raise argparse.ArgumentTypeError(f"START is after END: {text!r}")
    return window


def run(args: argparse.Namespace) -> int:
    # (cli/main.py: imported when run)
    from replay.calibrate import calibrate, write_config
    from replay.calibrate.output import explain

    if not args.sources:
        if args.explain:
            print(explain(None, args.resource), end="")
            return 0
        args.parser.error("give at least one SOURCE (or --explain alone for the mapping table)")
    if args.out is None and not args.explain:
        args.parser.error("--out is required (or --explain to print what the sources give)")
    result = calibrate(args.sources, args.resource, args.window, args.model)
    for warning in result.warnings:
        print(f"replay: warning: {warning}", file=sys.stderr)
    if args.explain:
        print(explain(result), end="")
    if args.out is not None:
        out = write_config(result, args.out)
        print(f"wrote {out}: {describe_written(result)}")
    return 0
