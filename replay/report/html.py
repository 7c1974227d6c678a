"""The report as one HTML file: Plotly's JavaScript inlined once, the figures as JSON, no request.

The file opens offline and can be attached to a ticket: nothing is fetched when it is opened
(no CDN, no web font, no map tiles; the browser tests check this), and it holds the queries'
answers only.  The same inputs give the same bytes: nothing in it depends on when it was made.
Plotly (https://plotly.com/javascript/) is the ``report`` extra's dependency; its Python package
is used only for the copy of plotly.js it ships.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import re
import shlex
from typing import Any

from replay import __version__
from replay.errors import ReplayError
from replay.report.figures import Figure, Mark, Panel, Scale, Series
from replay.report.page import Page, Section, Table

EXTRA_HINT = "pip install 'k8s-watch-replay[report]'"
MARKERS_UP_TO = 60  # a line of at most this many points shows a marker on each
GAP_X, GAP_Y = 0.08, 0.16  # between panels, as fractions of the plotting area
CONFIG = {"displaylogo": False, "responsive": True,
          "toImageButtonOptions": {"format": "svg", "scale": 1}}


def plotly_js() -> str:
    """plotly.js, minified, from the plotly package (the ``report`` extra)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise ReplayError(f"replay report needs Plotly: {EXTRA_HINT}") from None
    return get_plotlyjs()


def render(page: Page) -> str:
    """The page as a complete, self-contained HTML document."""
    figures = [f for s in page.sections for f in s.figures]
    script = "\n".join(
        f"Plotly.newPlot({_json('fig-' + f.key)}, {_json(plotly_figure(f))}, {_json(CONFIG)});"
        for f in figures)
    body = "\n".join(_section(s, page) for s in page.sections)
    nav = " · ".join(f'<a href="#{s.key}">{html.escape(s.title)}</a>' for s in page.sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="replay {html.escape(__version__)}">
<title>{html.escape(page.title)}</title>
<style>{STYLE}</style>
<script>{_inline(plotly_js())}</script>
</head>
<body>
<header>
<h1>{html.escape(page.title)}</h1>
<p class="runs">{_runs_line(page)}</p>
<nav>{nav}</nav>
</header>
<main>
{body}
</main>
<footer>Made by replay {html.escape(__version__)} from the shipped queries (queries/README.md);
this file needs no network.</footer>
<script>{_inline(script)}</script>
</body>
</html>
"""


def _runs_line(page: Page) -> str:
    runs = ", ".join(f"<code>{html.escape(r)}</code>" for r in page.runs)
    window = (f"; only <code>{html.escape(shlex.join(page.options))}</code>" if page.options
              else "")
    return f"{len(page.runs)} run{'s' if len(page.runs) > 1 else ''}: {runs}{window}"


def _section(section: Section, page: Page) -> str:
    reproduce = " ".join(
        f"<code>{html.escape(reproduce_command(page, query))}</code>"
        for query in section.queries)
    parts = [f'<section id="{section.key}" data-figures="{len(section.figures)}">',
             f"<h2>{html.escape(section.title)}</h2>",
             f'<p class="guide">{_markup(section.guide)}</p>',
             f'<p class="reproduce">Every number: {reproduce}</p>']
    parts += [_table(t) for t in section.tables]
    parts += [f'<div class="figure" id="fig-{f.key}" data-traces="{len(plotly_traces(f))}">'
              f"</div>" for f in section.figures]
    parts.append("</section>")
    return "\n".join(parts)


def reproduce_command(page: Page, query: str) -> str:
    return shlex.join(["replay", "query", *page.runs, query, *page.options])


def _markup(text: str) -> str:
    """Plain text with `code` spans."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in table.header)
    rows = []
    for row in table.rows:
        cells = []
        for cell in row:
            if cell.source:
                cells.append(f'<td class="number" data-value="{_value(cell.value)}" '
                             f'title="{html.escape(cell.source)}">{html.escape(cell.text)}</td>')
            else:
                cells.append(f"<td>{html.escape(cell.text)}</td>")
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<table id="table-{table.key}"><caption>{html.escape(table.caption)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _value(value: Any) -> str:
    return "" if value is None else html.escape(repr(value))


# --- Plotly --------------------------------------------------------------------------------------

def plotly_figure(figure: Figure) -> dict:
    """The figure as Plotly's ``{data, layout}``: one pair of axes per panel, laid out by hand
    so that each panel's title sits above it."""
    layout: dict[str, Any] = {
        "title": {"text": figure.title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "height": figure.rows * figure.row_height + 90,
        "margin": {"l": 70, "r": 30, "t": 70, "b": 60},
        "barmode": figure.bar_mode.value,
        "hovermode": "closest",
        "annotations": [],
        "plot_bgcolor": "#fafafa",
    }
    for index, panel in enumerate(figure.panels):
        (x0, x1), (y0, y1) = _domain(figure, index)
        suffix = "" if index == 0 else str(index + 1)
        layout[f"xaxis{suffix}"] = {**_axis(panel.x), "domain": [x0, x1], "anchor": f"y{suffix}"}
        layout[f"yaxis{suffix}"] = {**_axis(panel.y), "domain": [y0, y1], "anchor": f"x{suffix}"}
        if panel.heatmap is not None:
            layout[f"yaxis{suffix}"]["autorange"] = "reversed"  # the worst node on top
            layout["coloraxis"] = {"colorscale": "Viridis",
                                   "colorbar": {"title": {"text": panel.heatmap.label}}}
        if panel.title:
            layout["annotations"].append({
                "text": f"<b>{html.escape(panel.title)}</b>", "showarrow": False,
                "xref": "paper", "yref": "paper", "x": (x0 + x1) / 2, "y": y1,
                "xanchor": "center", "yanchor": "bottom"})
    return {"data": plotly_traces(figure), "layout": layout}


def plotly_traces(figure: Figure) -> list[dict]:
    traces = []
    for index, panel in enumerate(figure.panels):
        suffix = "" if index == 0 else str(index + 1)
        axes = {"xaxis": f"x{suffix}", "yaxis": f"y{suffix}"}
        if panel.heatmap is not None:
            h = panel.heatmap
            traces.append({"type": "heatmap", "x": [_x(v) for v in h.x], "y": list(h.y),
                           "z": [list(row) for row in h.z], "coloraxis": "coloraxis",
                           "hovertemplate": f"%{{y}}<br>%{{x}}<br>{h.label}: %{{z}}"
                                            "<extra></extra>", **axes})
        traces += [_trace(s, panel) | axes for s in panel.series]
    return traces


def _trace(series: Series, panel: Panel) -> dict:
    common = {"name": series.name, "x": [_x(v) for v in series.x], "y": list(series.y),
              "legendgroup": series.legend_group or series.name,
              "showlegend": series.show_legend}
    if series.mark is Mark.BAR:
        return {"type": "bar", "marker": {"color": series.color}, **common}
    return {"type": "scatter",
            "mode": "lines+markers" if len(series.x) <= MARKERS_UP_TO else "lines",
            "line": {"color": series.color, "dash": series.dash.value, "width": 2},
            "marker": {"color": series.color, "size": 5}, "connectgaps": False, **common}


def _axis(axis) -> dict:
    spec: dict[str, Any] = {"title": {"text": axis.title}, "automargin": True,
                            "gridcolor": "#e5e5e5"}
    if axis.scale is Scale.CATEGORY:
        spec |= {"type": "category", "categoryorder": "array",
                 "categoryarray": list(axis.categories)}
    elif axis.scale is Scale.TIME:
        spec["type"] = "date"
    else:
        spec["type"] = axis.scale.value
    return spec


def _domain(figure: Figure, index: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """Where panel ``index`` goes, as fractions of the plotting area, row by row."""
    columns, rows = figure.columns, figure.rows
    width = (1 - GAP_X * (columns - 1)) / columns
    height = (1 - GAP_Y * (rows - 1)) / rows
    row, column = divmod(index, columns)
    x0 = column * (width + GAP_X)
    y1 = 1 - row * (height + GAP_Y)
    return (round(x0, 6), round(x0 + width, 6)), (round(y1 - height, 6), round(y1, 6))


def _x(value: Any) -> Any:
    """Datetimes as Plotly's date strings, in UTC (the queries' times are UTC)."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    return value


def _json(value: Any) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":")) \
        .replace("</", "<\\/")


def _inline(script: str) -> str:
    return script.replace("</script", "<\\/script")


STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #222; background: #fff; }
header { padding: 18px 28px 8px; border-bottom: 1px solid #ddd; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 28px 0 4px; border-bottom: 1px solid #eee; padding-bottom: 4px; }
main { padding: 0 28px 28px; max-width: 1400px; }
nav a { color: #1f77b4; text-decoration: none; }
p.guide { margin: 6px 0; max-width: 900px; }
p.reproduce { font-size: 12px; color: #666; margin: 4px 0 12px; }
p.reproduce code { margin-right: 10px; }
code { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;
       background: #f4f4f4; padding: 1px 4px; border-radius: 3px; }
table { border-collapse: collapse; margin: 10px 0 18px; font-size: 13px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f4f4f4; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
div.figure { margin: 8px 0 20px; }
footer { padding: 12px 28px; font-size: 12px; color: #666; border-top: 1px solid #ddd; }
"""
