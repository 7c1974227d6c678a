"""``replay report RUN_DIR... --out report.html``: one self-contained HTML page of figures."""

from __future__ import annotations

import argparse

from replay.cli.arguments import output_path
from replay.report import write_report
from replay.times import check_window, time_argument


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "report", help="draw one or more runs as a self-contained HTML page of figures",
        description="Draw the shipped queries' answers over one or more run directories as one "
                    "HTML file that opens offline (Plotly inlined, no network request): an "
                    "overview with the headline numbers, where the delay comes from, delay "
                    "over time, conflicts, blind and phantom capacity; with several runs, "
                    "overlaid per run with a comparison table. Needs the report extra: "
                    "pip install 'k8s-watch-replay[report]'. docs/report.md describes the page.")
    parser.add_argument("run_dirs", nargs="+", metavar="RUN_DIR",
                        help="run directories, or a sweep's directory for its finished points")
    parser.add_argument("--out", required=True, type=output_path, metavar="FILE",
                        help="the HTML file to write (appears only when complete)")
    parser.add_argument("--static", type=output_path, metavar="DIR",
                        help="also write every figure as DIR/NAME.png and DIR/NAME.svg "
                             "(matplotlib), for papers")
    parser.add_argument("--title", help="the page's title (default: the runs' names)")
    parser.add_argument("--from", dest="from_ts", type=time_argument, metavar="TIME",
                        help="only what happens from TIME on (ISO 8601; UTC unless it says), "
                             "as replay query --from")
    parser.add_argument("--to", dest="to_ts", type=time_argument, metavar="TIME",
                        help="only what happens before TIME")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_window(args.from_ts, args.to_ts)
    result = write_report(args.run_dirs, args.out, static=args.static, from_ts=args.from_ts,
                          to_ts=args.to_ts, title=args.title)
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    print(f"wrote {result.out} ({result.bytes / 1e6:.1f} MB; {result.figures} figures in "
          f"{len(result.sections)} sections: {', '.join(result.sections)}; {timing})")
    if result.static:
        print(f"wrote {len(result.static)} files in {args.static}")
    return 0
