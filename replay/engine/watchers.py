"""Which watcher receives which write: the informers' filters, for whole arrays of writes.

A watcher receives a write when the write's resource is one it watches and, for a watcher bound
to a node (a kubelet), when the write concerns that node: the node object itself, or a pod bound to
it (from its binding up to and including its delete, as a ``spec.nodeName`` field selector sees
it).  A watcher whose pod watch selects non-terminal pods only (``WatcherSpec.sees_terminal_pods``:
a scheduler's ``status.phase!=Succeeded,status.phase!=Failed``) does not receive a pod's writes
after the one that set its terminal phase (that one it receives, as the pod's deletion: the watch
cache sends DELETED for an object that stops matching a watch's selector).  ``receives`` states
the same rule for one write.

A watcher has one watch per resource it watches (a *stream*: its own buffer in the API server, its
own order, its own informer and handler); ``Streams`` numbers them, by watcher and then resource.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import polars as pl

from replay.arrays import stable_order
from replay.engine.config import WatcherSpec


class Streams:
    """The watches of a list of watchers: stream ``s`` is watcher ``watcher[s]``'s watch of
    resource ``resources[resource[s]]``, numbered by watcher and then resource code.

    ``resources`` lists every resource the writes may name: first those watched (sorted), then
    ``others`` (sorted), each resource's code being its position."""

    def __init__(self, watchers: list[WatcherSpec], others: Iterable[str] = ()):
        watched = sorted({r for w in watchers for r in w.resources})
        self.watchers = watchers
        self.resources = watched + sorted(set(others) - set(watched))
        self.code = {name: code for code, name in enumerate(self.resources)}
        pairs = [(w, self.code[r]) for w, spec in enumerate(watchers)
                 for r in sorted(set(spec.resources), key=self.code.__getitem__)]
        self.watcher = np.array([w for w, _ in pairs], dtype=np.int64)
        self.resource = np.array([r for _, r in pairs], dtype=np.int64)
        self.of = {pair: s for s, pair in enumerate(pairs)}  # (watcher, resource code) -> stream
        # per stream: a watch of pods that selects non-terminal pods only
        self.non_terminal = np.array([self.resources[r] == "pods"
                                      and not watchers[w].sees_terminal_pods for w, r in pairs],
                                     dtype=bool)

    def __len__(self) -> int:
        return len(self.watcher)

    def codes(self, names: pl.Series) -> np.ndarray:
        """The code of each resource name (names not in ``resources`` are an error)."""
        codes: np.ndarray = names.cast(pl.Enum(self.resources)).to_physical().to_numpy()
        return codes.astype(np.int64)


def receives(watcher: WatcherSpec, resource: str, node: str | None, ended: bool = False) -> bool:
    """Whether ``watcher`` receives a write of ``resource`` concerning ``node``; ``ended``: a
    write to a pod that a write before it put in a terminal phase."""
    if resource not in watcher.resources or (ended and not watcher.sees_terminal_pods):
        return False
    return watcher.node is None or watcher.node == node


def watched_nodes(watchers: list[WatcherSpec]) -> list[str]:
    """The nodes that node-bound watchers watch, each once, in watcher order."""
    return list(dict.fromkeys(w.node for w in watchers if w.node is not None))


def node_index(watchers: list[WatcherSpec], names: pl.Series) -> np.ndarray:
    """For each node name, its index in ``watched_nodes(watchers)`` (-1 if none watches it)."""
    nodes = watched_nodes(watchers)
    if not nodes:
        return np.full(len(names), -1, dtype=np.int64)
    return (names.replace_strict(nodes, range(len(nodes)), default=-1, return_dtype=pl.Int64)
            .fill_null(-1).to_numpy())


def match(streams: Streams, resource: np.ndarray, node: np.ndarray,
          ended: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All (write index, stream) deliveries, sorted by stream and then by write (the streams as
    int32: there are millions of them).

    ``resource`` gives, per write in commit order, its resource's code in ``streams``, ``node``
    the node it concerns as an index into ``watched_nodes(streams.watchers)`` (-1 when none),
    and ``ended`` (None: none) whether it writes a pod that an earlier write put in a terminal
    phase, which the streams that select non-terminal pods do not receive.
    """
    watchers = streams.watchers
    ended = ended if ended is not None and np.any(ended) else None
    live = ~ended if ended is not None else None  # the writes to pods not yet ended
    of_resource: dict[tuple[int, bool], np.ndarray] = {}

    def writes_of(code: int, non_terminal: bool) -> np.ndarray:
        selected = non_terminal and live is not None
        if (code, selected) not in of_resource:
            of_resource[code, selected] = np.flatnonzero(
                (resource == code) & live if live is not None and selected else resource == code)
        return of_resource[code, selected]

    writes: list[np.ndarray] = []
    owners: list[int | np.ndarray] = []  # a stream, or one per write
    for s in range(len(streams)):
        if watchers[streams.watcher[s]].node is None:
            writes.append(writes_of(int(streams.resource[s]), bool(streams.non_terminal[s])))
            owners.append(s)
    if not any(w.node is not None for w in watchers):
        return _joined(writes, owners)  # in stream order already
    write, owner = _node_bound(streams, resource, node)
    if ended is not None:
        keep = ~(ended[write] & streams.non_terminal[owner])
        write, owner = write[keep], owner[keep]
    order = stable_order(owner, len(streams))  # by stream; writes stay in commit order
    writes.append(write[order])
    owners.append(owner[order])
    write, owner = _joined(writes, owners)
    if len(owner) and np.any(owner[1:] < owner[:-1]):
        order = stable_order(owner, len(streams))
        write, owner = write[order], owner[order]
    return write, owner


def _joined(writes: list[np.ndarray],
            owners: list[int | np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The runs of deliveries ``writes`` (write indices) and ``owners`` (their streams) one
    after another, written straight into the two arrays: no array of a stream per write for a
    watcher of the whole cluster, no copy by concatenation (hundreds of megabytes at a million
    pods, each page of them faulted in)."""
    size = sum(len(hit) for hit in writes)
    write, owner = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int32)
    at = 0
    for hit, stream in zip(writes, owners):
        write[at:at + len(hit)] = hit
        owner[at:at + len(hit)] = stream
        at += len(hit)
    return write, owner


def _node_bound(streams: Streams, resource: np.ndarray,
                node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The deliveries to node-bound watchers' streams, in write order: each write concerning a
    node goes to every watcher bound to that node that watches the write's resource."""
    watchers = streams.watchers
    wanted: dict[tuple[str, ...], np.ndarray] = {}

    def wants(resources: tuple[str, ...]) -> np.ndarray:
        if resources not in wanted:
            codes = [streams.code[r] for r in resources]
            wanted[resources] = np.isin(resource, codes)
        return wanted[resources]

    write, owner = _node_bound_watchers(watchers, node, wants)
    lookup = np.full((len(watchers), len(streams.resources)), -1, dtype=np.int32)
    lookup[streams.watcher, streams.resource] = np.arange(len(streams), dtype=np.int32)
    return write, lookup[owner, resource[write]]


def _node_bound_watchers(watchers: list[WatcherSpec], node: np.ndarray,
                         wants: Callable[[tuple[str, ...]], np.ndarray]
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The deliveries to node-bound watchers, in write order, as (write, watcher)."""
    bound = np.array([i for i, w in enumerate(watchers) if w.node is not None], dtype=np.int32)
    index = {name: k for k, name in enumerate(watched_nodes(watchers))}
    node_of = np.array([index[watchers[i].node] for i in bound], dtype=np.int64)
    by_node = bound[np.argsort(node_of, kind="stable")]  # each node's watchers, in index order
    count = np.bincount(node_of, minlength=len(index))
    first = np.cumsum(count) - count
    kinds = list(dict.fromkeys(watchers[i].resources for i in bound))
    hits = np.flatnonzero((node >= 0) & np.logical_or.reduce([wants(k) for k in kinds]))
    at = node[hits]
    if count.max() == 1:  # one watcher per node, as kubelets are
        write, owner = hits, by_node[first[at]]
    else:
        per_write = count[at]
        write = np.repeat(hits, per_write)
        slot = np.arange(len(write)) - np.repeat(np.cumsum(per_write) - per_write - first[at],
                                                 per_write)
        owner = by_node[slot]
    if len(kinds) == 1:
        return write, owner
    kind_of = np.zeros(len(watchers), dtype=np.int64)
    kind_of[bound] = [kinds.index(watchers[i].resources) for i in bound]
    keep = np.zeros(len(write), dtype=bool)
    for kind, resources in enumerate(kinds):
        mine = kind_of[owner] == kind
        keep[mine] = wants(resources)[write[mine]]
    return write[keep], owner[keep]


def watchers_table(watchers: list[WatcherSpec]) -> pl.DataFrame:
    """The run's ``watchers`` table: every watcher, including those that received nothing."""
    return pl.DataFrame({
        "watcher": [w.name for w in watchers],
        "role": [w.role for w in watchers],
        "resources": [",".join(w.resources) for w in watchers],
        "node": [w.node for w in watchers],
        "client_queue": [w.client_queue.value for w in watchers],
        "terminal_pods": [w.sees_terminal_pods for w in watchers],
    }, schema={"watcher": pl.String, "role": pl.String, "resources": pl.String,
               "node": pl.String, "client_queue": pl.String, "terminal_pods": pl.Boolean})
