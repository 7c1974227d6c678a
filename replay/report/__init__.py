"""``replay report``: one self-contained HTML page of figures for one run, a comparison or a sweep.

    from replay.report import write_report
    result = write_report(["runs/sample-godel"], "report.html")

The numbers come from the shipped queries (``replay.report.data``), the sections that show them
from ``replay.report.sections``; the page is drawn with Plotly (``replay.report.html``) and,
for papers, the same figures as PNG and SVG files with matplotlib (``replay.report.static``).
Both libraries are the ``report`` extra.  docs/report.md describes the sections.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from replay.analysis.runs import check_run_dir, runs_of
from replay.atomic import atomic_file
from replay.errors import ReplayError
from replay.outputs import check_output
from replay.report import data, html
from replay.report.page import Page
from replay.report.sections import build_sections

__all__ = ["ReportResult", "build_page", "write_report"]


@dataclass
class ReportResult:
    out: Path
    bytes: int
    sections: list[str]  # the keys of the sections drawn
    figures: int
    static: list[Path] = field(default_factory=list)  # the --static files written
    seconds: dict[str, float] = field(default_factory=dict)  # "queries", "page", "static"


def build_page(run_dirs: Sequence[str], from_ts: dt.datetime | None = None,
               to_ts: dt.datetime | None = None, title: str | None = None) -> Page:
    """The report's sections over ``run_dirs`` (a sweep's directory stands for its finished
    points), restricted to [from_ts, to_ts) if given."""
    given = run_dirs
    run_dirs = runs_of(given)
    answers = data.load(run_dirs, {"from_ts": from_ts, "to_ts": to_ts})
    options: list[str] = []
    for option, value in (("--from", from_ts), ("--to", to_ts)):
        if value is not None:
            options += [option, value.isoformat()]
    names = [Path(path).resolve().name for path in given]
    return Page(title or f"replay report: {', '.join(names)}", tuple(str(p) for p in run_dirs),
                build_sections(answers), tuple(options),
                tuple(dict.fromkeys(run.trace for run in answers.runs)))


def write_report(run_dirs: Sequence[str], out: str | os.PathLike,
                 static: str | os.PathLike | None = None, from_ts: dt.datetime | None = None,
                 to_ts: dt.datetime | None = None, title: str | None = None) -> ReportResult:
    """Write the report of ``run_dirs`` to ``out`` (complete or not at all), and with ``static``
    its figures as PNG and SVG files in that folder."""
    out = Path(out)
    for path in [out] + ([Path(static)] if static is not None else []):
        _not_in_a_run(path, run_dirs)
    for run in runs_of(run_dirs):
        check_run_dir(run)  # say what is wrong with the input first
    html.plotly_js()  # the extra is there, before minutes of queries
    check_output(out)  # and the outputs can be written
    if static is not None:
        from replay.report import static as static_files
        static_files.check_installed()
        folder = Path(static).resolve()
        if folder == out.resolve() or folder in out.resolve().parents:
            raise ReplayError(f"{static}: is or holds the --out file; give --static a folder "
                              f"of its own")
        static_files.check_folder(Path(static))
    seconds = {"queries": -time.perf_counter()}
    page = build_page(run_dirs, from_ts, to_ts, title)
    seconds["queries"] += time.perf_counter()
    for trace in page.traces:
        if out.resolve() == Path(trace).resolve():
            raise ReplayError(f"{out}: the trace of a run, an input; write the report elsewhere")
    seconds["page"] = -time.perf_counter()
    text = html.render(page)
    figures = [f for s in page.sections for f in s.figures]
    written: list[Path] = []
    try:
        with atomic_file(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
            seconds["page"] += time.perf_counter()
            if static is not None:  # inside: the page appears only if the figures did
                seconds["static"] = -time.perf_counter()
                written = static_files.write_figures(figures, Path(static))
                seconds["static"] += time.perf_counter()
    except OSError as err:
        raise ReplayError(f"{out}: cannot write the report ({err.strerror or err})") from None
    return ReportResult(out, len(text.encode()), [s.key for s in page.sections], len(figures),
                        written, seconds)


def _not_in_a_run(path: Path, run_dirs: Sequence[str]) -> None:
    """The report's files go beside the runs, never into one (a run directory is an input)."""
    where = path.resolve()
    for run in run_dirs:
        run_path = Path(run).resolve()
        if where == run_path or run_path in where.parents:
            raise ReplayError(f"{path}: inside the run directory {run}, an input; write the "
                              f"report elsewhere")
