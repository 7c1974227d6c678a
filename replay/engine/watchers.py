"""Which watcher receives which write: the informers' filters, for whole arrays of writes.

A watcher receives a write when the write's resource is one it watches and, for a watcher bound
to a node (a kubelet), when the write concerns that node: the node object itself, or a pod bound to
it (from its binding up to and including its delete, as a ``spec.nodeName`` field selector sees
it).  ``WatcherSpec.receives`` states the same rule for one write.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from replay.arrays import stable_order
from replay.engine.config import WatcherSpec


def receives(watcher: WatcherSpec, resource: str, node: str | None) -> bool:
    """Whether ``watcher`` receives a write of ``resource`` concerning ``node``."""
    if resource not in watcher.resources:
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


def match(watchers: list[WatcherSpec], resource: pl.Series,
          node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (write index, watcher index) deliveries, sorted by watcher and then by write (the
    watcher indices as int32: there are millions of them).

    ``resource`` gives, per write in commit order, its resource, and ``node`` the node it
    concerns as an index into ``watched_nodes(watchers)`` (-1 when none).
    """
    wanted: dict[tuple[str, ...], np.ndarray] = {}

    def wants(resources: tuple[str, ...]) -> np.ndarray:
        if resources not in wanted:
            wanted[resources] = resource.is_in(list(resources)).to_numpy()
        return wanted[resources]

    writes, owners = [], []
    for index, watcher in enumerate(watchers):
        if watcher.node is None:
            hit = np.flatnonzero(wants(watcher.resources))
            writes.append(hit)
            owners.append(np.full(len(hit), index, dtype=np.int32))
    if any(w.node is not None for w in watchers):
        write, owner = _node_bound(watchers, node, wants)
        order = stable_order(owner, len(watchers))  # by watcher; writes stay in commit order
        writes.append(write[order])
        owners.append(owner[order])
    if not writes:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
    write, owner = np.concatenate(writes), np.concatenate(owners)
    if len(owner) and np.any(owner[1:] < owner[:-1]):
        order = stable_order(owner, len(watchers))
        write, owner = write[order], owner[order]
    return write, owner


def _node_bound(watchers: list[WatcherSpec], node: np.ndarray,
                wants: Callable[[tuple[str, ...]], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The deliveries to node-bound watchers, in write order: each write concerning a node goes
    to every watcher bound to that node that watches the write's resource."""
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
    }, schema={"watcher": pl.String, "role": pl.String, "resources": pl.String,
               "node": pl.String})
