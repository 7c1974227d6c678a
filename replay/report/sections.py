"""The report's sections: each turns the answers of a few shipped queries into figures and tables.

A section is a function of the report's data that returns a ``Section``, or None when its data
is not there (a run without scheduling attempts has no conflicts section).  ``SECTIONS`` lists
them in page order; a new section is one more function there, and its queries one more name in
``replay.report.data.QUERIES`` (docs/report.md says how).

With one run, colours tell roles (stages, schedulers) apart; with several, a line's colour tells
its run and its dash its role, and bars are labelled "run · role".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from replay.report.data import ReportData, Run
from replay.report.figures import (
    Axis,
    BarMode,
    Dash,
    Figure,
    Heatmap,
    Mark,
    Panel,
    Scale,
    Series,
    Styles,
    category_axis,
)
from replay.report.page import Cell, Section, Table, label, measured

STAGES = ("storage_to_cache", "cacher_queue", "watcher_queue", "network", "client_queue",
          "handler")
END_TO_END = "end_to_end"
ALL = "ALL"  # the queries' row of every scheduler (or watcher) together
OUTCOMES = (("bound", "bound"), ("conflicts", "conflict"), ("unschedulable", "unschedulable"))
OUTCOME_COLORS = {"bound": "#2ca02c", "conflict": "#d62728", "unschedulable": "#7f7f7f"}


@dataclass
class Context:
    """The data, and the colours handed out so far (a label keeps its colour on the page)."""

    data: ReportData
    styles: Styles = field(default_factory=lambda: Styles(dict(OUTCOME_COLORS)))

    @property
    def several(self) -> bool:
        return len(self.data.runs) > 1

    @property
    def run_names(self) -> list[str]:
        return [run.name for run in self.data.runs]

    def answer(self, query: str) -> pl.DataFrame:
        return self.data.answer(query)

    @property
    def bucket(self) -> str:
        """What one point of a timeline covers: "minute", "5 minutes", "3 hours", "day"."""
        return duration_label(self.data.bucket_minutes)

    def time_axis(self) -> Axis:
        return Axis("minute (UTC)" if self.data.bucket_minutes == 1
                    else f"time (UTC), a point per {self.bucket}", Scale.TIME)

    def name(self, run: str, what: str) -> str:
        """A series' name: what it shows, and which run when there are several."""
        return f"{run} · {what}" if self.several else what

    def line(self, run: str, what: str, x: Iterable, y: Iterable, mark: Mark = Mark.LINE,
             legend: bool = True) -> Series:
        if not self.several:
            color, dash = self.styles.color(what), Dash.SOLID
        elif mark is Mark.LINE:  # a run's lines share its colour; their dashes tell roles apart
            color, dash = self.styles.color(run, "run"), self.styles.dash(what)
        else:  # bars have no dashes
            color, dash = self.styles.color(self.name(run, what), "run-what"), Dash.SOLID
        return Series(self.name(run, what), tuple(x), tuple(y), mark, color, dash,
                      legend_group=self.name(run, what), show_legend=legend)

    def bars(self, what: str, x: Iterable, y: Iterable, legend: bool = True) -> Series:
        """Bars of one kind (a stage, an outcome) across the x categories, coloured by kind."""
        return Series(what, tuple(x), tuple(y), Mark.BAR, self.styles.color(what, "kind"),
                      legend_group=what, show_legend=legend)


def duration_label(minutes: int) -> str:
    """``minutes`` in the largest unit that divides it: "minute", "90 minutes", "3 hours"."""
    for unit, size in (("day", 1440), ("hour", 60), ("minute", 1)):
        if minutes % size == 0:
            count = minutes // size
            return unit if count == 1 else f"{count} {unit}s"
    raise AssertionError("every whole number of minutes is a number of minutes")


def rows_of(frame: pl.DataFrame, **equal: Any) -> list[dict]:
    """The rows of ``frame`` whose columns have the given values, in the frame's order."""
    for column, value in equal.items():
        frame = frame.filter(pl.col(column).is_null() if value is None
                             else pl.col(column) == value)
    return list(frame.iter_rows(named=True))


def values(frame: pl.DataFrame, column: str) -> list:
    """The distinct values of a column, in order of first appearance."""
    return list(dict.fromkeys(frame[column].to_list())) if column in frame.columns else []


# --- 1. Overview ---------------------------------------------------------------------------------

def overview(ctx: Context) -> Section:
    runs = Table(
        "runs", "The runs", ("run", "model", "trace", "seed", "profile", "model parameters"),
        tuple((label(run.name), label(run.model), label(run.trace), label(run.seed),
               label(run.profile), label(_parameters(run))) for run in ctx.data.runs))
    metrics = headline(ctx)
    names = list(dict.fromkeys(name for per_run in metrics.values() for name in per_run))
    numbers = Table(
        "headline", "Headline numbers" + (", run by run" if ctx.several else ""),
        ("", *ctx.run_names),
        tuple((label(name), *(metrics[run].get(name, Cell("–")) for run in ctx.run_names))
              for name in names))
    return Section(
        "overview", "Overview",
        "Which runs this page shows and their headline answers; every number is a row of the "
        "query named in its tooltip, so `replay query RUN NAME` prints it.",
        ("per_component_delay", "conflict_rate", "stale_capacity_by_role"),
        tables=(runs, numbers))


def _parameters(run: Run) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(run.parameters.items())) or "–"


def headline(ctx: Context) -> dict[str, dict[str, Cell]]:
    """Per run: metric name -> its cell, in page order: end-to-end delay per role, conflicts,
    blind and wasted capacity per role."""
    metrics: dict[str, dict[str, Cell]] = {run: {} for run in ctx.run_names}
    delay = ctx.answer("per_component_delay")
    for row in rows_of(delay, component=END_TO_END):
        where = source("per_component_delay", row, "watcher_role", component=END_TO_END)
        for column in ("p50_ms", "p99_ms"):
            metrics[row["run"]][f"end-to-end delay {column[:3]}, {row['watcher_role']} (ms)"] = \
                measured(row[column], f"{where}: {column}")
    for row in rows_of(ctx.answer("conflict_rate"), scheduler=ALL):
        where = source("conflict_rate", row, "scheduler")
        for column, name in (("attempts", "scheduling attempts"), ("conflicts", "conflicts"),
                             ("unschedulable", "unschedulable attempts"),
                             ("conflict_fraction", "conflict fraction (conflicts / bound)"),
                             ("conflict_rate", "conflict rate (conflicts / placements)")):
            metrics[row["run"]][name] = measured(row[column], f"{where}: {column}")
    for row in role_totals(ctx.answer("stale_capacity_by_role")):
        where = source("stale_capacity_by_role", row, "watcher_role", "watcher")
        for column, name in (("blind_core_seconds", "blind core-seconds"),
                             ("wasted_core_seconds", "wasted core-seconds")):
            metrics[row["run"]][f"{name}, {row['watcher_role']}"] = \
                measured(row[column], f"{where}: {column}")
    return metrics


def source(query: str, row: dict, *keys: str, **more: str) -> str:
    """Where a cell's numbers come from, as ``query (run=..., key=value, ...)``; a cell adds
    ``: column``.  The tests read it back and run the query."""
    where = {"run": row["run"], **{k: row[k] for k in keys}, **more}
    return f"{query} ({', '.join(f'{k}={v}' for k, v in where.items())})"


def role_totals(by_role: pl.DataFrame) -> list[dict]:
    """The rows of stale_capacity_by_role that sum a whole role: ALL, or the one watcher of a
    role that has one."""
    rows = list(by_role.iter_rows(named=True))
    with_all = {(r["run"], r["watcher_role"]) for r in rows if r["watcher"] == ALL}
    return [r for r in rows if r["watcher"] == ALL
            or ((r["run"], r["watcher_role"]) not in with_all and r["watchers"] == 1)]


# --- 2. Where the delay comes from ---------------------------------------------------------------

def delay(ctx: Context) -> Section | None:
    stages = ctx.answer("per_component_delay")
    cdf = ctx.answer("delay_cdf")
    if stages.is_empty():
        return None
    pairs = [(r["run"], r["watcher_role"]) for r in rows_of(stages, component=END_TO_END)]
    groups = [ctx.name(run, role) for run, role in pairs]
    mean = Figure("delay-stages", "Mean delay by pipeline stage (the stages add up)", (
        Panel("", category_axis("watcher role", groups), Axis("mean delay (ms)"), tuple(
            ctx.bars(stage, groups, [_one(stages, "mean_ms", run=run, watcher_role=role,
                                          component=stage) for run, role in pairs])
            for stage in STAGES)),), bar_mode=BarMode.STACK)
    components = (*STAGES, END_TO_END)
    percentiles = Figure("delay-percentiles", "Delay percentiles by stage", tuple(
        Panel(column[:3], category_axis("stage", components), Axis("delay (ms)", Scale.LOG), tuple(
            ctx.line(run, role, components,
                     [_one(stages, column, run=run, watcher_role=role, component=c)
                      for c in components], Mark.BAR, legend=column == "p50_ms")
            for run, role in pairs))
        for column in ("p50_ms", "p90_ms", "p99_ms")), columns=3)
    distribution = Figure("delay-cdf", "End-to-end delay: cumulative distribution", (
        Panel("", Axis("end-to-end delay (ms)", Scale.LOG), Axis("fraction of deliveries"), tuple(
            ctx.line(run, role, *_columns(rows_of(cdf, run=run, watcher_role=role),
                                          "delay_ms", "fraction"))
            for run, role in pairs)),))
    return Section(
        "delay", "Where the delay comes from",
        "The stacked bars split each role's mean end-to-end delay into the pipeline's stages; "
        "the percentile bars show which stage makes the tail (log scale), and the distribution's "
        "right end is the slowest deliveries.",
        ("per_component_delay", "delay_cdf"), figures=(mean, percentiles, distribution))


def _one(frame: pl.DataFrame, column: str, **equal: Any) -> Any:
    found = rows_of(frame, **equal)
    return found[0][column] if found else None


def _columns(rows: Sequence[dict], x: str, y: str) -> tuple[list, list]:
    """The x and y values of a line: two columns of ``rows``."""
    return [row[x] for row in rows], [row[y] for row in rows]


# --- 3. Delay over time --------------------------------------------------------------------------

def timeline(ctx: Context) -> Section | None:
    minutes = ctx.answer("per_component_delay_timeline").filter(pl.col("component") == END_TO_END)
    if minutes.is_empty():
        return None
    pairs = list(dict.fromkeys(zip(minutes["run"], minutes["watcher_role"])))
    figure = Figure("delay-timeline", f"End-to-end delay per {ctx.bucket}", tuple(
        Panel(column[:3], ctx.time_axis(), Axis("delay (ms)"), tuple(
            ctx.line(run, role, *_columns(rows_of(minutes, run=run, watcher_role=role),
                                          "minute", column), legend=column == "p50_ms")
            for run, role in pairs))
        for column in ("p50_ms", "p99_ms")), columns=2)
    return Section(
        "timeline", "Delay over time",
        "Lines that climb while the load lasts mean a queue in the pipeline is fuller than it "
        f"can drain; per_component_delay_timeline gives every stage per {ctx.bucket} to find "
        "which.",
        ("per_component_delay_timeline",), figures=(figure,))


# --- 4. Conflicts --------------------------------------------------------------------------------

def conflicts(ctx: Context) -> Section | None:
    rates = ctx.answer("conflict_rate")
    if rates.is_empty() or not rates["attempts"].sum():
        return None
    schedulers = [(r["run"], r["scheduler"]) for r in rates.iter_rows(named=True)
                  if r["scheduler"] != ALL]
    groups = [ctx.name(run, scheduler) for run, scheduler in schedulers]
    outcomes = Figure("conflicts-outcomes", "Scheduling attempts by outcome, per scheduler", (
        Panel("", category_axis("scheduler", groups), Axis("attempts"), tuple(
            ctx.bars(name, groups, [_one(rates, column, run=run, scheduler=scheduler)
                                    for run, scheduler in schedulers])
            for column, name in OUTCOMES)),), bar_mode=BarMode.STACK)
    by_lag = ctx.answer("conflict_rate_by_lag")
    buckets = list(dict.fromkeys(zip(by_lag["lag_from_ms"], by_lag["lag_to_ms"])))
    buckets.sort(key=lambda b: (b[0] is None, b[0] or 0))
    names = [_bucket(*b) for b in buckets]
    # one run: each scheduler and all of them; several runs: all schedulers of each run
    shown = [(run, s) for run, s in dict.fromkeys(zip(by_lag["run"], by_lag["scheduler"]))
             if s == ALL or not ctx.several]

    def per_bucket(column: str, run: str, scheduler: str) -> list:
        return [_one(by_lag, column, run=run, scheduler=scheduler, lag_from_ms=lo, lag_to_ms=hi)
                for lo, hi in buckets]

    lag = Figure("conflicts-by-lag", "Conflicts against the view's lag when the scheduler "
                 "decided", (
                     Panel("conflict rate", category_axis("view lag", names),
                           Axis("conflicts / placements"), tuple(
                               ctx.line(run, s, names, per_bucket("conflict_rate", run, s))
                               for run, s in shown)),
                     Panel("attempts", category_axis("view lag", names), Axis("attempts"), tuple(
                         ctx.line(run, s, names, per_bucket("attempts", run, s), Mark.BAR,
                                  legend=False)
                         for run, s in shown))), columns=2)
    return Section(
        "conflicts", "Conflicts",
        "A conflict is a placement another write got to first; if the rate rises with the "
        "view's lag at the decision, watch delay is what causes the conflicts.",
        ("conflict_rate", "conflict_rate_by_lag"), figures=(outcomes, lag))


def _bucket(lo: float | None, hi: float | None) -> str:
    if lo is None:
        return "unknown"
    return f"≥ {lo:g} ms" if hi is None else f"{lo:g}–{hi:g} ms"


# --- 5. Blind and phantom capacity ---------------------------------------------------------------

def capacity(ctx: Context) -> Section | None:
    by_role = ctx.answer("stale_capacity_by_role")
    if not by_role["windows"].sum() and not by_role["phantom_windows"].sum():
        return None  # no view of capacity, or no view ever differed from the truth
    minutes = ctx.answer("stale_capacity_timeline")
    pairs = list(dict.fromkeys(zip(minutes["run"], minutes["watcher_role"])))
    panels = tuple(
        Panel(title, ctx.time_axis(), Axis("core-seconds"), tuple(
            ctx.line(run, role, *_columns(rows_of(minutes, run=run, watcher_role=role),
                                          "minute", column), legend=column == "blind_core_seconds")
            for run, role in pairs))
        for column, title in (("blind_core_seconds", "blind (free, not seen)"),
                              ("phantom_core_seconds", "phantom (seen free, taken)")))
    over_time = Figure("capacity-timeline", f"Blind and phantom core-seconds per {ctx.bucket}",
                       panels, columns=2)
    figures = [over_time]
    nodes = ctx.answer("stale_capacity_by_node")
    if not nodes.is_empty():
        figures.append(Figure(
            "capacity-nodes", f"Blind core-seconds per {ctx.bucket} on the 20 most affected "
            "nodes, all watchers", tuple(_heatmap(ctx, nodes, run) for run in values(nodes, "run")),
            columns=min(2, len(values(nodes, "run")))))
    durations = ctx.answer("stale_capacity_durations")
    if not durations.is_empty():
        figures.append(_durations(ctx, durations))
    return Section(
        "capacity", "Blind and phantom capacity",
        "Blind capacity is free capacity a view did not show (a pending pod that fit only the "
        "truth makes it wasted); phantom capacity is capacity a view still showed free after "
        "another write took it (placements on it conflict).",
        ("stale_capacity_timeline", "stale_capacity_by_node", "stale_capacity_durations",
         "stale_capacity_by_role"),
        tables=(_worst_watchers(by_role),), figures=tuple(figures))


def _heatmap(ctx: Context, nodes: pl.DataFrame, run: str) -> Panel:
    mine = nodes.filter(pl.col("run") == run)
    minutes = values(mine, "minute")
    names = values(mine.sort("rank"), "node")
    cells = {(r["node"], r["minute"]): r["blind_core_seconds"] for r in mine.iter_rows(named=True)}
    return Panel(run if ctx.several else "", ctx.time_axis(),
                 category_axis("node", names),
                 heatmap=Heatmap(tuple(minutes), tuple(names),
                                 tuple(tuple(cells.get((n, m)) for m in minutes) for n in names),
                                 "blind core-seconds"))


def _durations(ctx: Context, durations: pl.DataFrame) -> Figure:
    buckets = sorted(dict.fromkeys(zip(durations["duration_from_ms"],
                                       durations["duration_to_ms"])),
                     key=lambda b: b[0])
    names = [_bucket(*b) for b in buckets]
    pairs = list(dict.fromkeys(zip(durations["run"], durations["watcher_role"])))
    return Figure("capacity-durations", "How long the windows last", tuple(
        Panel(kind, category_axis("window duration", names), Axis("share of windows"), tuple(
            ctx.line(run, role, names,
                     [_one(durations, "share", run=run, watcher_role=role, kind=kind,
                           duration_from_ms=lo) for lo, _ in buckets],
                     Mark.BAR, legend=kind == "stale")
            for run, role in pairs))
        for kind in ("stale", "phantom")), columns=2)


def _worst_watchers(by_role: pl.DataFrame) -> Table:
    columns = ("watchers", "windows", "blind_core_seconds", "wasted_core_seconds",
               "phantom_windows", "phantom_core_seconds", "conflicted_core_seconds")
    rows = []
    for row in by_role.iter_rows(named=True):
        where = source("stale_capacity_by_role", row, "watcher_role", "watcher")
        rows.append((label(row["run"]), label(row["watcher_role"]), label(row["watcher"]),
                     *(measured(row[c], f"{where}: {c}") for c in columns)))
    return Table("capacity-by-role", "Per role: its watchers that see every node, the three "
                 "worst of those that see one node (kubelets), and the whole role (ALL)",
                 ("run", "role", "watcher", *columns), tuple(rows))


# --- 6. Watch health ------------------------------------------------------------------------------

WORST_WATCHES = 20  # the watches the section shows, the most frozen first
HEALTH_COLUMNS = ("blocked_waits", "blocked_seconds", "resource_blocked_seconds", "terminations",
                  "rewatches", "relists", "listed_objects", "list_seconds", "frozen_seconds",
                  "max_frozen_seconds")


def watch_health(ctx: Context) -> Section | None:
    """Only for runs under load: drawn when a watch was terminated or re-listed."""
    health = ctx.answer("watch_health")
    if not health["terminations"].sum() and not health["relists"].sum():
        return None
    troubled = health.filter((pl.col("blocked_waits") > 0) | (pl.col("terminations") > 0)
                             | (pl.col("relists") > 0))
    worst = troubled.sort(["frozen_seconds", "blocked_seconds", "run", "resource", "watcher"],
                          descending=[True, True, False, False, False]).head(WORST_WATCHES)
    watches = [(r["run"], r["resource"], r["watcher"]) for r in worst.iter_rows(named=True)]
    groups = [ctx.name(run, f"{watcher} · {resource}") for run, resource, watcher in watches]

    def per_watch(column: str) -> list:
        return [_one(worst, column, run=run, resource=resource, watcher=watcher)
                for run, resource, watcher in watches]

    rewatches = per_watch("rewatches")
    recoveries = Figure("watch-terminations", "Terminated watches and how they recovered", (
        Panel("", category_axis("watch", groups), Axis("terminations"), (
            ctx.bars("re-watched from the window", groups, rewatches),
            ctx.bars("re-listed (410 Gone)", groups,
                     [t - r for t, r in zip(per_watch("terminations"), rewatches)]))),),
        bar_mode=BarMode.STACK)
    stalls = Figure("watch-stalls", "Seconds blocked, frozen and re-listing, per watch", (
                        Panel("", category_axis("watch", groups), Axis("seconds"), tuple(
                            ctx.bars(name, groups, per_watch(column))
                            for column, name in (("blocked_seconds", "dispatcher blocked"),
                                                 ("frozen_seconds", "view frozen"),
                                                 ("list_seconds", "re-listing")))),),)
    return Section(
        "watch-health", "Watch health",
        "A watch whose buffer stays full holds back its resource's dispatcher (every watcher of "
        "that resource waits) and is terminated once the time budget is spent; its view is "
        "frozen until a re-watch from the window, or a re-list, brings it the writes it missed.",
        ("watch_health",), tables=(_health_table(ctx, worst, troubled.height),),
        figures=(recoveries, stalls))


def _health_table(ctx: Context, worst: pl.DataFrame, troubled: int) -> Table:
    rows = []
    for row in worst.iter_rows(named=True):
        where = source("watch_health", row, "resource", "watcher")
        rows.append((label(row["run"]), label(row["resource"]), label(row["watcher"]),
                     *(measured(row[c], f"{where}: {c}") for c in HEALTH_COLUMNS)))
    shown = (f"the {len(rows)} most frozen of {troubled}; `replay query RUN watch_health` "
             f"lists every watch" if troubled > len(rows) else "every one")
    return Table("watch-health", f"The watches the dispatcher waited on, terminated or that "
                 f"re-listed ({shown})", ("run", "resource", "watcher", *HEALTH_COLUMNS),
                 tuple(rows))


# --- Several runs: metrics against the parameters that differ ------------------------------------

PARAMETER_METRICS = (("conflict fraction (conflicts / bound)", "conflict fraction"),
                     ("end-to-end delay p99, scheduler (ms)", "scheduler p99 delay (ms)"),
                     ("blind core-seconds, scheduler", "scheduler blind core-seconds"))


def parameters(ctx: Context) -> Section | None:
    """Each model parameter that takes two values or more among runs of one model, against
    the headline metrics: one line per model (and per value of the other such parameters)."""
    swept = swept_parameters(ctx.data.runs)
    metrics = headline(ctx)
    figures = [f for f in (_against(ctx, p, swept, metrics) for p in swept) if f is not None]
    if not figures:
        return None
    return Section(
        "parameters", "Against the parameters",
        "Each point is one run's headline number (the overview's table) placed at the value "
        "of a model parameter that differs between runs of the same model; a steep line is a "
        "parameter worth tuning.",
        ("per_component_delay", "conflict_rate", "stale_capacity_by_role"),
        figures=tuple(figures))


def _against(ctx: Context, parameter: str, swept: list[str],
             metrics: dict[str, dict[str, Cell]]) -> Figure | None:
    runs = [run for run in ctx.data.runs if parameter in run.parameters]
    numeric = all(isinstance(run.parameters[parameter], int | float) for run in runs)

    def at(run: Run) -> Any:
        value = run.parameters[parameter]
        return value if numeric else str(value)

    runs.sort(key=at)
    lines: dict[str, list[Run]] = {}
    for run in runs:
        others = ", ".join(f"{p}={run.parameters[p]}" for p in swept
                           if p != parameter and p in run.parameters)
        lines.setdefault(run.model + (f" ({others})" if others else ""), []).append(run)
    x_axis = (Axis(parameter) if numeric
              else category_axis(parameter, list(dict.fromkeys(at(r) for r in runs))))
    panels: list[Panel] = []
    for metric, title in PARAMETER_METRICS:
        series = tuple(
            Series(name, tuple(at(r) for r in members),
                   tuple(metrics[r.name].get(metric, Cell("")).value for r in members),
                   Mark.LINE, ctx.styles.color(name, "line"), legend_group=name,
                   show_legend=not panels)
            for name, members in lines.items())
        panel = Panel(title, x_axis, Axis(title), series)
        if panel.has_data():
            panels.append(panel)
    if not panels:
        return None
    return Figure(f"parameter-{parameter}", f"Headline numbers against {parameter}",
                  tuple(panels), columns=len(panels))


def swept_parameters(runs: Sequence[Run]) -> list[str]:
    """The model parameters that take two values or more among the runs of one model."""
    seen: dict[tuple[str, str], set[str]] = {}
    for run in runs:
        for name, value in run.parameters.items():
            seen.setdefault((run.model, name), set()).add(repr(value))
    return sorted({name for (_, name), found in seen.items() if len(found) > 1})


SECTIONS: tuple[Callable[[Context], Section | None], ...] = (
    overview, delay, timeline, conflicts, capacity, watch_health, parameters)


def build_sections(data: ReportData) -> tuple[Section, ...]:
    """Every section that has data, in page order."""
    ctx = Context(data)
    return tuple(s for s in (make(ctx) for make in SECTIONS) if s is not None)
