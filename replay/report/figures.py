"""What a report's figure shows, independent of how it is drawn.

A figure is a grid of panels; a panel has two axes and either series (lines or bars) or a heat
map.  The page draws these with Plotly (``replay.report.html``) and ``--static`` with matplotlib
(``replay.report.static``): one description, two renderers, so the picture in a paper is the one
in the page.  Colours are chosen here, not by either library, for the same reason.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

# Tableau's ten colours (Plotly's and matplotlib's default cycle), then darker variants.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
           "#7b4173", "#3182bd")


class Mark(enum.Enum):
    LINE = "line"  # a line through the points, with a marker on each
    BAR = "bar"


class Dash(enum.Enum):
    SOLID = "solid"
    DASH = "dash"
    DOT = "dot"
    DASHDOT = "dashdot"


DASHES = tuple(Dash)


class Scale(enum.Enum):
    LINEAR = "linear"
    LOG = "log"
    CATEGORY = "category"  # labels, in the order of Axis.categories
    TIME = "time"  # datetimes (UTC)


class BarMode(enum.Enum):
    GROUP = "group"  # a panel's bar series side by side
    STACK = "stack"  # on top of each other: their sum means something


@dataclass(frozen=True)
class Axis:
    title: str
    scale: Scale = Scale.LINEAR
    categories: tuple[str, ...] = ()  # for Scale.CATEGORY: every label, in order


@dataclass(frozen=True)
class Series:
    name: str
    x: tuple
    y: tuple  # None where there is no value
    mark: Mark
    color: str
    dash: Dash = Dash.SOLID
    legend_group: str = ""  # series with one group show one legend entry ("" = their own)
    show_legend: bool = True


@dataclass(frozen=True)
class Heatmap:
    x: tuple  # columns
    y: tuple[str, ...]  # rows, top to bottom
    z: tuple[tuple[float | None, ...], ...]  # z[row][column]
    label: str  # what the colour measures


@dataclass(frozen=True)
class Panel:
    title: str
    x: Axis
    y: Axis
    series: tuple[Series, ...] = ()
    heatmap: Heatmap | None = None

    def __post_init__(self) -> None:
        # a series without a single value (a role with no phantom windows) is left out: a
        # legend entry with nothing drawn only misleads
        kept = tuple(s for s in self.series if any(v is not None for v in s.y))
        object.__setattr__(self, "series", kept)

    def has_data(self) -> bool:
        if self.heatmap is not None:
            return any(v is not None for row in self.heatmap.z for v in row)
        return any(any(v is not None for v in s.y) for s in self.series)


@dataclass(frozen=True)
class Figure:
    key: str  # unique in a report: the element's id and --static's file name
    title: str
    panels: tuple[Panel, ...]
    columns: int = 1  # panels per row
    bar_mode: BarMode = BarMode.GROUP
    height: int = 0  # pixels of one row of panels; 0: the default for the kind of figure

    @property
    def rows(self) -> int:
        return -(-len(self.panels) // self.columns)

    @property
    def row_height(self) -> int:
        return self.height or (360 if any(p.heatmap for p in self.panels) else 320)


@dataclass
class Styles:
    """Colour (and dash) per label, handed out in the order labels are first asked for, so a
    label keeps its colour in every figure of a report.  Each family of labels (roles, stages,
    ...) starts at the palette's first colour; ``fixed`` colours a few labels by meaning."""

    fixed: dict[str, str] = field(default_factory=dict)
    colors: dict[tuple[str, str], str] = field(default_factory=dict)
    dashes: dict[str, Dash] = field(default_factory=dict)

    def color(self, label: str, family: str = "") -> str:
        if label in self.fixed:
            return self.fixed[label]
        if (family, label) not in self.colors:
            taken = sum(1 for f, _ in self.colors if f == family)
            self.colors[family, label] = PALETTE[taken % len(PALETTE)]
        return self.colors[family, label]

    def dash(self, label: str) -> Dash:
        if label not in self.dashes:
            self.dashes[label] = DASHES[len(self.dashes) % len(DASHES)]
        return self.dashes[label]


def category_axis(title: str, labels: Sequence[str]) -> Axis:
    return Axis(title, Scale.CATEGORY, tuple(labels))
