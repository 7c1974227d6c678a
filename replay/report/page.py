"""What a report page holds: sections of figures and tables, each number with its source.

Renderers (``replay.report.html``, ``replay.report.static``) read these; the sections are built
by ``replay.report.sections``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from replay.report.figures import Figure


@dataclass(frozen=True)
class Cell:
    text: str
    value: Any = None  # the exact number behind the text (None: a label or no value)
    source: str = ""  # where the value comes from: "query: column", empty for labels


@dataclass(frozen=True)
class Table:
    key: str
    caption: str
    header: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Section:
    key: str  # the element's id
    title: str
    guide: str  # one sentence: how to read the section
    queries: tuple[str, ...]  # the shipped queries whose answers it shows
    tables: tuple[Table, ...] = ()
    figures: tuple[Figure, ...] = ()


@dataclass(frozen=True)
class Page:
    title: str
    runs: tuple[str, ...]  # the run directories, as given
    sections: tuple[Section, ...]
    options: tuple[str, ...] = ()  # replay query's options that give the same numbers
    # (--from, --to), if the report was restricted to a time window
    traces: tuple[str, ...] = ()  # the runs' traces (inputs too)


def number(value: Any) -> str:
    """A number as the page shows it: integers in full, other numbers to about 4 digits."""
    if value is None:
        return "–"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.1f}"
    if abs(value) >= 1:
        return f"{value:.3f}"
    return f"{value:.3g}"


def label(text: Any) -> Cell:
    return Cell(str(text))


def measured(value: Any, source: str) -> Cell:
    return Cell(number(value), value, source)
