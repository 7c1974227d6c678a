"""The invariants every run directory keeps, checked over its tables (``replay check``).

A replay is trusted only if its tables obey the rules of the system they describe: a write reaches
exactly the watchers whose filter matches it, in order, through stages that never run backwards; a
node never holds more than it has; every pod is placed or accounted for; views converge.  Each
rule here has an id, and ``check_run`` checks every one of them on a run directory with DuckDB
SQL (the views of ``queries/views.sql``) and numpy scans of the deliveries, returning one
``Finding`` per invariant.  docs/consistency.md states each rule in plain words.

The expected recipients of each write are computed again here from ``watchers.parquet`` and the
events (the filter rule of ``replay.engine.watchers``), never read from the engine.  Some
findings are *reported* rather than failed: what a model or a recorded trace does by design (the
``kube`` model's API server accepts any binding; a recorded cluster may over-commit), counted so
that a user sees them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replay import memory
from replay.analysis.history import (
    STAGES,
    Deliveries,
    codes,
    ended_writes,
    free_after_each_change,
    ints,
    iso,
    lives,
    pod_history,
)
from replay.analysis.claims import claims_table
from replay.analysis.runs import check_run_dir, duckdb_errors, open_runs
from replay.arrays import previous_in_segment, stable_order
from replay.engine.config import from_description
from replay.engine.pipeline import Source, view_lag_us
from replay.engine.rundir import OUTCOMES, read_manifest
from replay.errors import ReplayError
from replay.jit import njit

EXAMPLES = 5  # offending rows shown per invariant
# What-if models whose placements are checked against the truth when they commit (the others
# are reported: kube's API server accepts any binding by design; a plugin may do either)
CHECKED_COMMITS = ("oracle", "godel", "peer", "omega")
# Of those, the models whose binder checks a placement on its own view and then sends the binding
# (Gödel's binder, and peer's): the API server accepts a binding whatever the node holds
# (kubernetes pkg/registry/core/pod/storage/storage.go, BindingREST.setPodNodeAndMetadata: only
# a pod already bound is refused), so a shrink committed while the request is on its way, the
# client's throttling and ``commit_ms`` after the check, is missed by design
CHECKED_AT_REQUEST = ("godel", "peer")
# Models whose kubelets decide admission (the others' kubelets admit every pod they are sent)
ADMITTING = ("kube",)
RECORDED = "observe"  # the model that keeps a trace's recorded placements
# Models whose attempts' view lag the tool measures (a plugin's model passes its own to
# ``new_attempt``: a difference from its deliveries is reported, not failed)
MEASURED_VIEW_LAG = ("observe", "oracle", "kube", "omega", "godel", "peer")


class Status(enum.Enum):
    OK = "ok"
    FAILED = "FAILED"
    REPORTED = "reported"  # found, and allowed by design: counted, not failed
    NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class Finding:
    """The outcome of one invariant on one run: its status, how many rows break (or are reported
    under) it, up to ``EXAMPLES`` of them, and a note (why it does not apply, what was counted)."""

    invariant: str
    status: Status
    count: int = 0
    examples: tuple[dict[str, Any], ...] = ()
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not Status.FAILED


class Reads(enum.Enum):
    """What an invariant's check reads, which says where ``check_run`` runs it."""

    FILES = "files"  # the table files and the manifest, before anything reads them
    SQL = "sql"  # DuckDB over the run's tables only
    ARRAYS = "arrays"  # the events and pod incarnations as arrays (and DuckDB)
    DELIVERIES = "deliveries"  # numpy scans of the deliveries (and events) only


@dataclass(frozen=True)
class Invariant:
    id: str
    summary: str  # one line, for `replay check --list` and docs/consistency.md
    check: Callable[[Any], Finding] = field(repr=False)  # of RunTables (of a Path: FILES)
    reads: Reads = Reads.SQL


def check_run(run_dir: str | Path) -> list[Finding]:
    """Check every invariant of ``INVARIANTS`` on the run directory ``run_dir``.

    Three threads share the work (numpy, pyarrow and DuckDB release the GIL), each with arrays
    of its own to make, so that no two make the same one: a lane reads the deliveries, then
    scans them (``Reads.DELIVERIES``); another reads the events, groups the pod writes into
    incarnations and numbers the objects, then compares each write's recipients with its
    watchers' (``exactly_once``'s scan); meanwhile this thread has DuckDB answer the invariants
    that need none of that, then those that do.  (With one lane doing both in turn, this thread
    waited for it half of the 1M-pod observe run's check.)  numpy asks for no huge pages for
    those arrays meanwhile (``replay.memory``: the 1M-pod what-if run's check took 32.9-33.4 s
    without them against 36.0-38.4 s with, its system time 12.0-13.0 s against 17.9-19.0 s, two
    pairs alternated)."""
    integrity = table_integrity(Path(run_dir))
    if not integrity.ok:
        if not (Path(run_dir) / "manifest.json").is_file():
            check_run_dir(str(run_dir), verify=False)  # not a run directory: say so, and stop
        return [integrity] + [_not_applicable(i.id, "not checked: a table is damaged")
                              for i in INVARIANTS if i.reads is not Reads.FILES]
    run = RunTables(Path(run_dir))
    try:
        with memory.without_huge_pages(), _lanes(2) as (scans, writes):
            delivered = scans.submit(lambda: run.deliveries)
            events = writes.submit(lambda: (run.event_columns, run.pod_history,
                                            run.object_numbers))
            located = scans.submit(_after, events, lambda: (run.delivery_events,
                                                            run.delivery_resources,
                                                            run.watchers))
            scanned = {i.id: scans.submit(_after, located, i.check, run) for i in INVARIANTS
                       if i.reads is Reads.DELIVERIES}
            run.differing = writes.submit(_after, located, _writes_whose_recipients_differ, run)
            found = {i.id: i.check(run) for i in INVARIANTS if i.reads is Reads.SQL}
            delivered.result()
            events.result()
            found |= {i.id: i.check(run) for i in INVARIANTS if i.reads is Reads.ARRAYS}
            found |= {name: future.result() for name, future in scanned.items()}
        return [integrity] + [found[i.id] for i in INVARIANTS if i.reads is not Reads.FILES]
    finally:
        run.close()


@contextlib.contextmanager
def _lanes(count: int) -> Iterator[list[ThreadPoolExecutor]]:
    """``count`` threads, each running its steps in the order given; if the check stops early
    (an error, Ctrl-C), the steps not begun are dropped, and only those running are waited for
    (a step of a 1M-pod run takes a few seconds at most, a lane's queue tens of them)."""
    lanes = [ThreadPoolExecutor(max_workers=1) for _ in range(count)]
    try:
        yield lanes
    except BaseException:
        for lane in lanes:
            lane.shutdown(wait=False, cancel_futures=True)
        raise
    finally:
        for lane in lanes:
            lane.shutdown(wait=True)


def _after(ready: Future, step: Callable[..., Any], *args: Any) -> Any:
    """``step(*args)`` once ``ready`` is done (a step of the other lane, or of this one)."""
    ready.result()
    return step(*args)


def failed(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if not f.ok]


# capacity_changes where no write sets a pod state (no assume patch, rejection or failure: every
# observe run): a pod incarnation holds its node from its binding to its last delete, as the
# pods table says (one_binding_per_incarnation checks it against the events).  The claims view
# would find the same from the events with windows over every pod name: seconds on 1M pods.
PLACEMENTS_FROM_PODS = """
    WITH taken AS (
        SELECT pods.run, pods.bound_rv AS rv, pods.bound_ts AS commit_ts, pods.node, pods.pod,
               coalesce(pods.cpu_milli, 0) AS cpu_milli,
               coalesce(pods.memory_bytes, 0) AS memory_bytes,
               coalesce(pods.gpu_milli, 0) AS gpu_milli,
               pods.deleted_rv, pods.deleted_ts, binding.attempt_id
        FROM pods
        JOIN events AS binding ON binding.run = pods.run AND binding.rv = pods.bound_rv
        WHERE pods.cpu_milli <> 0 OR pods.memory_bytes <> 0 OR pods.gpu_milli <> 0
    )
    SELECT run, rv, commit_ts, node, -cpu_milli AS cpu_milli, -memory_bytes AS memory_bytes,
           -gpu_milli AS gpu_milli, attempt_id, pod, 'binding' AS change,
           NULL::BOOLEAN AS counts_assumed
    FROM taken
    UNION ALL
    SELECT run, deleted_rv, deleted_ts, node, cpu_milli, memory_bytes, gpu_milli, NULL, pod,
           'delete', NULL
    FROM taken
    WHERE deleted_rv > rv
    UNION ALL
    FROM node_capacity_changes"""


# -- the run's tables ------------------------------------------------------------------------------

class RunTables:
    """One run directory: a DuckDB connection with ``queries/views.sql`` over it (plus temporary
    tables the checks share), its manifest, and the deliveries as numpy arrays."""

    def __init__(self, run_dir: Path):
        self.dir = run_dir
        self.con = open_runs([str(run_dir)])
        self.manifest = read_manifest(run_dir)
        self.model = self.manifest.get("model", {}).get("name")
        self.params = self.manifest.get("model", {}).get("params", {})
        self.recorded = self.model == RECORDED
        self._registered: set[str] = set()
        self.differing: Future | None = None  # exactly_once's scan, when run ahead on a thread
        windows = pq.read_schema(run_dir / "capacity_windows.parquet").names
        if "open_at_end" not in windows:
            raise ReplayError(f"{run_dir}: its capacity_windows table predates open_at_end; "
                              f"`replay derive {run_dir}` computes it again")

    def close(self) -> None:
        self.con.close()

    def param_us(self, name: str) -> int:
        """The model's parameter ``name``, given in milliseconds, in whole microseconds (0 if
        the run has none)."""
        return round(float(self.params.get(name, 0.0)) * 1000)

    def sql(self, query: str, params: list | None = None) -> duckdb.DuckDBPyRelation:
        with duckdb_errors("replay check"):
            return self.con.sql(query, params=params)

    def table(self, name: str, query: str) -> None:
        """Materialise ``query`` as the temporary table ``name`` (once)."""
        with duckdb_errors("replay check"):
            self.con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} AS {query}")

    # -- shared temporary tables -------------------------------------------------------------
    def pod_writes(self) -> str:
        """Every committed write to a named pod: its incarnation (``life``: how many creates of
        the name came before it, its own included), what it does (``kind``), and the rv of the
        incarnation's latest binding at or before it (``bound_rv``; see ``_pod_history``)."""
        if "pod_writes" not in self._registered:
            self.register("pod_writes", self.pod_history)
        return "pod_writes"

    def lives(self) -> str:
        """One row per pod incarnation found in the events: its bindings and deletes
        (``_lives``)."""
        if "lives" not in self._registered:
            self.register("lives", lives(self.pod_history))
        return "lives"

    def claims(self) -> str:
        """The claims (views.sql) computed once, as a temporary table of that name, which hides
        the view from then on: ``capacity_changes`` reads it too.  A view is computed afresh
        wherever a query reads it, and the check read the claims three times (the truth, and
        ``kubelet_admission``'s join of the claims with themselves): 8 s each on the 1M-pod
        Gödel what-if run, where the truth then took 2.5 s instead of 9.8 and the admissions
        2.1 instead of 16.7.  Their rows are computed in numpy (``claims_table``), where
        DuckDB's window functions over every pod write took 6.1 s of that run's check; left to
        the SQL where they must be."""
        if "claims" not in self._registered:
            with duckdb_errors("replay check"):
                if not claims_table(self.con):
                    self.table("claims", "FROM claims")
            self._registered.add("claims")
        return "claims"

    def watch(self) -> str:
        """One row per (watcher, resource it watches), with the node a node-bound one is bound
        to."""
        self.table("watch", """
            SELECT watcher, node AS only_node, unnest(string_split(resources, ',')) AS resource,
                   terminal_pods
            FROM watchers""")
        return "watch"

    def truth(self) -> str:
        """``capacity_changes`` (views.sql) of the bound pods (as a kubelet or Gödel's binder
        counts them, not a Gödel scheduler's assume patches: those are optimistic by design,
        the binder checks them) with the free capacity on the node after each change (negative:
        over-committed), and the rv of the node's latest allocatable decrease at or before it
        (``last_shrink_rv``)."""
        if "truth" not in self._registered:
            if self.pod_states:
                self.claims()
            query = ("FROM capacity_changes WHERE counts_assumed IS DISTINCT FROM true"
                     if self.pod_states else PLACEMENTS_FROM_PODS)
            with duckdb_errors("replay check"):
                changes = self.con.sql(query).to_arrow_table()
            self.register("truth", free_after_each_change(changes))
        return "truth"

    @cached_property
    def pod_limits(self) -> str | None:
        """The temporary table ``pod_limits``: per node write that says or keeps a limit, the
        node's ``max_pods`` as its writes said it last, and the rv of its latest decrease
        (``last_shrink_rv``: a first limit, after none, is one); None if no node says one."""
        if not self.value("SELECT count(*) FROM events WHERE resource = 'nodes' "
                          "AND max_pods IS NOT NULL"):
            return None
        self.table("pod_limits", """
            WITH said AS (
                SELECT rv, commit_ts, name AS node, last_value(max_pods IGNORE NULLS) OVER (
                           PARTITION BY name ORDER BY rv ROWS UNBOUNDED PRECEDING) AS max_pods
                FROM events
                WHERE resource = 'nodes'
            ), lowered AS (
                SELECT *, max_pods < coalesce(lag(max_pods) OVER (PARTITION BY node ORDER BY rv),
                                              9223372036854775807) AS lowers
                FROM said
                WHERE max_pods IS NOT NULL
            )
            SELECT rv, commit_ts, node, max_pods,
                   max(rv) FILTER (lowers) OVER (PARTITION BY node ORDER BY rv) AS last_shrink_rv
            FROM lowered""")
        return "pod_limits"

    @cached_property
    def pod_states(self) -> bool:
        """Whether any write sets a pod state (an assume patch, a rejection, a failure)."""
        return bool(self.value("SELECT count(*) FROM events WHERE pod_state IS NOT NULL"))

    def pod_moves(self) -> str:
        """SQL: rv, commit_ts, node, pod, change, attempt_id and ``moved`` (1: the pod comes,
        -1: it goes) of every write that moves a pod, with requests or without, onto or off a
        node as the truth counts them (``truth``: bound pods).  Where no write sets a pod state,
        a pod holds its node from its binding to its last delete, as the pods table says: the
        claims, computed over every pod write, took a gigabyte more of the check of a 1M-pod
        observe run."""
        if self.pod_states:
            return f"""
                SELECT rv, commit_ts, node, pod, change, attempt_id,
                       CASE WHEN takes THEN 1 ELSE -1 END AS moved
                FROM {self.claims()}
                WHERE counts_assumed IS DISTINCT FROM true"""
        return """
            SELECT pods.bound_rv AS rv, pods.bound_ts AS commit_ts, pods.node, pods.pod,
                   'binding' AS change, binding.attempt_id, 1 AS moved
            FROM pods
            JOIN events AS binding ON binding.rv = pods.bound_rv
            UNION ALL
            SELECT deleted_rv, deleted_ts, node, pod, 'delete', NULL, -1 FROM pods
            WHERE deleted_rv > bound_rv"""

    def register(self, name: str, table: pa.Table) -> None:
        """Make the Arrow ``table`` a view of the connection (DuckDB reads it in place)."""
        with duckdb_errors("replay check"):
            self.con.register(name, table)
        self._registered.add(name)

    def value(self, query: str) -> Any:
        """The first column of the first row of ``query``'s result."""
        with duckdb_errors("replay check"):
            return self.con.execute(query).fetchall()[0][0]

    # -- numpy ---------------------------------------------------------------------------------
    @cached_property
    def events(self) -> pa.Table:
        """The events table's columns that say what each write is, in rv order (a file out of
        order is sorted: ``rv_in_commit_order`` says so); ``resource`` as a dictionary."""
        table = pq.read_table(self.dir / "events.parquet", columns=[
            "rv", "commit_ts", "verb", "resource", "subresource", "namespace", "name", "node"],
            read_dictionary=["resource"]).unify_dictionaries()
        table = table.cast(pa.schema([
            pa.field(f.name, pa.string()) if pa.types.is_large_string(f.type)
            or pa.types.is_string_view(f.type) else
            pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name == "resource"
            else f for f in table.schema]))
        rv = ints(table["rv"])
        if len(rv) > 1 and not bool(np.all(rv[1:] > rv[:-1])):
            table = table.take(np.argsort(rv, kind="stable"))
        return table.combine_chunks()

    @cached_property
    def event_columns(self) -> dict[str, np.ndarray]:
        """rv, commit_ts (µs) and a resource code per event, in rv order; ``resources`` names
        the codes."""
        resource = self.events["resource"].chunk(0) if self.events.num_rows else \
            pa.array([], pa.string()).dictionary_encode()
        self.resources = resource.dictionary.to_pylist()
        return {"rv": ints(self.events["rv"]), "commit_ts": ints(self.events["commit_ts"]),
                "resource": resource.indices.to_numpy(zero_copy_only=False).astype(np.int64)}

    @cached_property
    def pod_history(self) -> pa.Table:
        return pod_history(self.events, self.is_resource("pods"))

    @cached_property
    def ended(self) -> np.ndarray:
        """Per event (in rv order), whether it writes a pod that had ended before it
        (``ended_writes``), which a watch of non-terminal pods does not receive."""
        ended = np.zeros(len(self.event_columns["rv"]), dtype=bool)
        states = pq.read_table(self.dir / "events.parquet", columns=["rv", "pod_state"])
        terminal = pc.fill_null(pc.is_in(states["pod_state"], pa.array(["succeeded", "failed"])),
                                False).to_numpy(zero_copy_only=False)
        if not np.any(terminal):
            return ended
        history = self.pod_history
        at, _ = self.at_rv(ints(history["rv"]))
        terminal_at = np.zeros(len(ended), dtype=bool)
        terminal_at[self.at_rv(ints(states["rv"])[terminal])[0]] = True
        ended[at] = ended_writes(history, terminal_at[at])
        return ended

    def is_resource(self, name: str) -> np.ndarray:
        """Per event (in rv order), whether it is a write of resource ``name``."""
        resource = self.event_columns["resource"]
        return resource == self.resources.index(name) if name in self.resources else \
            np.zeros(len(resource), dtype=bool)

    def at_rv(self, rv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The position in ``events`` of each rv, and whether there is an event with that rv
        (positions are clipped into range where there is none)."""
        events = self.event_columns["rv"]
        if not len(events):
            return np.zeros(len(rv), dtype=np.int64), np.zeros(len(rv), dtype=bool)
        if events[0] == 1 and events[-1] == len(events):  # 1..n, as a run numbers them
            at = np.clip(rv - 1, 0, len(events) - 1)
        else:
            at = np.minimum(np.searchsorted(events, rv), len(events) - 1)
        return at, events[at] == rv

    def concerned_nodes(self, nodes: list[str]) -> np.ndarray:
        """Per event (in rv order), the node it concerns as a node-bound watcher sees it, as an
        index into ``nodes`` (-1 for none, or another node): a node write's own node; a pod
        write's, the node its incarnation is bound to by then."""
        events, value_set = self.events, pa.array(nodes, pa.string())

        def index(column: pa.Array) -> np.ndarray:
            found = pc.fill_null(pc.index_in(column, value_set=value_set), -1)
            return found.to_numpy(zero_copy_only=False).astype(np.int64)

        node = np.where(self.is_resource("nodes"), index(events["name"]), -1)
        pods = self.pod_history
        bound = pods["bound_rv"]
        has = pc.is_valid(bound).to_numpy(zero_copy_only=False)
        binding_at, _ = self.at_rv(ints(bound)[has])
        write_at, _ = self.at_rv(ints(pods["rv"])[has])
        node[write_at] = index(events["node"])[binding_at]
        return node

    @cached_property
    def delivery_events(self) -> tuple[np.ndarray, np.ndarray]:
        """``at_rv`` of every delivery, computed once: the streams' order, the objects' and
        ``exactly_once``'s scan each read it (15M deliveries of a 1M-pod observe run)."""
        return self.at_rv(self.deliveries.rv)

    def resource_of(self, rv: np.ndarray) -> np.ndarray:
        """The resource code of each rv's event (-1 where there is none)."""
        return self._resource_at(*self.at_rv(rv))

    @cached_property
    def delivery_resources(self) -> np.ndarray:
        """``resource_of`` every delivery."""
        return self._resource_at(*self.delivery_events)

    def _resource_at(self, at: np.ndarray, known: np.ndarray) -> np.ndarray:
        return np.where(known, self.event_columns["resource"][at], -1) if len(at) else \
            np.zeros(0, dtype=np.int64)

    @cached_property
    def object_keys(self) -> np.ndarray:
        """Per event (in rv order), a number for its object: its resource, namespace and name
        (a watcher's client queue is keyed by namespace/name within one resource's informer)."""
        events = self.events
        namespace, name = (codes(pc.fill_null(events[c], "")).indices.to_numpy(
            zero_copy_only=False).astype(np.int64) for c in ("namespace", "name"))
        resource = self.event_columns["resource"]
        return (namespace * (int(name.max(initial=0)) + 1) + name) * (
            int(resource.max(initial=0)) + 1) + resource

    @cached_property
    def object_numbers(self) -> np.ndarray:
        """Per event (in rv order), its object (``object_keys``) as a small number from 1.

        Numbered among the events, not among the deliveries: the sort of their keys this takes
        is of the writes (5M on a 1M-pod what-if run), not of the deliveries (27.1M: 11.7 s)."""
        return np.unique(self.object_keys, return_inverse=True)[1].reshape(-1) \
            .astype(np.int64) + 1

    @cached_property
    def delivery_objects(self) -> np.ndarray:
        """A small number per delivery for its event's object (equal rvs, equal objects), 0
        where there is no event with its rv."""
        at, known = self.delivery_events
        if not len(at):
            return np.zeros(0, dtype=np.int64)
        return np.where(known, self.object_numbers[at], 0)

    def watcher_flags(self, names: list[str], test: Callable[[dict], bool]) -> np.ndarray:
        """Whether ``test(row)`` holds of each watcher of ``names``, by its row of watchers."""
        rows = {w["watcher"]: w for w in self.watchers}
        return np.array([name in rows and test(rows[name]) for name in names], dtype=bool)

    @cached_property
    def previous_of_object(self) -> np.ndarray:
        """Per delivery, the position of its watcher's delivery of the same object before it
        (in rv order: the deliveries are by watcher, then rv), -1 for the first
        (``delivery_objects``, ``previous_in_segment``)."""
        key = self.delivery_objects
        return previous_in_segment(self.deliveries.watcher, key, int(key.max(initial=0)) + 1)

    @cached_property
    def watchers(self) -> list[dict[str, Any]]:
        return pq.read_table(self.dir / "watchers.parquet").to_pylist()

    @cached_property
    def deliveries(self) -> Deliveries:
        return Deliveries.read(self.dir / "deliveries.parquet")


# -- findings ------------------------------------------------------------------------------------

def _finding(invariant: str, failures: int, examples: list[dict], *, reported: int = 0,
             reported_examples: list[dict] | None = None, note: str = "") -> Finding:
    """FAILED with ``failures`` if any, else REPORTED with ``reported`` if any, else OK."""
    if failures:
        return Finding(invariant, Status.FAILED, failures, tuple(examples[:EXAMPLES]), note)
    if reported:
        return Finding(invariant, Status.REPORTED, reported,
                       tuple((reported_examples or [])[:EXAMPLES]), note)
    return Finding(invariant, Status.OK, note=note)


def _from_sql(run: RunTables, invariant: str, offending: str, *, reported: str | None = None,
              order: str = "1", note: str = "") -> Finding:
    """A finding from SQL: ``offending`` selects the rows that break the invariant; ``reported``
    (optional) those it allows and counts."""
    failures, examples = _count_and_examples(run, offending, order)
    counted, counted_examples = (0, []) if reported is None else \
        _count_and_examples(run, reported, order)
    return _finding(invariant, failures, examples, reported=counted,
                    reported_examples=counted_examples, note=note)


def _count_and_examples(run: RunTables, query: str, order: str) -> tuple[int, list[dict]]:
    with duckdb_errors("replay check"):
        run.con.execute(f"CREATE OR REPLACE TEMP TABLE _rows AS {query}")
    count = run.value("SELECT count(*) FROM _rows")
    examples = run.sql(f"FROM _rows ORDER BY {order} LIMIT {EXAMPLES}").pl().to_dicts() \
        if count else []
    run.con.execute("DROP TABLE _rows")
    return count, [_plain(row) for row in examples]


def _plain(row: dict) -> dict:
    """Values a person reads: timestamps in ISO 8601 with microseconds, UTC."""
    out = {}
    for key, value in row.items():
        if hasattr(value, "isoformat"):
            value = value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        out[key] = value
    return out


def _not_applicable(invariant: str, why: str) -> Finding:
    return Finding(invariant, Status.NOT_APPLICABLE, note=why)


# -- the files ------------------------------------------------------------------------------------

def table_integrity(run_dir: Path) -> Finding:
    """Every table is the one the run wrote: there, inside the run directory, its size, footer
    and SHA-256 those manifest.json records (``check_run_dir`` verifying in full).  The other
    invariants are checked only then: a damaged table's numbers say nothing about the model."""
    try:
        check_run_dir(str(run_dir), full=True)
    except ReplayError as err:
        return _finding("table_integrity", 1, [{"problem": str(err)}])
    return _finding("table_integrity", 0, [])


# -- the watch pipeline --------------------------------------------------------------------------

def rv_in_commit_order(run: RunTables) -> Finding:
    """Events are numbered 1, 2, ... in commit order, so commit_ts never decreases with rv."""
    rv, commit = run.event_columns["rv"], run.event_columns["commit_ts"]
    expected = np.arange(1, len(rv) + 1)
    earlier = np.r_[False, commit[1:] < commit[:-1]] if len(rv) else np.zeros(0, bool)
    rows = np.flatnonzero((rv != expected) | earlier | (commit == -1))
    return _finding("rv_in_commit_order", len(rows), [
        {"rv": int(rv[i]), "expected_rv": int(expected[i]), "commit_ts": iso(commit[i]),
         "previous_commit_ts": iso(commit[i - 1]) if i else None} for i in rows[:EXAMPLES]])


def stage_times_ordered(run: RunTables) -> Finding:
    """commit <= cached <= dispatched <= sent <= received <= dequeued <= applied, none null;
    except that a re-list's delivery may be sent (the list's response) before its write was
    dispatched: the list reads the watch cache's store, which holds a write before the
    dispatcher hands it out (there cached <= sent)."""
    d = run.deliveries
    bad = np.zeros(len(d.rv), dtype=bool)
    for column in STAGES:
        bad |= d.times[column] == -1
    relisted = d.source == Source.RELIST
    for earlier, later in zip(STAGES, STAGES[1:]):
        if later == "sent_ts":
            bad |= np.where(relisted, d.times[later] < d.times["cached_ts"],
                            d.times[later] < d.times[earlier])
        else:
            bad |= d.times[later] < d.times[earlier]
    return _rows_finding("stage_times_ordered", d, np.flatnonzero(bad))


def _rows_finding(invariant: str, d: Deliveries, rows: np.ndarray, **extra) -> Finding:
    examples = [{**d.row(int(i)), **{k: v[n] for k, v in extra.items()}}
                for n, i in enumerate(rows[:EXAMPLES])]
    return _finding(invariant, len(rows), examples)


# delivery_matches_event's problems; a row with several is named by the last of them
EVENT_PROBLEMS = ("cached_ts differs from the write's first delivery's",
                  "dispatched_ts differs from the write's first delivery's",
                  "commit_ts is not the event's", "source is not watch, rewatch, relist or list",
                  "a list row not applied at its commit", "no such event")


def delivery_matches_event(run: RunTables) -> Finding:
    """Each delivery is of a committed write, carries that write's commit_ts, and the shared
    stages' times (cached_ts, dispatched_ts) are the same in every delivery of one write that
    went through the pipeline (an instant watcher's has every time at the commit), whatever its
    source (a documented one: watch, rewatch, relist or list); a ``list`` row (the watcher's
    first list: an object the trace did not see created) has every time at the commit.

    One compiled pass (``_event_problems``) names each delivery's problem: numpy's masks and
    gathers of the 27.1M deliveries of a 1M-pod what-if run took 0.8-3.0 s, most of it the
    first touch of their temporary arrays."""
    d, (at, known) = run.deliveries, run.delivery_events
    problem = _event_problems(at, known, run.event_columns["commit_ts"], d.source, d.piped,
                              d.times["commit_ts"], d.times["cached_ts"],
                              d.times["dispatched_ts"], int(Source.LIST))
    rows = np.flatnonzero(problem)
    return _rows_finding("delivery_matches_event", d, rows,
                         problem=[EVENT_PROBLEMS[p - 1] for p in problem[rows[:EXAMPLES]]])


@njit(cache=True, nogil=True)
def _event_problems(at, known, event_commit, source, piped, commit, cached, dispatched,
                    listed):  # pragma: no cover - compiled
    """Per delivery, the number (from 1) of its last problem in ``EVENT_PROBLEMS``, 0 for
    none.  A write's shared stages are compared with those of its first delivery through the
    pipeline in the deliveries' order (by watcher, then rv); a delivery of no event with no
    other."""
    first = np.full(len(event_commit), -1, np.int64)
    problem = np.zeros(len(at), np.int8)
    for i in range(len(at)):
        if not known[i]:
            problem[i] = 6
            continue
        if piped[i]:
            j = first[at[i]]
            if j < 0:
                first[at[i]] = i
            else:
                if cached[i] != cached[j]:
                    problem[i] = 1
                if dispatched[i] != dispatched[j]:
                    problem[i] = 2
        if commit[i] != event_commit[at[i]]:
            problem[i] = 3
        if source[i] < 0:
            problem[i] = 4
        if source[i] == listed and piped[i]:
            problem[i] = 5
    return problem


# stream_order's problems, one bit each, in the order a row's are listed
STREAM_PROBLEMS = ("rv delivered twice", "sent_ts before the previous delivery's",
                   "received_ts before the previous delivery's",
                   "applied_ts before the previous delivery's (fifo)",
                   "applied_ts before the previous delivery's of its object")


def stream_order(run: RunTables) -> Finding:
    """Per (watcher, resource) stream, in rv order: each rv once, and sent_ts and received_ts
    never decrease (a watch stream is one TCP stream, a re-list's rows share the list's
    response), across terminations and re-lists.  A ``fifo`` client queue applies the stream's
    watch and re-watch rows in rv order; ``delta_fifo`` and ``workqueue`` (and a re-list's
    Replace, in key order) only each object's, so per (watcher, object) applied_ts never
    decreases in rv order, whatever the queue.

    One compiled pass (``_stream_problems``) compares each delivery with the one before it in
    each of its groups: numpy's gathers of the 15M deliveries of a 1M-pod observe run, and of
    the one before each in its stream, its live stream and its object, took 3.0 s."""
    d = run.deliveries
    fifo = run.watcher_flags(d.names, lambda w: w["client_queue"] == "fifo")[d.watcher]
    stream = run.delivery_resources + 1  # (0: no event, a stream of its own)
    objects = run.delivery_objects
    problems = _stream_problems(
        d.watcher, stream, int(stream.max(initial=0)) + 1, fifo & (d.source != Source.RELIST),
        objects, int(objects.max(initial=0)) + 1, d.rv, d.times["sent_ts"],
        d.times["received_ts"], d.times["applied_ts"])
    flagged = np.flatnonzero(problems)
    bits = [(problems[flagged] >> bit) & 1 for bit in range(len(STREAM_PROBLEMS))]
    rows = np.repeat(flagged, np.sum(bits, axis=0, dtype=np.int64))  # once for each problem
    named = [STREAM_PROBLEMS[bit] for i in range(min(len(flagged), EXAMPLES))
             for bit in range(len(STREAM_PROBLEMS)) if bits[bit][i]]
    return _rows_finding("stream_order", d, rows, problem=named[:EXAMPLES])


@njit(cache=True, nogil=True)
def _stream_problems(watcher, stream, streams, live, obj, objects, rv, sent, received,
                     applied):  # pragma: no cover - compiled
    """Per delivery (by watcher, then rv), ``STREAM_PROBLEMS`` as bits: against the watcher's
    delivery before it of the same stream (each rv once, sent and received never lower), of
    the same stream among the fifo client queue's live rows (applied never lower), and of the
    same object (applied never lower).  Each group keeps its latest position in a slot per
    stream or object; one before the watcher's first delivery is another watcher's."""
    last_stream = np.full(streams, -1, np.int64)
    last_live = np.full(streams, -1, np.int64)
    last_object = np.full(objects, -1, np.int64)
    problems = np.zeros(len(rv), np.uint8)
    begin = 0
    for i in range(len(rv)):
        if i and watcher[i] != watcher[i - 1]:
            begin = i
        k, before = stream[i], last_stream[stream[i]]
        if before >= begin:
            if rv[i] == rv[before]:
                problems[i] |= 1
            if sent[i] < sent[before]:
                problems[i] |= 1 << 1
            if received[i] < received[before]:
                problems[i] |= 1 << 2
        last_stream[k] = i
        if live[i]:
            before = last_live[k]
            if before >= begin and applied[i] < applied[before]:
                problems[i] |= 1 << 3
            last_live[k] = i
        before = last_object[obj[i]]
        if before >= begin and applied[i] < applied[before]:
            problems[i] |= 1 << 4
        last_object[obj[i]] = i
    return problems


def coalesced_shares_handling(run: RunTables) -> Finding:
    """A delivery marked ``coalesced`` was absorbed by its object's queued item (a
    ``workqueue``; or a ``delta_fifo`` delete merged with the next): only those client queues
    coalesce, and it is applied by the handling that absorbed it, so it shares its applied_ts
    with a delivery of the same object to the same watcher."""
    d = run.deliveries
    if not d.coalesced.any():
        return _finding("coalesced_shares_handling", 0, [])
    fifo = run.watcher_flags(d.names, lambda w: w["client_queue"] == "fifo")[d.watcher]
    later = np.flatnonzero(run.previous_of_object >= 0)
    earlier = run.previous_of_object[later]
    same = d.times["applied_ts"][later] == d.times["applied_ts"][earlier]
    shares = np.zeros(len(d.rv), dtype=bool)
    shares[later[same]] = True  # with the one before it
    shares[earlier[same]] = True  # with the one after it
    rows = np.flatnonzero(d.coalesced & (fifo | ~shares))
    return _rows_finding("coalesced_shares_handling", d, rows, problem=[
        "coalesced by a fifo client queue" if fifo[i] else
        "applied apart from every other delivery of its object" for i in rows[:EXAMPLES]])


def missed_writes_recovered(run: RunTables) -> Finding:
    """A write a terminated watch missed reaches its watcher by the recovery: after a
    termination (``watch_terminations``), the write its stream could not take and every later
    one are re-sent from the watch cache's window (``rewatch``, ahead of anything the new watch
    sends) or covered by the watcher's next re-list (``relist``: every write up to the list's rv,
    sent no earlier than the list started and applied by its end, ``relists``); and no
    delivery is re-sent or re-listed without a termination before it.  With ``exactly_once``
    this is: every write reaches the watcher once, by the live stream or by its recovery."""
    d = run.deliveries
    terminated = run.value("SELECT count(*) FROM watch_terminations")
    if not terminated and not np.any((d.source != Source.WATCH) & (d.source != Source.LIST)):
        return _finding("missed_writes_recovered", 0, [])
    return _from_sql(run, "missed_writes_recovered", """
        WITH stream AS (
            SELECT deliveries.rv, deliveries.watcher, events.resource,
                   deliveries.source::VARCHAR AS source, deliveries.sent_ts, deliveries.applied_ts
            FROM deliveries
            JOIN events USING (rv)
            SEMI JOIN (SELECT watcher FROM watch_terminations
                       UNION SELECT watcher FROM deliveries
                       WHERE source NOT IN ('watch', 'list')) USING (watcher)
            WHERE deliveries.source <> 'list'  -- before every watch: the watcher's first list
        ), terms AS (
            -- each termination with the first write its watch missed: the stream's first
            -- after the last one the client received (resume_rv), which may be earlier than
            -- the write it could not take (still in its buffer), but not one the closed
            -- watch's result channel still handed over after the close (a previous
            -- recovery's re-sent write among them)
            SELECT terms.watcher, terms.resource, terms.ts, terms.rv,
                   terms.recovery::VARCHAR AS recovery,
                   coalesce((SELECT min(stream.rv) FROM stream
                             WHERE stream.watcher = terms.watcher
                               AND stream.resource = terms.resource
                               AND stream.rv > terms.resume_rv AND stream.rv <= terms.rv),
                            terms.rv) AS missed_rv,
                   (SELECT min(relists.rv) FROM relists
                    WHERE relists.watcher = terms.watcher AND relists.resource = terms.resource
                      AND relists.start_ts >= terms.ts) AS listed_rv
            FROM watch_terminations AS terms
        ), after AS (
            -- each delivery with the stream's latest termination whose missed writes start at
            -- or before its rv
            SELECT stream.*, terms.ts AS terminated_ts, terms.rv AS terminated_rv,
                   terms.missed_rv, terms.recovery, terms.listed_rv
            FROM stream
            ASOF LEFT JOIN terms
              ON terms.watcher = stream.watcher AND terms.resource = stream.resource
             AND terms.missed_rv <= stream.rv
        ), ordered AS (
            SELECT *, bool_or(source = 'watch') OVER (
                          PARTITION BY watcher, resource, missed_rv ORDER BY rv
                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS after_live,
                      source <> 'watch' AND (terminated_rv IS NULL OR sent_ts < terminated_ts)
                          AS unprompted,
                      rv = terminated_rv AND source = 'watch' AS taken_while_closed,
                      recovery = 'relist' AND rv >= terminated_rv
                          AND rv <= coalesce(listed_rv, rv) AND source <> 'relist' AS not_listed
            FROM after
        )
        SELECT rv, watcher, resource, source, terminated_rv, recovery,
               CASE WHEN unprompted THEN source || ' without a termination before it'
                    WHEN taken_while_closed THEN 'the write the watch could not take, sent on it'
                    WHEN not_listed THEN 'missed while terminated, not covered by the re-list'
                    WHEN source = 'rewatch' AND coalesce(after_live, false)
                    THEN 're-sent after the new watch had sent a later write'
                    ELSE 'outside every re-list of its stream' END AS problem
        FROM ordered
        WHERE unprompted OR taken_while_closed OR not_listed
           OR (source = 'rewatch' AND coalesce(after_live, false))
           OR (source = 'relist' AND NOT EXISTS (
                SELECT 1 FROM relists
                WHERE relists.watcher = ordered.watcher AND relists.resource = ordered.resource
                  AND relists.rv >= ordered.rv AND relists.start_ts <= ordered.sent_ts
                  AND relists.end_ts >= ordered.applied_ts))""", order="watcher, rv")


def shared_queues_fifo(run: RunTables) -> Finding:
    """The API server's shared queues are FIFO, one pair per resource (its watch cache and its
    dispatch loop): cached_ts and dispatched_ts never decrease with rv among the writes of one
    resource (over the deliveries that went through them)."""
    d = run.deliveries
    piped = np.flatnonzero(d.piped & (d.rv >= 0))
    first = np.full(int(d.rv.max(initial=0)) + 1, -1, dtype=np.int64)  # a delivery of each rv
    first[d.rv[piped[::-1]]] = piped[::-1]
    first = first[first >= 0]  # in rv order
    resource = run.resource_of(d.rv[first])
    first = first[stable_order(resource + 1, int(resource.max(initial=0)) + 2)]
    same = np.sort(resource)[1:] == np.sort(resource)[:-1]
    rows = []
    for column in ("cached_ts", "dispatched_ts"):
        times = d.times[column][first]
        rows.append(first[1:][same & (times[1:] < times[:-1])])
    return _rows_finding("shared_queues_fifo", d, np.unique(np.concatenate(rows)))


def _writes_whose_recipients_differ(run: RunTables) -> np.ndarray:
    """The rvs whose deliveries are not exactly the expected recipients, by count and by the
    sum of a 64-bit hash of their names (in two 32-bit halves, summed exactly as floats)."""
    rv, resource = run.event_columns["rv"], run.event_columns["resource"]
    index = {name: i for i, name in enumerate(run.resources)}
    watchers = pq.read_table(run.dir / "watchers.parquet").to_pylist()
    watched = sorted({w["node"] for w in watchers if w["node"] is not None})
    bound = {name: k for k, name in enumerate(watched)}
    everywhere = len(watched)  # the row of the watchers bound to no node
    # per (node, resource): the count, low half and high half of its watchers; and of those
    # of them that select non-terminal pods only
    expected = np.zeros((2, 3, everywhere + 1, len(index) + 1))
    halves = _halves([w["watcher"] for w in watchers])
    for w, (low, high) in zip(watchers, halves):
        for name in w["resources"].split(","):
            k = everywhere if w["node"] is None else bound[w["node"]]
            column = index.get(name, len(index))  # (the last: a resource with no writes)
            expected[0, :, k, column] += (1, low, high)
            if name == "pods" and not w["terminal_pods"]:
                expected[1, :, k, column] += (1, low, high)
    node = run.concerned_nodes(watched)
    per_write = expected[:, :, everywhere, resource] + np.where(
        node >= 0, expected[:, :, np.maximum(node, 0), resource], 0)
    per_write = per_write[0] - (np.where(run.ended, per_write[1], 0) if np.any(expected[1])
                                else 0)
    d = run.deliveries
    at, known = run.delivery_events
    halves = _halves(d.names)
    received = np.stack([np.bincount(at[known], minlength=len(rv))] + [
        np.bincount(at[known], weights=halves[d.watcher[known], i], minlength=len(rv))
        for i in (0, 1)])
    differs = np.any(received != per_write, axis=0)
    return np.union1d(rv[differs], d.rv[~known])


def _halves(names: list[str]) -> np.ndarray:
    """A 64-bit hash of each name, as its low and high 32 bits (floats: sums of up to 2**21 of
    them are exact)."""
    hashed = pl.Series(names, dtype=pl.String).hash(seed=7).to_numpy()
    return np.stack([hashed & 0xFFFFFFFF, hashed >> 32], axis=1).astype(np.float64)


def exactly_once(run: RunTables) -> Finding:
    """Every committed write reaches exactly the watchers whose filter matches it, once each.

    The recipients are computed from ``watchers`` and the events: a watcher receives a write of
    a resource it watches; one bound to a node only the node's own writes and those of pods
    bound to it (from the binding on, within the pod's incarnation); one that selects
    non-terminal pods (``terminal_pods`` false) no write of a pod that had ended before it
    (``RunTables.ended``).  Compared first by count and a checksum of the recipients' names per
    write, then exactly for the writes that differ.
    """
    differing = run.differing.result() if run.differing is not None else \
        _writes_whose_recipients_differ(run)
    if not len(differing):
        return _finding("exactly_once", 0, [])
    run.register("differing", pa.table({"rv": differing}))
    nodes = pq.read_table(run.dir / "watchers.parquet")["node"].drop_null().unique().to_pylist()
    concerned = run.concerned_nodes(nodes)
    run.register("concerning", pa.table({
        "rv": run.event_columns["rv"], "resource": run.events["resource"].cast(pa.string()),
        "node": pa.array(nodes + [None], pa.string()).take(pa.array(
            np.where(concerned >= 0, concerned, len(nodes)))), "ended": run.ended}))
    watch = run.watch()
    return _from_sql(run, "exactly_once", f"""
        WITH expected AS (
            SELECT concerning.rv, watch.watcher
            FROM concerning SEMI JOIN differing USING (rv)
            JOIN {watch} AS watch
              ON watch.resource = concerning.resource
             AND (watch.only_node IS NULL OR watch.only_node = concerning.node)
             AND (watch.terminal_pods OR NOT concerning.ended)
        ), actual AS (
            SELECT rv, watcher, count(*) AS times
            FROM deliveries SEMI JOIN differing USING (rv)
            GROUP BY rv, watcher
        )
        SELECT rv, watcher,
               CASE WHEN actual.times IS NULL THEN 'missing'
                    WHEN expected.watcher IS NULL THEN 'not a recipient'
                    ELSE 'delivered ' || actual.times || ' times' END AS problem
        FROM expected FULL JOIN actual USING (rv, watcher)
        WHERE actual.times IS NULL OR expected.watcher IS NULL OR actual.times > 1""",
                     order="rv, watcher")


# -- capacity --------------------------------------------------------------------------------------

OVER = ("(free_cpu < 0 AND cpu_milli < 0) OR (free_memory < 0 AND memory_bytes < 0) "
        "OR (free_gpu < 0 AND gpu_milli < 0)")
ANY_OVER = "least(free_cpu, free_memory, free_gpu) < 0"
# A ``truth`` row of a pod created on its node: the trace's placement, not the model's (listed
# on it at the trace's start, or a static pod's mirror pod, which its kubelet creates)
CREATED_ON_NODE = """EXISTS (SELECT 1 FROM events WHERE events.rv = {0}.rv
    AND events.resource = 'pods' AND events.verb = 'create' AND events.subresource IS NULL)"""


def truth_within_capacity(run: RunTables) -> Finding:
    """At every rv, the requests of the pods bound to a node (binding committed, last delete not
    yet) fit its allocatable, in every resource.

    Failed, for a model whose commits are checked (``CHECKED_COMMITS``), when a binding pushes
    its node over in a resource the pod requests, unless the node's latest allocatable decrease
    was still on its way to a scheduler or binder (a watcher of every node) when the binding was
    checked: at its commit, or for a binder that checks before it sends (``CHECKED_AT_REQUEST``)
    at its request, ``commit_ms`` and the attempt's throttling before the commit (the
    attempt's whole throttling, its scheduler's writes' too: an earlier bound, which reports
    rather than fails where the two differ).  Reported: every other over-commitment (after a
    shrink; of the ``kube`` model, whose API server accepts any binding; recorded in a trace;
    by a pod created on its node, which is the trace's placement in a what-if run: a pod listed
    on its node ran there before the trace, a static pod's mirror pod is its kubelet's; of a
    plugin model).
    """
    truth = run.truth()
    columns = ("rv, commit_ts, node, change, pod, -cpu_milli AS cpu_milli, "
               "-memory_bytes AS memory_bytes, -gpu_milli AS gpu_milli, free_cpu, free_memory, "
               "free_gpu")
    if run.model not in CHECKED_COMMITS:
        return _from_sql(run, "truth_within_capacity", "SELECT * FROM truth WHERE false",
                         reported=f"SELECT {columns} FROM {truth} WHERE {ANY_OVER}",
                         order="rv", note=_why_unchecked(run))
    in_wake, placed_by_trace = _in_wake(run), CREATED_ON_NODE.format("truth")
    return _from_sql(
        run, "truth_within_capacity",
        f"SELECT {columns} FROM {truth} AS truth WHERE change = 'binding' AND ({OVER}) "
        f"AND (last_shrink_rv IS NULL OR NOT {in_wake}) AND NOT {placed_by_trace}",
        reported=f"SELECT {columns} FROM {truth} AS truth WHERE {ANY_OVER} "
                 f"AND (change <> 'binding' OR NOT ({OVER}) OR {in_wake} "
                 f"OR {placed_by_trace})",
        order="rv", note="over-commitment after an allocatable decrease, or by a pod created "
                         "on its node (listed, or a mirror pod), is reported")


def truth_within_pod_limit(run: RunTables) -> Finding:
    """At every rv, no node holds more pods than its allocatable ``pods`` (the events'
    ``max_pods``: what the node's writes said last; none said, no limit), counting every pod
    bound there (binding committed, not yet failed, succeeded or deleted), with requests or
    without: kube-scheduler's and Gödel's filters, and a kubelet's admission, count pods.

    Judged as ``truth_within_capacity`` judges requests: failed, for a model whose commits are
    checked (``CHECKED_COMMITS``), when a binding takes a node past its limit, unless the
    node's latest lower limit was still on its way to a scheduler or binder when the binding
    was checked, or the pod was created on its node (the trace's placement); reported
    otherwise.  Not applicable to a run in which no node says its limit."""
    limits = run.pod_limits
    if limits is None:
        return _not_applicable("truth_within_pod_limit",
                               "no node in the run says its pod limit (max_pods)")
    run.table("pods_held", f"""
        WITH moves AS (
            -- a pod bound there comes or goes; or the node says its limit (change 'node')
            {run.pod_moves()}
            UNION ALL
            SELECT rv, commit_ts, node, NULL, 'node', NULL, 0 FROM {limits}
        ), held AS (
            SELECT * EXCLUDE (moved), sum(moved) OVER (
                       PARTITION BY node ORDER BY rv ROWS UNBOUNDED PRECEDING) AS pods
            FROM moves
        )
        SELECT held.*, limits.max_pods, limits.last_shrink_rv
        FROM held ASOF JOIN {limits} AS limits ON held.node = limits.node AND held.rv >= limits.rv
        WHERE held.pods > limits.max_pods""")
    columns = "rv, commit_ts, node, change, pod, pods, max_pods"
    if run.model not in CHECKED_COMMITS:
        return _from_sql(run, "truth_within_pod_limit", "SELECT * FROM pods_held WHERE false",
                         reported=f"SELECT {columns} FROM pods_held", order="rv",
                         note=_why_unchecked(run))
    exempt = f"({_in_wake(run)} OR {CREATED_ON_NODE.format('truth')})"
    return _from_sql(
        run, "truth_within_pod_limit",
        f"SELECT {columns} FROM pods_held AS truth WHERE change = 'binding' AND NOT {exempt}",
        reported=f"SELECT {columns} FROM pods_held AS truth "
                 f"WHERE change <> 'binding' OR {exempt}",
        order="rv", note="past the limit after it was lowered, or by a pod created on its node "
                         "(listed, or a mirror pod), is reported")


def _in_wake(run: RunTables) -> str:
    """SQL: the ``truth`` row's node's latest decrease (``truth.last_shrink_rv``: of its
    allocatable, or of its pod limit) was still on its way to a scheduler or binder (a watcher of
    every node) when the row's binding was checked."""
    return f"""EXISTS (
        SELECT 1 FROM deliveries
        JOIN {run.watch()} AS watch ON watch.watcher = deliveries.watcher
        WHERE deliveries.rv = truth.last_shrink_rv AND watch.only_node IS NULL
          AND watch.resource = 'nodes' AND deliveries.applied_ts > {_checked_at(run)})"""


def _why_unchecked(run: RunTables) -> str:
    """Why a run's bindings past its nodes' capacity are reported, not failed."""
    return ("recorded in the trace" if run.recorded else
            "the kube model's API server accepts any binding" if run.model == "kube" else
            f"the {run.model} model is not known to check its commits")


def _checked_at(run: RunTables) -> str:
    """SQL for when the binding of the ``truth`` row was checked (``truth_within_capacity``)."""
    if run.model not in CHECKED_AT_REQUEST:
        return "truth.commit_ts"
    request_us = run.param_us("commit_ms")
    return f"""(truth.commit_ts - to_microseconds({request_us} + coalesce((
        SELECT round(throttled_ms * 1000)::BIGINT FROM attempts
        WHERE attempts.attempt_id = truth.attempt_id), 0)))"""


def kubelet_admission(run: RunTables) -> Finding:
    """No pod that a kubelet admits pushes its node over allocatable in the kubelet's own view at
    admission: the pods it admitted before (from its watch stream, in rv order), less those whose
    delete it has applied.

    A kubelet admits a pod when it applies its binding, unless it fails it (a status patch by the
    kubelet: the ``kube`` model's ``OutOfcpu``) or the pod was deleted by then.  Its allocatable
    is the node's as the kubelet knows it: at the binding's commit or at admission, whichever is
    larger (the kubelet reports its own allocatable), and after a delete of its node object the
    one it had (it admits against its own node when the API server has none: ``getNodeAnyWay``,
    ``pkg/kubelet/kubelet_getters.go``).  Where the nodes say their pod limit, the pods it
    admitted are counted against it too (``_admitted_past_pod_limit``: the ``OutOfpods`` of
    ``GeneralPredicates``).  A pod created on its node (listed there at the trace's start, or a
    mirror pod) is the kubelet's own: it counts it, and its admission is not judged.  Failed
    for a model whose kubelets decide admission (``ADMITTING``); reported for
    the other what-if models, whose kubelets admit every pod (``truth_within_capacity`` judges
    their placements).  Observe runs model no admission.
    """
    if run.recorded:
        return _not_applicable("kubelet_admission",
                               "observe keeps the recorded cluster's decisions: "
                               "truth_within_capacity reports what it over-committed")
    truth, watch, claims = run.truth(), run.watch(), run.claims()
    run.table("kubelets", f"""
        SELECT DISTINCT watcher, only_node AS node FROM {watch}
        WHERE only_node IS NOT NULL AND resource = 'pods'""")
    run.table("admissions", f"""
        WITH releases AS (
            -- each binding with the write that gave its node back (a delete, or a status write
            -- that failed the pod), if any
            SELECT taken.rv AS bind_rv, min(given.rv) AS delete_rv,
                   arg_min(given.commit_ts, given.rv) AS deleted_ts
            FROM {claims} AS taken
            LEFT JOIN {claims} AS given
              ON given.pod = taken.pod AND given.life = taken.life AND NOT given.takes
             AND given.rv > taken.rv AND given.counts_assumed IS DISTINCT FROM true
            WHERE taken.change = 'binding' AND taken.takes
            GROUP BY taken.rv
        ), bindings AS (
            -- every pod's, with requests or without (the pod count is judged too)
            SELECT taken.rv, taken.node, taken.pod, kubelets.watcher, releases.delete_rv,
                   releases.deleted_ts, releases.bind_rv
            FROM {claims} AS taken
            JOIN kubelets USING (node)
            JOIN releases ON releases.bind_rv = taken.rv
            WHERE taken.change = 'binding' AND taken.takes
              AND taken.counts_assumed IS DISTINCT FROM true
        ), failed AS (
            SELECT DISTINCT bindings.rv, bindings.watcher
            FROM bindings
            JOIN events
              ON events.resource = 'pods' AND events.subresource = 'status'
             AND events.component = 'kubelet' AND events.origin = 'model'
             AND concat_ws('/', events.namespace, events.name) = bindings.pod
             AND events.rv > bindings.rv AND events.rv < coalesce(bindings.delete_rv, 9e18)
        )
        SELECT bindings.rv, bindings.watcher, bindings.delete_rv, deliveries.applied_ts,
               failed.rv IS NULL
               AND deliveries.applied_ts IS NOT NULL
               AND (bindings.deleted_ts IS NULL OR bindings.deleted_ts > deliveries.applied_ts)
               AS admitted
        FROM bindings
        LEFT JOIN (
            -- (the kubelets' deliveries first: a filter DuckDB applies as it reads, where the
            -- join would hash all 27.1M of a 1M-pod what-if run's, 1.4 s against 0.9 s)
            FROM deliveries WHERE watcher IN (SELECT watcher FROM kubelets)
        ) AS deliveries ON deliveries.rv = bindings.rv AND deliveries.watcher = bindings.watcher
        LEFT JOIN failed ON failed.rv = bindings.rv AND failed.watcher = bindings.watcher""")
    run.table("kubelet_nodes", f"""
        -- each change of a node's allocatable as its kubelet counts it: the node's, but for a
        -- delete of the node object, which leaves the kubelet its own allocatable (it admits
        -- against the node it registered when the API server has none: getNodeAnyWay)
        WITH absolute AS (
            SELECT truth.rv, truth.commit_ts, truth.node,
                   sum(truth.cpu_milli) OVER by_node AS cpu,
                   sum(truth.memory_bytes) OVER by_node AS memory,
                   sum(truth.gpu_milli) OVER by_node AS gpu,
                   events.rv IS NOT NULL AS removes
            FROM {truth} AS truth
            LEFT JOIN events
              ON events.rv = truth.rv AND events.resource = 'nodes' AND events.verb = 'delete'
            WHERE truth.change = 'node'
            WINDOW by_node AS (PARTITION BY truth.node ORDER BY truth.rv)
        ), own AS (
            SELECT rv, commit_ts, node,
                   CASE WHEN removes THEN lag(cpu, 1, 0) OVER by_node ELSE cpu END AS cpu,
                   CASE WHEN removes THEN lag(memory, 1, 0) OVER by_node ELSE memory END AS memory,
                   CASE WHEN removes THEN lag(gpu, 1, 0) OVER by_node ELSE gpu END AS gpu
            FROM absolute
            WINDOW by_node AS (PARTITION BY node ORDER BY rv)
        )
        SELECT rv, commit_ts, node, cpu - lag(cpu, 1, 0) OVER by_node AS cpu_milli,
               memory - lag(memory, 1, 0) OVER by_node AS memory_bytes,
               gpu - lag(gpu, 1, 0) OVER by_node AS gpu_milli
        FROM own
        WINDOW by_node AS (PARTITION BY node ORDER BY rv)""")
    run.table("kubelet_view", f"""
        WITH changes AS (
            SELECT kubelets.watcher, truth.rv, truth.commit_ts, truth.node, truth.change,
                   truth.pod, coalesce(own.cpu_milli, truth.cpu_milli) AS cpu_milli,
                   coalesce(own.memory_bytes, truth.memory_bytes) AS memory_bytes,
                   coalesce(own.gpu_milli, truth.gpu_milli) AS gpu_milli,
                   CASE WHEN truth.change = 'node' THEN true
                        WHEN truth.change = 'binding' THEN coalesce(admitted.admitted, false)
                        ELSE coalesce(removed.admitted, false) END AS counts
            FROM {truth} AS truth
            JOIN kubelets USING (node)
            LEFT JOIN kubelet_nodes AS own ON own.rv = truth.rv
            LEFT JOIN admissions AS admitted
              ON admitted.rv = truth.rv AND admitted.watcher = kubelets.watcher
            LEFT JOIN admissions AS removed
              ON removed.delete_rv = truth.rv AND removed.watcher = kubelets.watcher
             AND truth.change IN ('delete', 'failed', 'succeeded')
        )
        SELECT watcher, rv, commit_ts, node, change, pod, cpu_milli, memory_bytes, gpu_milli,
               (sum(cpu_milli) OVER by_view)::BIGINT AS free_cpu,
               (sum(memory_bytes) OVER by_view)::BIGINT AS free_memory,
               (sum(gpu_milli) OVER by_view)::BIGINT AS free_gpu
        FROM changes
        WHERE counts
        WINDOW by_view AS (PARTITION BY watcher ORDER BY rv ROWS UNBOUNDED PRECEDING)""")
    offending = f"""
        WITH over AS (
            SELECT view.*, admissions.applied_ts AS admitted_ts
            FROM kubelet_view AS view
            JOIN admissions USING (watcher, rv)
            WHERE view.change = 'binding' AND ({OVER}) AND NOT {CREATED_ON_NODE.format('view')}
        ), grown AS (
            -- how much more allocatable the node had at admission than at the binding
            SELECT over.watcher, over.rv,
                   sum(CASE WHEN t.rv > over.rv THEN t.cpu_milli ELSE 0 END) AS cpu,
                   sum(CASE WHEN t.rv > over.rv THEN t.memory_bytes ELSE 0 END) AS memory,
                   sum(CASE WHEN t.rv > over.rv THEN t.gpu_milli ELSE 0 END) AS gpu
            FROM over
            LEFT JOIN kubelet_nodes AS t
              ON t.node = over.node AND t.rv > over.rv AND t.commit_ts <= over.admitted_ts
            GROUP BY ALL
        )
        SELECT over.watcher, over.rv, over.pod, over.node, over.admitted_ts,
               over.free_cpu, over.free_memory, over.free_gpu
        FROM over JOIN grown USING (watcher, rv)
        WHERE (over.free_cpu + greatest(coalesce(grown.cpu, 0), 0) < 0 AND over.cpu_milli < 0)
           OR (over.free_memory + greatest(coalesce(grown.memory, 0), 0) < 0
               AND over.memory_bytes < 0)
           OR (over.free_gpu + greatest(coalesce(grown.gpu, 0), 0) < 0 AND over.gpu_milli < 0)"""
    if run.pod_limits is not None:
        offending = f"""
            SELECT watcher, rv, pod, node, admitted_ts, free_cpu, free_memory, free_gpu,
                   NULL::BIGINT AS pods, NULL::BIGINT AS max_pods
            FROM ({offending})
            UNION ALL
            FROM ({_admitted_past_pod_limit(run, run.pod_limits)})"""
    if run.model in ADMITTING:
        return _from_sql(run, "kubelet_admission", offending, order="rv, watcher")
    return _from_sql(run, "kubelet_admission", "SELECT 1 WHERE false", reported=offending,
                     order="rv, watcher",
                     note=f"the {run.model} model's kubelets admit every pod they are sent")


def _admitted_past_pod_limit(run: RunTables, limits: str) -> str:
    """SQL: the pods a kubelet admitted past its node's pod limit (``kubelet_admission``'s
    columns), counting in its view every pod whose binding it admitted, with requests or
    without, less those whose delete or failure it applied (``RunTables.pod_moves``, in rv
    order: one watch stream); the limit the larger of the node's at the binding and at
    admission.  A pod created on its node is counted and not judged."""
    return f"""
        WITH counted AS (
            SELECT kubelets.watcher, moves.rv, moves.node, moves.pod, moves.change, moves.moved
            FROM ({run.pod_moves()}) AS moves
            JOIN kubelets USING (node)
            LEFT JOIN admissions AS admitted
              ON moves.moved = 1 AND admitted.rv = moves.rv
             AND admitted.watcher = kubelets.watcher
            LEFT JOIN admissions AS removed
              ON moves.moved = -1 AND removed.delete_rv = moves.rv
             AND removed.watcher = kubelets.watcher
            WHERE coalesce(admitted.admitted, removed.admitted, false)
        ), held AS (
            SELECT *, sum(moved) OVER (
                       PARTITION BY watcher ORDER BY rv ROWS UNBOUNDED PRECEDING) AS pods
            FROM counted
        ), over AS (
            SELECT held.*, admissions.applied_ts AS admitted_ts
            FROM held JOIN admissions USING (watcher, rv)
            WHERE held.change = 'binding' AND NOT {CREATED_ON_NODE.format('held')}
        )
        SELECT over.watcher, over.rv, over.pod, over.node, over.admitted_ts, NULL::BIGINT,
               NULL::BIGINT, NULL::BIGINT, over.pods,
               greatest(at_binding.max_pods, at_admission.max_pods)
        FROM over
        ASOF JOIN {limits} AS at_binding
          ON at_binding.node = over.node AND over.rv >= at_binding.rv
        ASOF JOIN {limits} AS at_admission
          ON at_admission.node = over.node AND over.admitted_ts >= at_admission.commit_ts
        WHERE over.pods > greatest(at_binding.max_pods, at_admission.max_pods)"""


# -- bindings and attempts -------------------------------------------------------------------------

def one_binding_per_incarnation(run: RunTables) -> Finding:
    """A pod incarnation has at most one committed binding (a create that names its node, as a
    mirror pod's does, counts as one), never after its delete; the pods table's bound_rv,
    bound_ts and node are that binding's, its deleted_rv and deleted_ts the incarnation's last
    delete."""
    lives, pods = run.lives(), run.pod_writes()
    return _from_sql(run, "one_binding_per_incarnation", f"""
        SELECT pod, life AS incarnation, bind_rv AS rv, 'bound ' || bindings || ' times' AS problem
        FROM {lives} WHERE bindings > 1
        UNION ALL
        SELECT pod, life, bind_rv, 'bound after its delete (rv ' || first_delete_rv || ')'
        FROM {lives} WHERE bind_rv > first_delete_rv
        UNION ALL
        SELECT lives.pod, lives.life, lives.bind_rv, 'pods has no row with this bound_rv'
        FROM {lives} AS lives
        LEFT JOIN pods ON pods.bound_rv = lives.bind_rv
        WHERE lives.bind_rv IS NOT NULL AND pods.pod IS DISTINCT FROM lives.pod
        UNION ALL
        SELECT pods.pod, writes.life, pods.bound_rv,
               CASE WHEN writes.rv IS NULL OR NOT writes.binds OR writes.pod <> pods.pod
                    THEN 'bound_rv is not a binding of this pod'
                    WHEN writes.rv <> lives.bind_rv THEN 'bound_rv is not the first binding'
                    WHEN pods.node IS DISTINCT FROM lives.bind_node THEN 'node is not the binding''s'
                    WHEN pods.bound_ts IS DISTINCT FROM lives.bound_ts
                    THEN 'bound_ts is not the binding''s'
                    WHEN pods.deleted_rv IS DISTINCT FROM lives.delete_rv
                    THEN 'deleted_rv is not the last delete'
                    ELSE 'deleted_ts is not the last delete''s' END
        FROM pods
        LEFT JOIN {pods} AS writes ON writes.rv = pods.bound_rv
        LEFT JOIN {lives} AS lives ON lives.pod_id = writes.pod_id AND lives.life = writes.life
        WHERE pods.bound_rv IS NOT NULL
          AND (writes.rv IS NULL OR NOT writes.binds OR writes.pod <> pods.pod
               OR writes.rv <> lives.bind_rv
               OR pods.node IS DISTINCT FROM lives.bind_node
               OR pods.bound_ts IS DISTINCT FROM lives.bound_ts
               OR pods.deleted_rv IS DISTINCT FROM lives.delete_rv
               OR pods.deleted_ts IS DISTINCT FROM lives.deleted_ts)""", order="rv, pod")


def attempt_times_ordered(run: RunTables) -> Finding:
    """enqueued_ts <= started_ts <= decided_ts <= committed_ts, and forgotten_ts, if any, not
    before decided_ts.  In observe runs started_ts is not recorded, enqueued_ts is unknown for a
    pod created before the trace began, and an attempt decided before the modelled enqueue is
    reported (the delay model is slower than the recorded cluster)."""
    columns = ("attempt_id, pod, scheduler, outcome, enqueued_ts, started_ts, decided_ts, "
               "committed_ts, forgotten_ts")
    committed_may_be_null = "(committed_ts IS NULL AND outcome = 'error')"
    if run.recorded:
        return _from_sql(run, "attempt_times_ordered", f"""
            SELECT {columns} FROM attempts
            WHERE decided_ts IS NULL OR committed_ts IS NULL
               OR decided_ts > committed_ts OR forgotten_ts < decided_ts""",
                         reported=f"SELECT {columns} FROM attempts WHERE enqueued_ts > decided_ts",
                         order="attempt_id",
                         note="observe: attempts decided before their modelled enqueue")
    return _from_sql(run, "attempt_times_ordered", f"""
        SELECT {columns} FROM attempts
        WHERE enqueued_ts IS NULL OR started_ts IS NULL OR decided_ts IS NULL
           OR (committed_ts IS NULL AND NOT {committed_may_be_null})
           OR NOT (enqueued_ts <= started_ts AND started_ts <= decided_ts)
           OR committed_ts < decided_ts OR forgotten_ts < decided_ts""", order="attempt_id")


def view_lag_matches_deliveries(run: RunTables) -> Finding:
    """Each attempt's ``view_lag_ms`` is the age of the oldest write sent to its scheduler and
    not yet applied when the scheduler read its view (``started_ts``; ``decided_ts`` in observe
    runs), computed again from the scheduler's deliveries (``view_lag_us``: the first delivery in
    rv order applied after that time); reported for a model not in ``MEASURED_VIEW_LAG``.  A
    what-if view keeps its own account of what it has been sent and not applied; a write its
    client queue holds (``delta_fifo``, ``workqueue``) counts from when it was sent, not from
    when it is handled."""
    at = "decided_ts" if run.recorded else "started_ts"
    attempts = run.sql(f"""
        SELECT attempt_id, scheduler, epoch_us({at}) AS at, view_lag_ms FROM attempts
        WHERE view_lag_ms IS NOT NULL AND {at} IS NOT NULL ORDER BY attempt_id""").fetchnumpy()
    d = run.deliveries
    commit, applied = d.times["commit_ts"], d.times["applied_ts"]
    scheduler, lag = attempts["scheduler"], attempts["view_lag_ms"]
    expected = np.full(len(lag), np.nan)
    for name in sorted(set(scheduler.tolist())):
        mine = scheduler == name
        if name in d.names:
            lo, hi = np.searchsorted(d.watcher, [d.names.index(name), d.names.index(name) + 1])
            expected[mine] = view_lag_us(commit[lo:hi], applied[lo:hi], attempts["at"][mine]) / 1e3
    wrong = np.flatnonzero(~(expected == lag))
    examples = [{"attempt_id": int(attempts["attempt_id"][i]), "scheduler": str(scheduler[i]),
                 at: iso(int(attempts["at"][i])), "view_lag_ms": float(lag[i]),
                 "from_deliveries_ms": float(expected[i])} for i in wrong[:EXAMPLES]]
    if run.model not in MEASURED_VIEW_LAG:
        return _finding("view_lag_matches_deliveries", 0, [], reported=len(wrong),
                        reported_examples=examples,
                        note=f"{run.model}: the model sets its attempts' view lag itself")
    return _finding("view_lag_matches_deliveries", len(wrong), examples)


def attempt_outcome_documented(run: RunTables) -> Finding:
    """Every attempt's outcome is one of the documented values (docs/run-directory.md)."""
    documented = ", ".join(f"'{outcome}'" for outcome in OUTCOMES)
    return _from_sql(run, "attempt_outcome_documented", f"""
        SELECT attempt_id, pod, scheduler, outcome, reason FROM attempts
        WHERE outcome IS NULL OR outcome NOT IN ({documented})""", order="attempt_id")


def attempt_writes_match_outcome(run: RunTables) -> Finding:
    """A ``bound`` attempt has exactly one committed binding with its attempt_id, of its pod, on
    its node; any other attempt has none, except a kubelet's admission failure (a ``conflict``
    whose reason is ``kubelet_admission``: bound, then failed by the node's kubelet).  Every
    binding that names an attempt names one of its own pod."""
    return _from_sql(run, "attempt_writes_match_outcome", """
        WITH bindings AS (
            SELECT attempt_id, count(*) AS bindings, arg_min(node, rv) AS node,
                   arg_min(concat_ws('/', namespace, name), rv) AS pod, min(rv) AS rv
            FROM events
            WHERE resource = 'pods' AND verb = 'create' AND subresource = 'binding'
              AND attempt_id IS NOT NULL
            GROUP BY attempt_id
        )
        SELECT attempts.attempt_id, coalesce(attempts.pod, bindings.pod) AS pod,
               attempts.outcome, attempts.reason, attempts.node, bindings.node AS bound_node,
               coalesce(bindings.bindings, 0) AS bindings
        FROM attempts FULL JOIN bindings USING (attempt_id)
        WHERE CASE WHEN attempts.attempt_id IS NULL THEN true
                   WHEN attempts.outcome = 'bound'
                        OR (attempts.outcome = 'conflict' AND attempts.reason = 'kubelet_admission')
                   THEN coalesce(bindings.bindings, 0) <> 1
                        OR bindings.node IS DISTINCT FROM attempts.node
                        OR bindings.pod <> attempts.pod
                   ELSE bindings.bindings IS NOT NULL END""", order="attempt_id")


def every_pod_accounted(run: RunTables) -> Finding:
    """At the end of a what-if run every pod is bound, deleted, or pending with a last attempt
    that says why: ``unschedulable``, or a ``conflict`` whose retry (after at most
    ``backoff_max_ms``) was not yet due when the run ended.  (A pod listed pending at the
    trace's start is the model's to schedule too.)"""
    if run.recorded:
        return _not_applicable("every_pod_accounted", "observe: the trace decides every pod")
    backoff_us = run.param_us("backoff_max_ms")
    return _from_sql(run, "every_pod_accounted", f"""
        WITH pending AS (
            SELECT pod, created_ts FROM pods WHERE bound_rv IS NULL AND deleted_rv IS NULL
        ), last AS (
            SELECT pending.pod, pending.created_ts,
                   max(attempts.attempt_id) AS last_attempt,
                   arg_max(attempts.outcome, attempts.attempt_id) AS outcome,
                   arg_max(attempts.reason, attempts.attempt_id) AS reason,
                   arg_max(attempts.committed_ts, attempts.attempt_id) AS committed_ts
            FROM pending
            LEFT JOIN attempts
              ON attempts.pod = pending.pod
             -- (a pod listed pending at the trace's start has no created_ts: its name's first)
             AND attempts.enqueued_ts >= coalesce(pending.created_ts, '-infinity'::TIMESTAMPTZ)
            GROUP BY ALL
        )
        SELECT pod, created_ts, last_attempt, outcome, reason, committed_ts
        FROM last
        WHERE NOT coalesce(outcome = 'unschedulable'
                           OR (outcome = 'conflict' AND committed_ts + to_microseconds({backoff_us})
                               > (SELECT end_ts FROM run_bounds)), false)""",
                     order="created_ts, pod")


# -- views ---------------------------------------------------------------------------------------

def views_converge(run: RunTables) -> Finding:
    """Once a watcher has applied its last delivery its view of every node equals the truth: no
    capacity window is still open when the run ends (open_at_end: a write it never received, or
    an assumption it never forgot)."""
    return _from_sql(run, "views_converge", """
        SELECT watcher, node, resource, kind, start_ts, end_ts, gap_max
        FROM capacity_windows WHERE open_at_end""", order="watcher, node, resource, start_ts")


def zero_delay_zero_windows(run: RunTables) -> Finding:
    """With every stage free (profile ``zero``, no stage overridden) and the ``oracle`` model,
    no view ever differs from the truth, and every conflict is a node whose allocatable shrank
    (or that went away) between the attempt's start and its commit."""
    if run.model != "oracle" or not _zero_delay(run.manifest.get("config", {})):
        return _not_applicable("zero_delay_zero_windows",
                               "applies to the oracle model with every stage free")
    return _from_sql(run, "zero_delay_zero_windows", f"""
        SELECT 'window' AS what, watcher AS who, node, start_ts AS since, kind AS detail
        FROM capacity_windows
        UNION ALL
        SELECT 'conflict', scheduler, node, decided_ts, reason
        FROM attempts
        WHERE outcome = 'conflict' AND NOT EXISTS (
            SELECT 1 FROM {run.truth()} AS truth
            WHERE truth.node = attempts.node AND truth.change = 'node'
              AND least(truth.cpu_milli, truth.memory_bytes, truth.gpu_milli) < 0
              AND truth.commit_ts >= attempts.started_ts
              AND truth.commit_ts <= attempts.committed_ts)""", order="since, who")


def _zero_delay(described: dict) -> bool:
    """Whether every stage of the recorded configuration costs nothing, for every watcher and
    resource."""
    config = from_description(described)
    layers = [config.stages, *(w.stages for w in config.watchers or ()),
              *(r.stages for r in config.resources.values())]
    return all(d.is_zero for stages in layers for params in stages.values()
               for d in params.values())


def deterministic(run: RunTables) -> Finding:
    return _not_applicable("deterministic", "`replay check --rerun` replays the trace again to "
                                            "compare")


def compare_runs(original: str | Path, again: str | Path) -> Finding:
    """``deterministic``: the same trace, config and seed gave byte-identical tables (and
    manifest) in ``again``."""
    original, again = Path(original), Path(again)
    names = sorted({p.name for p in original.iterdir()} | {p.name for p in again.iterdir()})
    differing = [{"file": name} for name in names
                 if not ((original / name).is_file() and (again / name).is_file()
                         and (original / name).read_bytes() == (again / name).read_bytes())]
    return _finding("deterministic", len(differing), differing)


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("table_integrity", "every table is the one the run wrote (manifest.json's sizes "
              "and SHA-256)", table_integrity, reads=Reads.FILES),
    Invariant("rv_in_commit_order", "writes are numbered 1, 2, ... in commit order",
              rv_in_commit_order, reads=Reads.ARRAYS),
    Invariant("stage_times_ordered", "commit <= cached <= dispatched <= sent <= received <= "
              "dequeued <= applied in every delivery", stage_times_ordered,
              reads=Reads.DELIVERIES),
    Invariant("delivery_matches_event", "each delivery is of a committed write, with its commit "
              "time, and one write's shared stages are shared", delivery_matches_event,
              reads=Reads.DELIVERIES),
    Invariant("exactly_once", "every write reaches exactly the watchers whose filter matches it, "
              "once each", exactly_once, reads=Reads.ARRAYS),
    Invariant("stream_order", "per watcher and resource, sent, received and applied never "
              "decrease in rv order", stream_order, reads=Reads.DELIVERIES),
    Invariant("coalesced_shares_handling", "a coalesced delivery shares the handling of its "
              "object's queued item (workqueue, delta_fifo only)", coalesced_shares_handling,
              reads=Reads.DELIVERIES),
    Invariant("missed_writes_recovered", "a write a terminated watch missed comes by its "
              "re-watch or re-list, never on the closed stream", missed_writes_recovered,
              reads=Reads.ARRAYS),
    Invariant("shared_queues_fifo", "cached_ts and dispatched_ts never decrease in rv order",
              shared_queues_fifo, reads=Reads.DELIVERIES),
    Invariant("truth_within_capacity", "no binding pushes a node over its allocatable",
              truth_within_capacity),
    Invariant("truth_within_pod_limit", "no binding takes a node past its allocatable pods "
              "(max_pods)", truth_within_pod_limit),
    Invariant("kubelet_admission", "no pod a kubelet admits pushes its node over allocatable, or "
              "past its pod limit, in the kubelet's view", kubelet_admission),
    Invariant("one_binding_per_incarnation", "at most one binding per pod incarnation, never "
              "after its delete, and pods agrees with it", one_binding_per_incarnation,
              reads=Reads.ARRAYS),
    Invariant("attempt_times_ordered", "enqueued <= started <= decided <= committed, forgotten "
              "after decided", attempt_times_ordered),
    Invariant("view_lag_matches_deliveries", "each attempt's view lag is the age of the oldest "
              "write its scheduler had been sent and not yet applied", view_lag_matches_deliveries,
              reads=Reads.ARRAYS),
    Invariant("attempt_outcome_documented", "outcomes are bound, conflict, unschedulable or error",
              attempt_outcome_documented),
    Invariant("attempt_writes_match_outcome", "a bound attempt wrote exactly one binding on its "
              "node; a failed one none", attempt_writes_match_outcome),
    Invariant("every_pod_accounted", "at the end every pod is bound, deleted, or pending for a "
              "reason", every_pod_accounted),
    Invariant("views_converge", "no capacity window is still open when the run ends",
              views_converge),
    Invariant("zero_delay_zero_windows", "oracle with every stage free: no windows, no "
              "conflicts but shrinking nodes", zero_delay_zero_windows),
    Invariant("deterministic", "the same trace, config and seed give byte-identical tables",
              deterministic),
)
