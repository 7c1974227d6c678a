"""Pod deletecollections, written as the deletes they made.

``DELETE /api/v1/namespaces/NS/pods`` (what the namespace controller sends when a namespace is
deleted, and ``kubectl delete pods --all``) is one audit event, but the API server deletes the
namespace's pods one by one, each as a DELETE of that pod would (``Store.DeleteCollection`` in
``k8s.io/apiserver/pkg/registry/generic/registry/store.go``: it lists them, then deletes each),
and a watcher sees one event per pod.  As one row it would delete no pod, since a trace names
pods one by one, and the namespace's pods that were never bound would stay pending to the end
of every replay.  So each becomes a ``delete pods`` row per pod it deleted: every pod of the
namespace (of every namespace, when the event names none) that the trace has written and not
yet deleted, in the order the API server lists them (by name), with the collection's time,
code, user and audit ID.  A bound pod is only marked for deletion then, as by any graceful
delete, and its kubelet's delete follows, which the replays take as its end (the last delete).

A pod created before the log began and not written in it is unknown here, and stays alive, as
it does in any replay of the trace.  A collection with a label or field selector deleted the
pods that match it, which a trace cannot tell (it keeps no labels): ``scan`` drops those.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

Pod = tuple[str | None, str]  # (namespace, name)


def holds_collections(table: pa.Table) -> bool:
    """Whether ``table`` has a pod deletecollection row (only then is expanding worth a pass)."""
    return bool(pc.any(_collections(table)).as_py())


class PodCollections:
    """Expands the pod deletecollections of tables of rows that come in trace order; counts
    them and the deletes they made."""

    def __init__(self) -> None:
        self._alive: dict[str | None, dict[str, None]] = {}
        self.events = 0
        self.deletes = 0

    def expand(self, tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
        for table in tables:
            yield self._expanded(table)

    def _expanded(self, table: pa.Table) -> pa.Table:
        code = table["code"]
        written = pc.and_(pc.and_(pc.equal(table["resource"], "pods"),
                                  pc.greater_equal(code, 200)), pc.less_equal(code, 299))
        rows = pc.indices_nonzero(pc.fill_null(written, False))
        if len(rows) == 0:
            return table
        collected = self._follow(rows.to_pylist(), _collections(table).take(rows).to_pylist(),
                                 *(table[name].take(rows).to_pylist()
                                   for name in ("verb", "subresource", "namespace", "name")))
        return _with_deletes(table, collected) if collected else table

    def _follow(self, rows: list[int], collections: list[bool], verbs: list[str],
                subresources: list[str | None], namespaces: list[str | None],
                names: list[str]) -> dict[int, list[Pod]]:
        """Follow which pods are alive through the committed pod rows; the pods each
        deletecollection row deleted, by row."""
        collected: dict[int, list[Pod]] = {}
        for row, collection, verb, subresource, namespace, name in zip(
                rows, collections, verbs, subresources, namespaces, names):
            if collection:
                collected[row] = self._collect(namespace)
            elif name:
                pods = self._alive.setdefault(namespace, {})
                if subresource is None and verb == "delete":
                    pods.pop(name, None)
                else:  # created, or written (a pod created before the log began exists too)
                    pods[name] = None
        return collected

    def _collect(self, namespace: str | None) -> list[Pod]:
        """The pods a collection in ``namespace`` (None: every namespace) deletes, which are
        alive no longer."""
        spaces = sorted(self._alive, key=lambda n: (n is not None, n or "")) \
            if namespace is None else [namespace]
        pods = [(space, name) for space in spaces for name in sorted(self._alive.pop(space, {}))]
        self.events += 1
        self.deletes += len(pods)
        return pods


def _collections(table: pa.Table) -> pa.Array:
    """Pod deletecollection rows; one that names a pod is none the API server could serve (it
    routes a DELETE of a name as a delete), and is left as it is."""
    collection = pc.and_(pc.equal(table["verb"], "deletecollection"),
                         pc.equal(table["resource"], "pods"))
    unnamed = pc.or_kleene(pc.is_null(table["name"]), pc.equal(table["name"], ""))
    return pc.fill_null(pc.and_(pc.and_(collection, pc.is_null(table["subresource"])), unnamed),
                        False)


def _with_deletes(table: pa.Table, collected: dict[int, list[Pod]]) -> pa.Table:
    """``table`` with each row of ``collected`` repeated once per pod it deleted (none, if it
    deleted none), as a delete of that pod."""
    repeats = np.ones(table.num_rows, dtype=np.int64)
    for row, pods in collected.items():
        repeats[row] = len(pods)
    out = table.take(np.repeat(np.arange(table.num_rows), repeats))
    starts = np.cumsum(repeats) - repeats
    namespaces = np.array(out["namespace"].to_pylist(), dtype=object)
    names = np.array(out["name"].to_pylist(), dtype=object)
    deleting = np.zeros(out.num_rows, dtype=bool)
    for row, pods in collected.items():
        span = slice(starts[row], starts[row] + len(pods))
        namespaces[span] = [space for space, _ in pods]
        names[span] = [name for _, name in pods]
        deleting[span] = True
    columns = {"verb": pc.if_else(pa.array(deleting), "delete", out["verb"]),
               "namespace": pa.array(namespaces, pa.string()),
               "name": pa.array(names, pa.string())}
    for name, column in columns.items():
        out = out.set_column(out.schema.get_field_index(name), name, column)
    return out
