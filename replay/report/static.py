"""``--static DIR``: the report's figures as PNG and SVG files, for papers, drawn with matplotlib.

Plotly's own static export needs a browser (Kaleido drives Chromium) at run time; matplotlib
draws the same ``Figure`` descriptions without one.  Files are named after the figures
(``delay-cdf.png``, ``delay-cdf.svg``, ...) and written into a new folder that replaces DIR
only once complete.  The same figures give the same bytes (no dates or random ids in the SVG).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from replay.atomic import atomic_dir
from replay.errors import ReplayError
from replay.outputs import check_output
from replay.report.figures import BarMode, Dash, Figure, Heatmap, Mark, Panel, Scale

if TYPE_CHECKING:
    from matplotlib.artist import Artist

FORMATS = ("png", "svg")
DPI = 150
LINESTYLES = {Dash.SOLID: "-", Dash.DASH: "--", Dash.DOT: ":", Dash.DASHDOT: "-."}
PANEL_WIDTH, PANEL_HEIGHT = 5.0, 3.4  # inches


def check_installed() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise ReplayError("replay report --static needs matplotlib: "
                          "pip install 'k8s-watch-replay[report]'") from None


def check_folder(folder: Path) -> None:
    """``folder`` can take the figures: it is missing, or a folder of earlier figures only (which
    they replace), in a folder this process may write in."""
    if folder.exists() and not folder.is_dir():
        raise ReplayError(f"{folder}: not a folder; choose another --static folder")
    if folder.exists():
        others = [p.name for p in folder.iterdir() if p.suffix[1:] not in FORMATS]
        if others:
            raise ReplayError(f"{folder}: exists and holds other files than figures "
                              f"({', '.join(sorted(others)[:3])}); choose another --static "
                              f"folder")
    check_output(folder, directory=True)


def write_figures(figures: Sequence[Figure], folder: Path) -> list[Path]:
    """Draw every figure into ``folder`` as PNG and SVG; replace a folder of earlier figures
    (``check_folder`` says first whether it may: ``write_report`` asks before its queries)."""
    import matplotlib

    names = []
    try:
        with matplotlib.rc_context({"svg.hashsalt": "replay", "font.size": 9}), \
                atomic_dir(folder, replace=True) as tmp:
            for figure in figures:
                drawn = draw(figure)
                for fmt in FORMATS:
                    drawn.savefig(tmp / f"{figure.key}.{fmt}", format=fmt, dpi=DPI,
                                  metadata={"Date": None} if fmt == "svg" else {"Software": None})
                    names.append(f"{figure.key}.{fmt}")
    except OSError as err:
        raise ReplayError(f"{folder}: cannot write the figures ({err.strerror or err})") from None
    return [folder / name for name in names]


def draw(figure: Figure):
    """The figure as a matplotlib Figure (not registered with pyplot: no global state)."""
    from matplotlib.figure import Figure as Canvas

    canvas = Canvas(figsize=(PANEL_WIDTH * figure.columns + 2.2, PANEL_HEIGHT * figure.rows + 0.8),
                    layout="constrained")
    grid = canvas.subplots(figure.rows, figure.columns, squeeze=False)
    cells = [ax for row in grid for ax in row]
    heat_range = _heat_range(figure)
    meshes = []
    for panel, ax in zip(figure.panels, cells):
        if panel.heatmap is not None:
            meshes.append(_heatmap(panel.heatmap, ax, heat_range))
        else:
            _series(panel, ax, figure.bar_mode)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(panel.x.title)
        ax.set_ylabel(panel.y.title)
    for ax in cells[len(figure.panels):]:
        ax.set_visible(False)
    if meshes:
        first = figure.panels[0].heatmap
        assert first is not None  # a figure of heat maps has only heat maps (sections._heatmap)
        canvas.colorbar(meshes[-1], ax=cells[:len(figure.panels)], label=first.label)
    handles: dict[str, Artist] = {}
    for ax in cells:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, handle)
    if handles:
        canvas.legend(list(handles.values()), list(handles), loc="outside right upper",
                      fontsize=8, frameon=False)
    canvas.suptitle(figure.title, x=0.01, ha="left", fontsize=11)
    return canvas


def _series(panel: Panel, ax, mode: BarMode) -> None:
    bars = [s for s in panel.series if s.mark is Mark.BAR]
    width = 0.8 if mode is BarMode.STACK or not bars else 0.8 / len(bars)
    bottoms: dict[int, float] = {}
    for series in panel.series:
        x = _positions(panel, series.x)
        y = [math.nan if v is None else v for v in series.y]
        name = series.name if series.show_legend else None
        if series.mark is Mark.LINE:
            ax.plot(x, y, LINESTYLES[series.dash], color=series.color, label=name, linewidth=1.5,
                    marker="o" if len(x) <= 60 else None, markersize=3)
            continue
        at = bars.index(series)
        if mode is BarMode.STACK:
            base = [bottoms.get(i, 0.0) for i in range(len(x))]
            ax.bar(x, [0 if math.isnan(v) else v for v in y], width, bottom=base,
                   color=series.color, label=name)
            for i, v in enumerate(y):
                bottoms[i] = base[i] + (0 if math.isnan(v) else v)
        else:
            offset = (at - (len(bars) - 1) / 2) * width
            ax.bar([p + offset for p in x], y, width, color=series.color, label=name)
    _scales(panel, ax)


def _positions(panel: Panel, xs) -> list:
    if panel.x.scale is Scale.CATEGORY:
        where = {c: i for i, c in enumerate(panel.x.categories)}
        return [where[x] for x in xs]
    if panel.x.scale is Scale.TIME:
        return [_naive_utc(x) for x in xs]
    return list(xs)


def _scales(panel: Panel, ax) -> None:
    if panel.x.scale is Scale.CATEGORY:
        ax.set_xticks(range(len(panel.x.categories)), panel.x.categories, rotation=30,
                      ha="right", fontsize=7)
    elif panel.x.scale is Scale.LOG:
        ax.set_xscale("log")
    if panel.y.scale is Scale.LOG:
        ax.set_yscale("log")
    if panel.x.scale is Scale.TIME:
        import matplotlib.dates as mdates

        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    ax.grid(True, color="#e5e5e5", linewidth=0.6)


def _heat_range(figure: Figure) -> tuple[float, float]:
    """One colour scale for every heat map of the figure, so runs compare by colour."""
    found = [v for p in figure.panels if p.heatmap for row in p.heatmap.z for v in row
             if v is not None]
    return (min(found, default=0.0), max(found, default=1.0) or 1.0)


def _heatmap(heat: Heatmap, ax, heat_range: tuple[float, float]):
    import matplotlib.dates as mdates

    times = [_naive_utc(x) for x in heat.x]
    step = times[1] - times[0] if len(times) > 1 else dt.timedelta(minutes=1)
    edges = times + [times[-1] + step] if times else []
    z = [[math.nan if v is None else v for v in row] for row in heat.z]
    mesh = ax.pcolormesh(edges, range(len(heat.y) + 1), z, cmap="viridis",
                         vmin=heat_range[0], vmax=heat_range[1])
    ax.set_yticks([i + 0.5 for i in range(len(heat.y))], heat.y, fontsize=6)
    ax.invert_yaxis()  # the worst node on top, as on the page
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M"))
    return mesh


def _naive_utc(value):
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return value
