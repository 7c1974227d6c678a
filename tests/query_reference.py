"""Independent answers to the shipped queries, computed in Python from a run directory's tables.

The queries' tests compare these with DuckDB's.  Everything here follows docs/run-directory.md
and queries/README.md literally and naively: the truth is rebuilt from the events (not from the
pods table the SQL uses), and every view is replayed instant by instant, so that a shortcut taken
by the SQL for speed cannot hide a mistake.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

TABLES = ("events", "deliveries", "attempts", "pods", "watchers", "dispatch_waits",
          "watch_terminations", "relists")
# What a step of a view at a span's end is: a real change, the run's end standing in for a
# change never received or an assumption never forgotten, or the run's end with the pod still there
REAL, STAND_IN, END = "real", "stand-in", "end"
RESOURCES = {"cpu": "cpu_milli", "memory": "memory_bytes", "gpu": "gpu_milli"}
UNIT = {"cpu": 1000.0, "memory": float(1 << 30), "gpu": 1000.0}
STAGES = ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts", "dequeued_ts",
          "applied_ts")
COMPONENTS = ("storage_to_cache", "cacher_queue", "watcher_queue", "network", "client_queue",
              "handler")


def load(run_dir: Path) -> dict[str, pl.DataFrame]:
    return {t: pl.read_parquet(Path(run_dir) / f"{t}.parquet") for t in TABLES}


def us(ts) -> int:
    """A timestamp as integer microseconds since the epoch."""
    return int(ts.timestamp() * 1_000_000) if ts is not None else None


# --- per-component delay -------------------------------------------------------------------------

def component_delays(tables) -> pl.DataFrame:
    """One row per (delivery, component): role, component, ms, commit_ts; a watcher's first
    list (source 'list') is no delay."""
    d = tables["deliveries"].filter(pl.col("source") != "list")
    frames = []
    for name, (a, b) in zip(COMPONENTS + ("end_to_end",),
                            list(zip(STAGES, STAGES[1:])) + [("commit_ts", "applied_ts")]):
        frames.append(d.select(
            watcher_role=pl.col("role"), component=pl.lit(name), commit_ts="commit_ts",
            ms=(pl.col(b) - pl.col(a)).dt.total_microseconds() / 1000.0))
    return pl.concat(frames)


def delay_stats(delays: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    stats = delays.group_by(by + ["component"]).agg(
        events=pl.len(), mean_ms=pl.col("ms").mean(),
        p50_ms=pl.col("ms").quantile(0.5, "linear"), p90_ms=pl.col("ms").quantile(0.9, "linear"),
        p99_ms=pl.col("ms").quantile(0.99, "linear"), max_ms=pl.col("ms").max())
    end = stats.filter(pl.col("component") == "end_to_end").select(by + [pl.col("mean_ms").alias("e2e")])
    return (stats.join(end, on=by)
            .with_columns(share=pl.when(pl.col("e2e") > 0).then(pl.col("mean_ms") / pl.col("e2e")))
            .drop("e2e"))


def per_component_delay(tables) -> pl.DataFrame:
    return delay_stats(component_delays(tables), ["watcher_role"])


def per_component_delay_timeline(tables, minutes: int = 1) -> pl.DataFrame:
    width = minutes * MINUTE_US
    delays = component_delays(tables).with_columns(
        minute=(pl.col("commit_ts").dt.epoch("us") // width * width).cast(pl.Datetime("us"))
        .dt.replace_time_zone("UTC"))
    return delay_stats(delays, ["minute", "watcher_role"])


# --- conflicts -----------------------------------------------------------------------------------

def _conflict_counts(attempts: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    return attempts.group_by(by).agg(
        attempts=pl.len(),
        bound=(pl.col("outcome") == "bound").sum(),
        conflicts=(pl.col("outcome") == "conflict").sum(),
        unschedulable=(pl.col("outcome") == "unschedulable").sum(),
    ).with_columns(
        conflict_rate=pl.when(pl.col("bound") + pl.col("conflicts") > 0)
        .then(pl.col("conflicts") / (pl.col("bound") + pl.col("conflicts"))),
        conflict_fraction=pl.when(pl.col("bound") > 0).then(pl.col("conflicts") / pl.col("bound")))


def conflict_rate(tables) -> pl.DataFrame:
    a = tables["attempts"]
    per = _conflict_counts(a, ["scheduler"])
    everyone = _conflict_counts(a.with_columns(scheduler=pl.lit("ALL")), ["scheduler"])
    reasons = {}
    for scheduler, reason, n in (a.filter(pl.col("outcome") == "conflict")
                                 .group_by("scheduler", "reason").len().iter_rows()):
        for key in (scheduler, "ALL"):
            reasons.setdefault(key, {}).setdefault(reason, 0)
            reasons[key][reason] += n
    table = pl.concat([per, everyone]) if a.height else everyone
    return table.with_columns(
        by_reason=pl.Series([reasons.get(s, {}) for s in table["scheduler"]], dtype=pl.Object))


def omega_metrics(tables) -> pl.DataFrame:
    """Transactions (cycles with a bound or conflicting attempt), failed ones, the conflict
    fraction per transaction and busyness, per scheduler and ALL (busyness: the mean)."""
    a = tables["attempts"].filter(pl.col("cycle_id").is_not_null())
    times = [tables["events"]["commit_ts"].min()] + [
        tables["attempts"][c].min() for c in ("enqueued_ts", "started_ts", "decided_ts",
                                              "committed_ts")]
    start = min(us(t) for t in times if t is not None)
    duration = run_end(tables) - start
    rows = []
    cycles: dict[tuple, dict] = {}
    for x in a.iter_rows(named=True):
        c = cycles.setdefault((x["scheduler"], x["cycle_id"]), {
            "think": us(x["decided_ts"]) - us(x["started_ts"]), "outcomes": set()})
        c["outcomes"].add(x["outcome"])
    schedulers = sorted({s for s, _ in cycles})
    for who in schedulers + (["ALL"] if schedulers else []):
        mine = [c for (s, _), c in cycles.items() if who in (s, "ALL")]
        committed = [c for c in mine if c["outcomes"] & {"bound", "conflict"}]
        failed = [c for c in committed if "conflict" in c["outcomes"]]
        over = duration * (len(schedulers) if who == "ALL" else 1)
        useful = sum(c["think"] for c in committed if c not in failed)
        wasted = sum(c["think"] for c in failed)
        rows.append((who, len(committed), len(failed),
                     len(failed) / (len(committed) - len(failed))
                     if len(committed) > len(failed) else None,
                     (useful + wasted) / over, useful / over, wasted / over))
    return pl.DataFrame(rows, schema={
        "scheduler": pl.String, "transactions": pl.Int64, "failed_transactions": pl.Int64,
        "conflict_fraction": pl.Float64, "busyness": pl.Float64, "useful_busyness": pl.Float64,
        "wasted_busyness": pl.Float64}, orient="row")


LAG_EDGES_MS = (0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def lag_bucket(lag_ms):
    if lag_ms is None:
        return None, None
    for low, high in zip(LAG_EDGES_MS, LAG_EDGES_MS[1:]):
        if lag_ms < high:
            return float(low), float(high)
    return float(LAG_EDGES_MS[-1]), None


def conflict_rate_by_lag(tables) -> pl.DataFrame:
    a = tables["attempts"]
    buckets = [lag_bucket(v) for v in a["view_lag_ms"].to_list()]
    a = a.with_columns(lag_from_ms=pl.Series([b[0] for b in buckets], dtype=pl.Float64),
                       lag_to_ms=pl.Series([b[1] for b in buckets], dtype=pl.Float64))
    return pl.concat([
        _conflict_counts(a, ["scheduler", "lag_from_ms", "lag_to_ms"]),
        _conflict_counts(a.with_columns(scheduler=pl.lit("ALL")),
                         ["scheduler", "lag_from_ms", "lag_to_ms"]),
    ]) if a.height else _conflict_counts(a, ["scheduler", "lag_from_ms", "lag_to_ms"])


# --- free capacity -------------------------------------------------------------------------------

@dataclass(eq=False)  # compared and hashed by identity
class Incarnation:
    pod: str
    requests: dict
    created: int | None = None
    listed: bool = False  # in the first list (made before the trace)
    bind: tuple | None = None  # (rv, commit_us, node, attempt_id) of its first binding
    delete: tuple | None = None  # (rv, commit_us) of the last delete
    states: list = field(default_factory=list)  # (rv, commit_us, node, pod_state, attempt_id)
    # per class of cache (True: counts assumed pods; False: bound pods only): the claims, each
    # [take_rv, take_us, node, attempt_id, release_rv, release_us]
    claims: dict = field(default_factory=dict)


@dataclass
class Truth:
    changes: list = field(default_factory=list)  # (rv, commit_us, node, {resource: delta}, class)
    incarnations: list = field(default_factory=list)
    node_changes: list = field(default_factory=list)  # the changes of allocatable alone
    by_attempt: dict = field(default_factory=dict)  # attempt_id -> (commit_us, incarnation)

    @property
    def counted_apart(self) -> bool:
        """Whether caches that count assumed pods see other changes than those that do not."""
        return any(c[4] is not None for c in self.changes)


def rebuild_truth(events: pl.DataFrame) -> Truth:
    """Replay the committed writes: node allocatable and pod claims, as capacity changes."""
    truth = Truth()
    allocatable: dict[str, dict] = {}
    current: dict[str, Incarnation] = {}
    zero = {r: 0 for r in RESOURCES}
    for e in events.sort("rv").iter_rows(named=True):
        if e["resource"] == "nodes":
            old = allocatable.get(e["name"], zero)
            if e["verb"] == "delete":
                new = dict(zero)
            elif any(e[c] is not None for c in RESOURCES.values()):
                new = {r: old[r] if e[c] is None else e[c] for r, c in RESOURCES.items()}
            else:
                continue
            allocatable[e["name"]] = new
            delta = {r: new[r] - old[r] for r in RESOURCES}
            if any(delta.values()):
                truth.changes.append((e["rv"], us(e["commit_ts"]), e["name"], delta, None))
                truth.node_changes.append(truth.changes[-1])
        elif e["resource"] == "pods" and e["name"]:
            pod = e["name"] if e["namespace"] is None else f"{e['namespace']}/{e['name']}"
            if e["verb"] == "create" and e["subresource"] is None:
                # a listed pod (origin 'list': made before the trace) was created at no time
                # the run knows (pods.created_ts is null): it waits from the run's start
                current[pod] = Incarnation(pod, {r: e[c] or 0 for r, c in RESOURCES.items()},
                                           None if e["origin"] == "list" else us(e["commit_ts"]),
                                           listed=e["origin"] == "list")
                truth.incarnations.append(current[pod])
                if e["node"] is not None:  # created on its node (a mirror pod): placed there
                    current[pod].bind = (e["rv"], us(e["commit_ts"]), e["node"], e["attempt_id"])
                continue
            if pod not in current:  # created before the trace began: requests unknown
                current[pod] = Incarnation(pod, dict(zero))
                truth.incarnations.append(current[pod])
            inc = current[pod]
            if e["verb"] == "create" and e["subresource"] == "binding" and inc.bind is None:
                inc.bind = (e["rv"], us(e["commit_ts"]), e["node"], e["attempt_id"])
            elif e["verb"] == "delete" and e["subresource"] is None:
                inc.delete = (e["rv"], us(e["commit_ts"]))
            elif e.get("pod_state") in ("assumed", "dispatched", "failed", "succeeded"):
                inc.states.append((e["rv"], us(e["commit_ts"]), e["node"], e["pod_state"],
                                   e["attempt_id"]))
    moves: dict[bool, dict] = {True: {}, False: {}}  # class -> (rv, node, taking) -> (at, delta)
    for inc in truth.incarnations:
        for counts_assumed in (True, False):
            inc.claims[counts_assumed] = _claims(inc, counts_assumed)
            for take_rv, take_at, node, attempt, release_rv, release_at in \
                    inc.claims[counts_assumed]:
                if counts_assumed and attempt is not None and attempt not in truth.by_attempt:
                    truth.by_attempt[attempt] = (take_at, inc)
                if not any(inc.requests.values()):
                    continue
                moves[counts_assumed][(take_rv, node, True)] = (
                    take_at, {r: -v for r, v in inc.requests.items()})
                if release_rv is not None:
                    moves[counts_assumed][(release_rv, node, False)] = (
                        release_at, dict(inc.requests))
    for key in moves[True].keys() | moves[False].keys():
        counted = [c for c in (True, False) if key in moves[c]]
        at, delta = moves[counted[0]][key]
        truth.changes.append((key[0], at, key[1], delta, None if len(counted) == 2 else counted[0]))
    truth.changes.sort(key=lambda c: (c[0], c[2], c[4] is None, c[4] or False))
    return truth


def _claims(inc: Incarnation, counts_assumed: bool) -> list:
    """The pod's claims as one class of cache counts them: a binding (or a create on its node)
    takes its node, and a terminal phase (failed, succeeded) or the last delete gives it back;
    for caches that count assumed pods, an assume patch takes its node too and a rejection
    (back to dispatched) gives it back."""
    steps = [(rv, at, node, state, attempt) for rv, at, node, state, attempt in inc.states
             if counts_assumed or state in ("failed", "succeeded")]
    if inc.bind is not None:
        rv, at, node, attempt = inc.bind
        steps.append((rv, at, node, "bound", attempt))
    if inc.delete is not None:
        steps.append((*inc.delete, None, "deleted", None))
    claims: list[list] = []
    holds = None
    for rv, at, node, state, attempt in sorted(steps):
        new = node if state in ("bound", "assumed") else None
        if new == holds:
            continue
        if holds is not None:
            claims[-1][4:] = [rv, at]
        if new is not None:
            claims.append([rv, at, new, attempt, None, None])
        holds = new
    return claims


def run_end(tables) -> int:
    a = tables["attempts"]
    times = [tables["events"]["commit_ts"].max(), tables["deliveries"]["applied_ts"].max()]
    times += [a[c].max() for c in ("decided_ts", "committed_ts", "forgotten_ts")]
    return max(us(t) for t in times if t is not None)


class CapacityReference:
    """Every stale or phantom window of every watcher that has a view of capacity, by brute force:
    the truth and each view are replayed change by change on every node."""

    def __init__(self, tables):
        self.tables = tables
        self.truth = rebuild_truth(tables["events"])
        self.node_changes = self.truth.node_changes
        self.end = run_end(tables)
        start = run_start(tables)
        self.pending = [  # (start, end, requests) of each pod waiting to be placed
            (start if inc.listed else inc.created,
             min([t for t in (inc.bind and inc.bind[1], inc.delete and inc.delete[1])
                  if t is not None] or [self.end]), inc.requests)
            for inc in self.truth.incarnations if inc.created is not None or inc.listed]

    def windows(self) -> pl.DataFrame:
        rows = []
        watchers = self.tables["watchers"].filter(
            pl.col("resources").str.split(",").list.contains("pods")
            & pl.col("resources").str.split(",").list.contains("nodes"))
        for w in watchers.iter_rows(named=True):
            rows += self._watcher_windows(w)
        return pl.DataFrame(rows, schema={
            "watcher": pl.String, "node": pl.String, "resource": pl.String, "kind": pl.String,
            "start_us": pl.Int64, "end_us": pl.Int64, "gap_max": pl.Float64,
            "gap_seconds": pl.Float64, "wasted": pl.Boolean, "conflicts": pl.Int64,
            "open_at_end": pl.Boolean}, orient="row")

    def _watcher_windows(self, w: dict) -> list:
        seen = dict(self.tables["deliveries"].filter(pl.col("watcher") == w["watcher"])
                    .select("rv", pl.col("applied_ts").dt.epoch("us")).iter_rows())
        # node -> (instant, truth delta, view delta, what the view's step is: REAL, STAND_IN (the
        # run's end standing in for a change never received or an assumption never forgotten) or
        # END (the end of the run, where a pod still counts))
        steps: dict[str, list] = {}
        counts_assumed = w["role"] == "scheduler"

        def visible(node):
            return w["node"] is None or node == w["node"]

        for _rv, at, node, delta, counted in self.truth.changes:
            if visible(node) and counted in (None, counts_assumed):
                steps.setdefault(node, []).append((at, delta, None, REAL))
        for rv, _at, node, delta, _ in self.node_changes:
            if visible(node):
                steps[node].append((seen.get(rv, self.end), None, delta,
                                    REAL if rv in seen else STAND_IN))
        # a pod counts once in the view: while its binding is applied and its delete is not, or
        # while the watcher holds an assumption of it; never after its delete is applied
        for (inc, node), spans in self._memberships(w, seen, counts_assumed).items():
            if not visible(node):
                continue
            for start, stop, how in _union(spans):
                steps.setdefault(node, []).append(
                    (start, None, {r: -v for r, v in inc.requests.items()}, REAL))
                steps[node].append((stop, None, dict(inc.requests), how))
        return [self._describe(w["watcher"], node, resource, window)
                for node, changes in steps.items() for resource in RESOURCES
                for window in self._windows(changes, resource)]

    def _memberships(self, w: dict, seen: dict, counts_assumed: bool) -> dict:
        """(incarnation, node) -> intervals during which the pod counts on the node in the view:
        from each claim's applied take to its applied release, or while the watcher holds an
        assumption of it, never after its last release is applied; each with what its end is:
        REAL, STAND_IN (the run's end standing in for a release never received or an assumption
        never forgotten) or END (the pod is still there)."""
        spans: dict[tuple, list] = {}
        gone = {}  # incarnation -> when the watcher applied its last release, and what that is
        for inc in self.truth.incarnations:
            claims = inc.claims[counts_assumed]
            if not claims or not any(inc.requests.values()):
                continue
            for take_rv, _, node, _, release_rv, _ in claims:
                if release_rv is None:
                    removed = (self.end, END)
                else:
                    removed = (seen.get(release_rv, self.end),
                               REAL if release_rv in seen else STAND_IN)
                spans.setdefault((inc, node), []).append((seen.get(take_rv, self.end), *removed))
            gone[inc] = removed
        for start, stop, how, node, inc in self._assumptions(w):
            removed = gone.get(inc, (self.end, END))
            span = (start, stop, how) if stop < removed[0] else (start, *removed)
            spans.setdefault((inc, node), []).append(span)
        # a span that starts at its end stays: the run's end may stand in for its take
        return {key: [s for s in value if s[1] >= s[0]] for key, value in spans.items()}

    def _assumptions(self, w: dict):
        """(start, end, what the end is, node, incarnation) of each assumption the watcher held:
        from its decision, or the commit (or failure) of its write if later, until it forgot it
        (the run's end if it never did)."""
        attempts = self.tables["attempts"].filter(pl.col("scheduler") == w["watcher"])
        for a in attempts.iter_rows(named=True):
            if a["node"] is None:
                continue
            if a["attempt_id"] in self.truth.by_attempt:
                settled, inc = self.truth.by_attempt[a["attempt_id"]]
            else:
                settled, inc = us(a["committed_ts"]), self._incarnation_at(a["pod"], us(a["decided_ts"]))
            if settled is None or inc is None or not any(inc.requests.values()):
                continue
            start = max(us(a["decided_ts"]), settled)
            if a["forgotten_ts"] is not None:
                yield start, us(a["forgotten_ts"]), REAL, a["node"], inc
            else:
                yield start, self.end, STAND_IN, a["node"], inc

    def _incarnation_at(self, pod: str, at: int):
        """The latest incarnation of ``pod`` created by ``at`` (in commit order)."""
        created = [inc for inc in self.truth.incarnations
                   if inc.pod == pod and inc.created is not None and inc.created <= at]
        return created[-1] if created else None

    def _windows(self, changes: list, resource: str) -> list:
        """Maximal intervals where the view's free capacity differs from the truth's, as lists of
        (start, end, truth, view) segments; the last window is marked open at the end (a trailing
        True) if without the run's end standing in for what it never received or forgot, the
        view would still differ from the truth when the run ends."""
        by_time: dict[int, list] = {}
        for t, dt, dv, _ in changes:
            by_time.setdefault(t, []).append((dt, dv))
        instants = sorted(by_time)
        truth = view = 0
        segments = []
        for i, t in enumerate(instants):
            for dt, dv in by_time[t]:
                truth += dt[resource] if dt else 0
                view += dv[resource] if dv else 0
            stop = instants[i + 1] if i + 1 < len(instants) else self.end
            if view != truth and stop > t:
                segments.append((t, stop, truth, view))
        windows: list[list] = []
        for seg in segments:
            last = windows[-1][-1] if windows else None
            if last and last[1] == seg[0] and (last[3] > last[2]) == (seg[3] > seg[2]):
                windows[-1].append(seg)
            else:
                windows.append([seg])
        truth_end = sum(dt[resource] for _, dt, _, _ in changes if dt)
        view_end = sum(dv[resource] for _, _, dv, how in changes if dv and how == REAL)
        if windows and windows[-1][-1][1] == self.end and truth_end != view_end:
            windows[-1].append(True)
        return windows

    def _describe(self, watcher, node, resource, segments) -> tuple:
        open_at_end = segments[-1] is True
        segments = segments[:-1] if open_at_end else segments
        stale = segments[0][3] < segments[0][2]
        start, stop = segments[0][0], segments[-1][1]
        gap_max = max(abs(v - t) for _, _, t, v in segments) / UNIT[resource]
        gap_seconds = sum(abs(v - t) * (b - a) for a, b, t, v in segments) / 1e6 / UNIT[resource]
        wasted = conflicts = None
        if stale:
            wasted = any(self._pending_fits(resource, s) for s in segments)
        else:
            a = self.tables["attempts"]
            conflicts = a.filter((pl.col("scheduler") == watcher) & (pl.col("node") == node)
                                 & (pl.col("outcome") == "conflict")
                                 & (pl.col("decided_ts").dt.epoch("us") >= start)
                                 & (pl.col("decided_ts").dt.epoch("us") < stop)).height
        return (watcher, node, resource, "stale" if stale else "phantom", start, stop, gap_max,
                gap_seconds, wasted, conflicts, open_at_end)

    def _pending_fits(self, resource: str, segment) -> bool:
        """Whether a pod pending during the segment asked for more of ``resource`` than the view
        had free and no more than the truth had."""
        start, stop, truth, view = segment
        return any(p_start < stop and p_end > start and view < requests[resource] <= truth
                   for p_start, p_end, requests in self.pending
                   if requests[resource] > 0 and p_end > p_start)


def _union(spans: list) -> list:
    """Overlapping or touching intervals (start, stop, what the stop is) merged; of stops at the
    same instant, a REAL one wins (the view did catch up)."""
    merged: list[list] = []
    for start, stop, how in sorted(spans, key=lambda s: (s[0], s[1], s[2] != REAL)):
        if merged and start <= merged[-1][1]:
            if stop > merged[-1][1]:
                merged[-1][1:] = [stop, how]
            elif stop == merged[-1][1] and how == REAL:
                merged[-1][2] = REAL
        else:
            merged.append([start, stop, how])
    return merged


def capacity_viewers(tables) -> pl.DataFrame:
    """watcher, watcher_role, node of the watchers that watch pods and nodes."""
    resources = pl.col("resources").str.split(",")
    return tables["watchers"].filter(
        resources.list.contains("pods") & resources.list.contains("nodes")).select(
        "watcher", "node", watcher_role="role")


def summarise_windows(viewers: pl.DataFrame, windows: pl.DataFrame, key: str) -> pl.DataFrame:
    """stale_capacity_summary's columns per value of ``key`` (watcher or watcher_role), for
    every such value among ``viewers``, windows or not."""
    w = windows.join(viewers.select("watcher", "watcher_role"), on="watcher").with_columns(
        ms=(pl.col("end_us") - pl.col("start_us")) / 1000.0)
    cpu = pl.col("resource") == "cpu"

    def side(kind: str, prefix: str, costly: pl.Expr, costly_name: str) -> pl.DataFrame:
        k = w.filter(pl.col("kind") == kind)
        return k.group_by(key).agg(
            pl.len().alias(f"{prefix}windows"),
            pl.col("ms").quantile(0.5, "linear").alias(f"{prefix}p50_ms"),
            pl.col("ms").quantile(0.99, "linear").alias(f"{prefix}p99_ms"),
            pl.col("ms").max().alias(f"{prefix}max_ms"),
            pl.col("gap_seconds").filter(cpu).sum().alias(f"{prefix}core_seconds"),
            pl.col("gap_seconds").filter(cpu & costly).sum().alias(costly_name))

    stale = side("stale", "", pl.col("wasted"), "wasted_core_seconds").rename(
        {"core_seconds": "blind_core_seconds"})
    phantom = side("phantom", "phantom_", pl.col("conflicts") > 0, "conflicted_core_seconds")
    out = viewers.group_by(key).agg(watchers=pl.len(), one_node=pl.col("node").is_not_null().all())
    out = out.join(stale, on=key, how="left").join(phantom, on=key, how="left")
    return out.with_columns(pl.col("windows", "phantom_windows").fill_null(0),
                            pl.col("blind_core_seconds", "wasted_core_seconds",
                                   "phantom_core_seconds", "conflicted_core_seconds").fill_null(0.0))


def stale_capacity_summary(tables, windows: pl.DataFrame) -> pl.DataFrame:
    """Per watcher with a view of capacity: its stale and phantom windows summarised."""
    return summarise_windows(capacity_viewers(tables), windows, "watcher").drop(
        "watchers", "one_node")


def stale_capacity_by_role(tables, windows: pl.DataFrame) -> pl.DataFrame:
    """The summary's rows of watchers that see every node, the 3 worst (most blind
    core-seconds, then by name) of those that see one node, and each role of more than one
    watcher as ALL."""
    viewers = capacity_viewers(tables)
    each = summarise_windows(viewers, windows, "watcher").drop("watchers", "one_node").join(
        viewers, on="watcher").with_columns(watchers=pl.lit(1, pl.Int64))
    shown = []
    for (_, one_node), rows in each.group_by("watcher_role", pl.col("node").is_not_null()):
        rows = rows.sort(["blind_core_seconds", "watcher"], descending=[True, False])
        shown.append(rows.head(3) if one_node else rows)
    roles = summarise_windows(viewers, windows, "watcher_role").filter(pl.col("watchers") > 1)
    roles = roles.with_columns(watcher=pl.lit("ALL"), watchers=pl.col("watchers").cast(pl.Int64))
    columns = ["watcher_role", "watcher", "watchers", *stale_capacity_summary_columns()]
    return pl.concat([frame.select(columns) for frame in [*shown, roles]])


def stale_capacity_summary_columns() -> list[str]:
    return ["windows", "p50_ms", "p99_ms", "max_ms", "blind_core_seconds", "wasted_core_seconds",
            "phantom_windows", "phantom_p50_ms", "phantom_p99_ms", "phantom_max_ms",
            "phantom_core_seconds", "conflicted_core_seconds"]


# --- what the report draws -----------------------------------------------------------------------

CDF_FRACTIONS = [i / 100 for i in range(100)] + [(990 + i) / 1000 for i in range(1, 10)] + [
    0.9999, 1.0]
DURATION_EDGES_MS = [0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500,
                     1000, 2000, 5000, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 2e6, 5e6, 1e7]
MINUTE_US = 60_000_000


def delay_cdf(tables) -> pl.DataFrame:
    delays = component_delays(tables).filter(pl.col("component") == "end_to_end")
    rows = []
    for (role,), mine in delays.group_by("watcher_role"):
        rows += [(role, f, mine["ms"].quantile(f, "linear"), mine.height) for f in CDF_FRACTIONS]
    return pl.DataFrame(rows, schema={"watcher_role": pl.String, "fraction": pl.Float64,
                                      "delay_ms": pl.Float64, "events": pl.Int64}, orient="row")


def run_start(tables) -> int:
    """The run's first timestamp (run_bounds.start_ts): its first commit, or an attempt's
    earliest time before it."""
    a = tables["attempts"]
    times = [tables["events"]["commit_ts"].min()]
    times += [a[c].min() for c in ("enqueued_ts", "started_ts", "decided_ts", "committed_ts")]
    return min(us(t) for t in times if t is not None)


def run_buckets(tables, minutes: int = 1) -> list[int]:
    """The start (epoch microseconds) of every bucket of ``minutes`` minutes of the run, counted
    from the epoch, first to last."""
    width = minutes * MINUTE_US
    first = run_start(tables) // width * width
    return list(range(first, run_end(tables) + 1, width))


def _minute_windows(tables, windows: pl.DataFrame, minutes: int = 1) -> pl.DataFrame:
    width = minutes * MINUTE_US
    return windows.join(capacity_viewers(tables).select("watcher", "watcher_role"),
                        on="watcher").with_columns(minute_us=pl.col("start_us") // width * width)


def stale_capacity_timeline(tables, windows: pl.DataFrame, minutes: int = 1) -> pl.DataFrame:
    """Per bucket of the run and role with a view: the summary's counts and sums."""
    w = _minute_windows(tables, windows, minutes)
    rows = []
    for minute in run_buckets(tables, minutes):
        for role in sorted(set(capacity_viewers(tables)["watcher_role"])):
            mine = w.filter((pl.col("minute_us") == minute) & (pl.col("watcher_role") == role))
            stale, phantom = (mine.filter(pl.col("kind") == k) for k in ("stale", "phantom"))
            cpu = pl.col("resource") == "cpu"
            rows.append((minute, role, stale.height,
                         stale.filter(cpu)["gap_seconds"].sum(),
                         stale.filter(cpu & pl.col("wasted"))["gap_seconds"].sum(),
                         phantom.height, phantom.filter(cpu)["gap_seconds"].sum(),
                         phantom.filter(cpu & (pl.col("conflicts") > 0))["gap_seconds"].sum()))
    return pl.DataFrame(rows, schema={
        "minute_us": pl.Int64, "watcher_role": pl.String, "windows": pl.Int64,
        "blind_core_seconds": pl.Float64, "wasted_core_seconds": pl.Float64,
        "phantom_windows": pl.Int64, "phantom_core_seconds": pl.Float64,
        "conflicted_core_seconds": pl.Float64}, orient="row")


def stale_capacity_by_node(tables, windows: pl.DataFrame, minutes: int = 1,
                           top: int = 20) -> pl.DataFrame:
    """The top nodes by blind core-seconds (all watchers), every bucket of the run."""
    stale = _minute_windows(tables, windows, minutes).filter(pl.col("kind") == "stale")
    cpu = stale.filter(pl.col("resource") == "cpu")
    totals = cpu.group_by("node").agg(pl.col("gap_seconds").sum()).filter(pl.col("gap_seconds") > 0)
    ranked = totals.sort(["gap_seconds", "node"], descending=[True, False]).head(top)["node"]
    rows = []
    for rank, node in enumerate(ranked, 1):
        for minute in run_buckets(tables, minutes):
            mine = stale.filter((pl.col("node") == node) & (pl.col("minute_us") == minute))
            blind = mine.filter(pl.col("resource") == "cpu")
            rows.append((node, rank, minute, mine.height, blind["gap_seconds"].sum(),
                         blind.filter(pl.col("wasted"))["gap_seconds"].sum()))
    return pl.DataFrame(rows, schema={
        "node": pl.String, "rank": pl.Int64, "minute_us": pl.Int64, "windows": pl.Int64,
        "blind_core_seconds": pl.Float64, "wasted_core_seconds": pl.Float64}, orient="row")


def stale_capacity_durations(tables, windows: pl.DataFrame) -> pl.DataFrame:
    """Windows per role, kind and duration bucket (1-2-5 edges), with their share."""
    counts: dict[tuple, int] = {}
    w = _minute_windows(tables, windows)
    for role, kind, start, end in w.select("watcher_role", "kind", "start_us", "end_us").rows():
        ms = (end - start) / 1000.0
        at = max(i for i, edge in enumerate(DURATION_EDGES_MS) if ms >= edge)
        key = (role, kind, at)
        counts[key] = counts.get(key, 0) + 1
    totals: dict[tuple, int] = {}
    for (role, kind, _), n in counts.items():
        totals[role, kind] = totals.get((role, kind), 0) + n
    rows = [(role, kind, float(DURATION_EDGES_MS[at]),
             float(DURATION_EDGES_MS[at + 1]) if at + 1 < len(DURATION_EDGES_MS) else None,
             n, n / totals[role, kind]) for (role, kind, at), n in counts.items()]
    return pl.DataFrame(rows, schema={
        "watcher_role": pl.String, "kind": pl.String, "duration_from_ms": pl.Float64,
        "duration_to_ms": pl.Float64, "windows": pl.Int64, "share": pl.Float64}, orient="row")


def sweep_summary(tables, windows: pl.DataFrame) -> dict:
    """sweep_summary's numbers for one run, from the references above: every attempt, the
    end-to-end delay per role, the capacity windows of the watchers of role scheduler."""
    attempts = tables["attempts"]
    conflicts = int((attempts["outcome"] == "conflict").sum())
    bound = int((attempts["outcome"] == "bound").sum())
    delays = per_component_delay(tables).filter(pl.col("component") == "end_to_end")
    schedulers = tables["watchers"].filter(pl.col("role") == "scheduler")["watcher"]
    capacity = stale_capacity_summary(tables, windows).filter(pl.col("watcher").is_in(schedulers.to_list()))
    return {
        "attempts": attempts.height, "conflicts": conflicts,
        "conflict_fraction": conflicts / bound if bound else None,
        "end_to_end_p50_ms": {r: round(v, 3) for r, v in delays.select("watcher_role", "p50_ms").rows()},
        "end_to_end_p99_ms": {r: round(v, 3) for r, v in delays.select("watcher_role", "p99_ms").rows()},
        "schedulers": schedulers.len(),
        "blind_core_seconds": float(capacity["blind_core_seconds"].sum()),
        "wasted_core_seconds": float(capacity["wasted_core_seconds"].sum()),
        "phantom_windows": int(capacity["phantom_windows"].sum()),
    }
# --- watch health ----------------------------------------------------------------------------------

def watch_health(tables) -> pl.DataFrame:
    """Per watch (watcher and resource): the dispatcher's waits on it, its terminations, re-lists
    and frozen time, summed row by row."""
    seconds = {}  # per watch: the sums
    per_write = {}  # (resource, rv) -> the longest wait on that write
    for w in tables["dispatch_waits"].iter_rows(named=True):
        key = (w["resource"], w["watcher"])
        wait = (us(w["end_ts"]) - us(w["start_ts"])) / 1e6
        sums = seconds.setdefault(key, {})
        sums["blocked_waits"] = sums.get("blocked_waits", 0) + 1
        sums["blocked_seconds"] = sums.get("blocked_seconds", 0.0) + wait
        per_write[w["resource"], w["rv"]] = max(per_write.get((w["resource"], w["rv"]), 0.0), wait)
    stalls = {}
    for (resource, _), wait in per_write.items():
        stalls[resource] = stalls.get(resource, 0.0) + wait
    spells = {}  # per watch: its frozen intervals, merged where they overlap or touch
    for t in tables["watch_terminations"].sort("ts", "recovered_ts").iter_rows(named=True):
        sums = seconds.setdefault((t["resource"], t["watcher"]), {})
        sums["terminations"] = sums.get("terminations", 0) + 1
        sums["rewatches"] = sums.get("rewatches", 0) + (t["recovery"] == "rewatch")
        mine = spells.setdefault((t["resource"], t["watcher"]), [])
        start, end = us(t["ts"]), us(t["recovered_ts"])
        if mine and start <= mine[-1][1]:
            mine[-1][1] = max(mine[-1][1], end)
        else:
            mine.append([start, end])
    for key, mine in spells.items():
        frozen = [(end - start) / 1e6 for start, end in mine]
        seconds[key]["frozen_seconds"] = sum(frozen)
        seconds[key]["max_frozen_seconds"] = max(frozen)
    for r in tables["relists"].iter_rows(named=True):
        sums = seconds.setdefault((r["resource"], r["watcher"]), {})
        sums["relists"] = sums.get("relists", 0) + 1
        sums["listed_objects"] = sums.get("listed_objects", 0) + r["objects"]
        sums["list_seconds"] = sums.get("list_seconds", 0.0) + (
            us(r["end_ts"]) - us(r["start_ts"])) / 1e6
    rows = []
    for w in tables["watchers"].iter_rows(named=True):
        for resource in w["resources"].split(","):
            sums = seconds.get((resource, w["watcher"]), {})
            rows.append({"resource": resource, "watcher": w["watcher"],
                         "blocked_waits": sums.get("blocked_waits", 0),
                         "blocked_seconds": sums.get("blocked_seconds", 0.0),
                         "resource_blocked_seconds": stalls.get(resource, 0.0),
                         "terminations": sums.get("terminations", 0),
                         "rewatches": sums.get("rewatches", 0),
                         "relists": sums.get("relists", 0),
                         "listed_objects": sums.get("listed_objects", 0),
                         "list_seconds": sums.get("list_seconds", 0.0),
                         "frozen_seconds": sums.get("frozen_seconds", 0.0),
                         "max_frozen_seconds": sums.get("max_frozen_seconds")})
    return pl.DataFrame(rows, schema={
        "resource": pl.String, "watcher": pl.String, "blocked_waits": pl.Int64,
        "blocked_seconds": pl.Float64, "resource_blocked_seconds": pl.Float64,
        "terminations": pl.Int64, "rewatches": pl.Int64, "relists": pl.Int64,
        "listed_objects": pl.Int64, "list_seconds": pl.Float64, "frozen_seconds": pl.Float64,
        "max_frozen_seconds": pl.Float64})
