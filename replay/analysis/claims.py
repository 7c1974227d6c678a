"""The claims of ``queries/views.sql`` (a pod taking and giving back its requests on a node) in
numpy, for ``replay derive``: the capacity windows' ``every_change`` step is ``capacity_changes``,
whose pods' part (``claims``) DuckDB computes with window functions over every pod write
partitioned by the pod's name: a third of the derivation's CPU at 1M pods (19 s of the what-if
run's).  Here the pod writes are sorted once by pod and rv; each pod life's requests are read
at its first write, and one compiled pass over the lives (``_life_moves``) finds each life's
first binding and last delete, and each step's previous node as each kind of cache sees it.

views.sql stays the definition: this makes the temporary table ``every_change`` with the rows
of ``FROM capacity_changes`` (in another order; the SQL's later steps order what they read),
typed as the view types them, and the tests keep the stored table identical to the query run
whole.  A connection of several runs, or a name or namespace with a '/' (``_pod_writes``), is
left to the SQL (``capacity_changes`` returns False).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from replay.analysis.counting import counting_order, key_order
from replay.analysis.runs import one_run
from replay.jit import njit
from replay.trace.schema import RESOURCE_COLUMNS

# a step's change, by its code; the last two set a terminal phase
STEPS = ("binding", "delete", "assumed", "rejected", "failed", "succeeded")
BINDING, DELETE, ASSUMED, REJECTED, FAILED, SUCCEEDED = range(len(STEPS))
COUNTS_BOUND, COUNTS_ASSUMED, BOTH = range(3)  # which caches see a move: counts_assumed
MOST_MOVES = 3  # that one write makes: two releases (one per kind of cache) and a take


def capacity_changes(con: duckdb.DuckDBPyConnection) -> bool:
    """Make the temporary table ``every_change`` from ``capacity_changes``' definition, the
    claims computed here; False (nothing made) where the SQL must compute them."""
    return _temporary_table(con, _claims, """
        CREATE TEMPORARY TABLE every_change AS
        SELECT (SELECT run FROM manifests) AS run, rv, commit_ts, node, cpu_milli,
               memory_bytes, gpu_milli, attempt_id, pod, change, counts_assumed
        FROM _claims
        UNION ALL
        FROM node_capacity_changes""")


def claims_table(con: duckdb.DuckDBPyConnection) -> bool:
    """Make the temporary table ``claims`` with the rows of views.sql's ``claims`` (in another
    order), which hides the view from then on (``capacity_changes`` reads it too), for
    ``replay check``: it reads the claims where ``capacity_changes`` does not, the releases
    and takes of pods that request nothing (a node's pod limit counts them), unsigned, with
    ``takes`` and each pod's ``life``.  False (nothing made) where the SQL must compute them, as
    for ``capacity_changes``."""
    return _temporary_table(con, _claim_rows, """
        CREATE TEMPORARY TABLE claims AS
        SELECT (SELECT run FROM manifests) AS run, rv, commit_ts, pod, life, node, takes,
               cpu_milli, memory_bytes, gpu_milli, attempt_id, change, counts_assumed
        FROM _claims""")


def _temporary_table(con: duckdb.DuckDBPyConnection, rows: Callable[[PodWrites], pa.Table],
                     create: str) -> bool:
    """Run ``create``, which reads ``rows`` of the run's sorted pod writes as ``_claims``;
    False (nothing made) for a connection of several runs, or a name or namespace with a '/'
    (``_pod_writes``), which the SQL must compute."""
    if not one_run(con):
        return False
    writes = _pod_writes(con)
    if writes is None:
        return False
    con.register("_claims", rows(writes))
    try:
        con.execute(create)
    finally:
        con.unregister("_claims")
    return True


@dataclass(frozen=True)
class PodWrites:
    """The pod writes that ``claims`` reads (``pod_writes``), sorted by pod and rv: the columns
    ``_claims`` reads at every write, with the pods and nodes as codes into ``pods`` and
    ``nodes`` (a write without a node has -1)."""

    pod: np.ndarray
    node: np.ndarray
    rv: np.ndarray
    creates: np.ndarray
    binds: np.ndarray
    deletes: np.ndarray
    state: np.ndarray
    pods: pa.Array
    nodes: pa.Array
    few: pa.Table  # the columns read at a few writes only, unsorted (``at``)
    order: np.ndarray  # the sorted writes' rows in ``few``

    def at(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Column ``name`` of ``few`` at the sorted writes ``rows`` (nulls as 0), and where it
        is null there: the requests are read at each life's first write and the commit and
        attempt at each claim, so they are gathered there, not sorted whole."""
        values = self.few.column(name).take(pa.array(self.order[rows]))
        return (values.fill_null(0).to_numpy(),
                values.is_null().to_numpy(zero_copy_only=False))


def _pod_writes(con: duckdb.DuckDBPyConnection) -> PodWrites | None:
    """The pod writes that ``claims`` reads, sorted.  None if a namespace or a name holds a '/'
    (Kubernetes allows none): a life is counted per namespace and name, a pod is their text,
    and ``a/b`` of namespace ``x`` and ``b`` of ``x/a`` would make one pod, ``x/a/b``; without a
    '/' the text has one namespace and name."""
    table = con.sql(f"""
        SELECT rv, epoch_us(commit_ts) AS commit_us, concat_ws('/', namespace, name) AS pod,
               coalesce(contains(namespace, '/') OR contains(name, '/'), false) AS slashed,
               coalesce(verb = 'create' AND subresource IS NULL, false) AS creates,
               coalesce(verb = 'create' AND (subresource = 'binding'
                                             OR (subresource IS NULL AND node IS NOT NULL)),
                        false) AS binds,
               coalesce(verb = 'delete' AND subresource IS NULL, false) AS deletes,
               CASE pod_state WHEN 'assumed' THEN {ASSUMED} WHEN 'dispatched' THEN {REJECTED}
                              WHEN 'failed' THEN {FAILED} WHEN 'succeeded' THEN {SUCCEEDED}
                              ELSE -1 END AS state,
               node, attempt_id, cpu_milli, memory_bytes, gpu_milli
        FROM events
        WHERE resource = 'pods' AND name <> ''""").arrow()
    table = table.read_all() if hasattr(table, "read_all") else table
    if pc.any(table.column("slashed")).as_py():
        return None
    pods = pc.dictionary_encode(table.column("pod")).combine_chunks()
    nodes = pc.dictionary_encode(table.column("node")).combine_chunks()
    pod = pods.indices.to_numpy()
    rv = table.column("rv").to_numpy()
    order = pod_order(pod, rv, len(pods.dictionary))

    def sorted_column(name: str) -> np.ndarray:
        return table.column(name).to_numpy()[order]

    return PodWrites(
        pod=pod[order], node=nodes.indices.fill_null(-1).to_numpy()[order], rv=rv[order],
        creates=sorted_column("creates"), binds=sorted_column("binds"),
        deletes=sorted_column("deletes"), state=sorted_column("state"),
        pods=pods.dictionary, nodes=nodes.dictionary,
        few=table.select(["commit_us", "attempt_id", "cpu_milli", "memory_bytes", "gpu_milli"]),
        order=order)


def pod_order(pod: np.ndarray, rv: np.ndarray, pods: int) -> np.ndarray:
    """``np.lexsort((rv, pod))`` for pod codes in ``[0, pods)``, as two stable sorts, each fast
    on these writes: by rv (DuckDB hands them over in rv order but for a few batches, which
    timsort merges as runs), then by pod, counted (``counting_order``): 0.1 s instead of
    0.25-0.45 for the 5M pod writes of a 1M-pod run."""
    by_rv = np.argsort(rv, kind="stable")
    return by_rv[counting_order(pod[by_rv], pods)]


def _claim_rows(w: PodWrites) -> pa.Table:
    """``claims``' rows of every life (its moves whatever it requests), unsigned, with
    ``takes`` and each pod's ``life``."""
    lives = _Lives.of(w)
    moves = _Moves.of(w, lives, np.ones(len(lives.starts), dtype=bool))
    return pa.table({
        **moves.columns(w),
        "pod": w.pods.take(pa.array(w.pod[moves.rows])),
        "life": lives.numbers[moves.life], "takes": moves.takes,
        **{name: lives.requests[name][moves.life] for name in RESOURCE_COLUMNS}})


def _claims(w: PodWrites) -> pa.Table:
    """``claims``' rows from the sorted pod writes, ordered by rv, then node, takes and
    ``counts_assumed``, as ``capacity_changes`` has them: each life's requests here (its moves
    only if it requests anything), signed (a take's negative), its moves by ``_life_moves``."""
    lives = _Lives.of(w)
    claims = np.logical_or.reduce([lives.requests[name] != 0 for name in RESOURCE_COLUMNS])
    moves = _Moves.of(w, lives, claims)
    sign = np.where(moves.takes, -1, 1)
    return pa.table({
        **moves.columns(w),
        **{name: sign * lives.requests[name][moves.life] for name in RESOURCE_COLUMNS},
        "pod": w.pods.take(pa.array(w.pod[moves.rows]))})


@dataclass(frozen=True)
class _Lives:
    """The lives of the sorted pod writes (a new one at each create; life 0 of a pod, its
    writes before its first create, has none): where each begins among the writes, its number
    as the SQL counts it (``life``: the pod's creates up to it), its requests (from its create,
    0 without one)."""

    starts: np.ndarray
    numbers: np.ndarray
    requests: dict[str, np.ndarray]

    @classmethod
    def of(cls, w: PodWrites) -> _Lives:
        new_pod = np.ones(len(w.rv), dtype=bool)
        new_pod[1:] = w.pod[1:] != w.pod[:-1]
        starts = np.flatnonzero(new_pod | w.creates)
        created = w.creates[starts]
        creates = np.cumsum(created)  # up to each life, of every pod
        first = np.maximum.accumulate(np.where(new_pod[starts], np.arange(len(starts)), 0))
        numbers = np.where(created, creates - creates[first] + created[first], 0)
        requests = {}
        for name in RESOURCE_COLUMNS:
            values, null = w.at(name, starts)
            requests[name] = np.where(created & ~null, values, 0)
        return cls(starts, numbers, requests)


@dataclass(frozen=True)
class _Moves:
    """The moves of the lives that ``claims`` (``_life_moves``), ordered by rv: the write of
    each (its row among the sorted writes), its node, whether it takes the node, which caches
    see it, its change (``STEPS``' code) and its life."""

    rv: np.ndarray
    rows: np.ndarray
    node: np.ndarray
    takes: np.ndarray
    kind: np.ndarray
    change: np.ndarray
    life: np.ndarray

    @classmethod
    def of(cls, w: PodWrites, lives: _Lives, claims: np.ndarray) -> _Moves:
        moves = _moves(w, lives.starts, claims)
        rv = w.rv[moves[0]]
        order = key_order(rv)
        return cls(rv[order], *(column[order] for column in moves))

    def columns(self, w: PodWrites) -> dict[str, np.ndarray | pa.Array]:
        """The moves' columns of ``claims`` that do not depend on the lives, typed as the SQL
        types them: a take's attempt (a release has none)."""
        commit_us, commit_null = w.at("commit_us", self.rows)
        attempt_id, attempt_null = w.at("attempt_id", self.rows)
        return {"rv": self.rv,
                "commit_ts": pa.array(commit_us, mask=commit_null,
                                      type=pa.timestamp("us", tz="UTC")),
                "node": w.nodes.take(pa.array(self.node)),
                "attempt_id": pa.array(attempt_id, mask=~self.takes | attempt_null),
                "change": pa.array(STEPS).take(pa.array(self.change)),
                "counts_assumed": pa.array(self.kind == COUNTS_ASSUMED, mask=self.kind == BOTH)}


def _moves(w: PodWrites, starts: np.ndarray, claims: np.ndarray) -> list[np.ndarray]:
    """``_life_moves`` of every life: the moves' writes, nodes, takes, kinds, changes and
    lives.  The arrays it fills are as long as the writes at first (the 1M-pod runs make 0.6-0.7
    moves a write); if it stops for room, it goes on in arrays as long as the rest could need."""
    moves = [np.empty(len(w.rv) + MOST_MOVES, dtype)
             for dtype in (np.int64, w.node.dtype, np.bool_, np.int8, np.int8, np.int64)]
    fill = functools.partial(_life_moves, w.rv, w.node, w.binds, w.deletes, w.state, starts,
                             claims)
    life, count = fill(0, 0, *moves)
    if life < len(starts):
        room = MOST_MOVES * (len(w.rv) - int(starts[life]))  # for every write left
        moves = [np.concatenate([column[:count], np.empty(room, column.dtype)])
                 for column in moves]
        life, count = fill(life, count, *moves)
    return [column[:count] for column in moves]


@njit(cache=True, nogil=True)
def _life_moves(rv, node, binds, deletes, state, starts, claims, life, count,
                rows, nodes, takes, kinds, changes, lives):  # pragma: no cover - compiled
    """``steps``, ``counted`` and ``moves`` of the SQL, life by life from ``life`` (``starts``;
    a life whose requests are all 0, ``~claims``, moves nothing): each step's node held before
    it by each kind of cache, a release of it and a take of the new one where they differ,
    and a move both kinds see once (``BOTH``, the SQL's GROUP BY ALL).  The moves go from
    ``count`` on into the arrays (the write, node, takes, kind, change as ``STEPS``' code, life),
    a write's in node order, until a life might not fit; returns the next life and count.

    One pass over the pod writes: numpy's passes over the whole arrays, and a sort of every
    move by rv, node, takes and kind to find those both kinds see, took 0.9 s of the 1M-pod
    observe run's 3M pod writes on one core; this takes 0.04 s.  It does not grow the arrays
    itself: a loop that may replace the arrays it writes keeps reloading them, four times
    slower."""
    while life < len(starts):
        start = starts[life]
        end = starts[life + 1] if life + 1 < len(starts) else len(rv)
        if count + MOST_MOVES * (end - start) > len(rows):
            break
        if claims[life]:
            count = _moves_of_life(rv, node, binds, deletes, state, start, end, life, count,
                                   rows, nodes, takes, kinds, changes, lives)
        life += 1
    return life, count


@njit(cache=True, nogil=True, inline="always")
def _moves_of_life(rv, node, binds, deletes, state, start, end, life, count,
                   rows, nodes, takes, kinds, changes, lives):  # pragma: no cover - compiled
    """``_life_moves`` of the life ``start:end``; returns the count after its moves."""
    bound, bind_rv, deleted, delete_rv = _bind_and_delete(rv, binds, deletes, start, end)
    held_assumed = held_bound = -1  # the node each kind of cache sees the pod hold
    for i in range(start, end):
        binding = bound and rv[i] == bind_rv
        delete = deleted and rv[i] == delete_rv
        if not (binding or delete or state[i] >= ASSUMED):
            continue
        holds = node[i] if binding or state[i] == ASSUMED else -1
        moves_bound = binding or delete or state[i] >= FAILED  # (a terminal phase)
        # the releases as each kind sees them (one, of both, where they are the same) and the
        # take, on three different nodes
        release_assumed = held_assumed >= 0 and holds != held_assumed
        release_bound = moves_bound and held_bound >= 0 and holds != held_bound
        take_assumed = holds >= 0 and holds != held_assumed
        take_bound = moves_bound and holds >= 0 and holds != held_bound
        if release_assumed and release_bound and held_assumed == held_bound:
            release_bound = False
            release_kind = BOTH
        else:
            release_kind = COUNTS_ASSUMED
        take_kind = (BOTH if take_assumed and take_bound
                     else COUNTS_ASSUMED if take_assumed else COUNTS_BOUND)
        found = (held_assumed if release_assumed else -1, held_bound if release_bound else -1,
                 holds if take_assumed or take_bound else -1)
        found_kinds = (release_kind, COUNTS_BOUND, take_kind)
        change = BINDING if binding else DELETE if delete else state[i]
        for _ in range(3):  # in node order
            which = _least(found)
            if which < 0:
                break
            rows[count], nodes[count], takes[count] = i, found[which], which == 2
            kinds[count], changes[count], lives[count] = found_kinds[which], change, life
            count += 1
            found = (-1 if which == 0 else found[0], -1 if which == 1 else found[1],
                     -1 if which == 2 else found[2])
        held_assumed = holds
        if moves_bound:
            held_bound = holds
    return count


@njit(cache=True, nogil=True, inline="always")
def _bind_and_delete(rv, binds, deletes, start, end):  # pragma: no cover - compiled
    """Whether the life ``start:end`` has a binding and its least rv, whether it has a delete
    and its greatest rv (the SQL's ``min(rv) FILTER (...)``, ``max(rv) FILTER (...)``)."""
    bound = deleted = False
    bind_rv = delete_rv = rv[start]
    for i in range(start, end):
        if binds[i] and (not bound or rv[i] < bind_rv):
            bound, bind_rv = True, rv[i]
        if deletes[i] and (not deleted or rv[i] > delete_rv):
            deleted, delete_rv = True, rv[i]
    return bound, bind_rv, deleted, delete_rv


@njit(cache=True, nogil=True, inline="always")
def _least(nodes):  # pragma: no cover - compiled
    """Which of three nodes (-1: none) is the least; -1 if none is."""
    which = -1
    for k in range(3):
        if nodes[k] >= 0 and (which < 0 or nodes[k] < nodes[which]):
            which = k
    return which
