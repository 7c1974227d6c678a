"""``PodHistory`` finds a recorded trace's pod incarnations exactly, even where two names share
the 64-bit hash it sorts them by."""

from __future__ import annotations

from unittest import mock

import numpy as np
import polars as pl
import pytest
from conftest import budget
from hypothesis import given, settings
from strategies import bind, delete, pod, status, trace_frame, workloads

from replay.trace import recorded
from replay.trace.recorded import PodHistory, RowMasks


def by_length(names: pl.Series, seed: int) -> np.ndarray:
    """A hash under which every name of one length collides (all of ``workloads``' pods)."""
    return names.str.len_bytes().cast(pl.UInt64).to_numpy() + np.uint64(seed)


POLARS = recorded.name_hash
HASHES = {
    "polars' hashes": POLARS,
    "the first hash colliding": lambda names, seed: (
        by_length(names, seed) if seed == 0 else POLARS(names, seed)),
}


def reference(trace: pl.DataFrame) -> tuple[list[tuple[str, int] | None], list[int]]:
    """Row by row: each pod write's incarnation as (its name, how many incarnations of that
    name came before), and the row of that incarnation's latest committed placement so far: a
    binding, or a create that names its node."""
    masks = RowMasks(trace)
    labels: list[tuple[str, int] | None] = []
    last_placement: list[int] = []
    seen: dict[str, int] = {}
    bound: dict[tuple[str, int], int] = {}
    rows = trace.select("namespace", "name", "node").iter_rows()
    for row, (namespace, name, node) in enumerate(rows):
        if not masks.named_pod[row]:
            labels.append(None)
            last_placement.append(-1)
            continue
        pod = f"{namespace}/{name}" if namespace is not None else name
        if pod not in seen or masks.ok_create[row]:
            seen[pod] = seen.get(pod, -1) + 1
        label = (pod, seen[pod])
        if masks.ok_binding[row] or (masks.ok_create[row] and node is not None):
            bound[label] = row
        labels.append(label)
        last_placement.append(bound.get(label, -1))
    return labels, last_placement


@pytest.mark.parametrize("hashes", HASHES)
@settings(max_examples=budget(60))
@given(rows=workloads(max_pods=8))
def test_pod_history_is_the_name_by_name_reference(hashes, rows):
    trace = trace_frame(rows)
    with mock.patch.object(recorded, "name_hash", HASHES[hashes]):
        history = PodHistory.of(trace)
    labels, last_placement = reference(trace)
    pods = history.pods.to_list()
    found = [None if i < 0 else (pods[i], i) for i in history.incarnation.tolist()]
    ids: dict[tuple[str, int], int] = {}
    for label, got in zip(labels, found):
        assert (label is None) == (got is None)
        if label is not None:
            assert got[0] == label[0]  # the incarnation of the row's own pod
            assert ids.setdefault(label, got[1]) == got[1]  # one id per incarnation...
    assert len(set(ids.values())) == len(ids) == history.incarnations  # ...and one per id
    assert history.last_placement.tolist() == last_placement
    masks = RowMasks(trace)
    for where in (masks.named_pod, masks.ok_create, masks.ok_binding, masks.ok_delete):
        rows = {}  # per incarnation id: its rows where ``where`` holds, in trace order
        for row, label in enumerate(labels):
            if label is not None and where[row]:
                rows.setdefault(ids[label], []).append(row)
        first = [rows[i][0] if i in rows else -1 for i in range(history.incarnations)]
        last = [rows[i][-1] if i in rows else -1 for i in range(history.incarnations)]
        assert history.first(where).tolist() == first
        assert history.last(where).tolist() == last
    assert history.rows.tolist() == [row for i in range(history.incarnations)
                                     for row in np.flatnonzero(history.incarnation == i)]
    assert history.starts.tolist() == np.searchsorted(
        history.incarnation[history.rows], np.arange(history.incarnations)).tolist()


def test_terminal_phases_as_a_scheduler_sees_them():
    """p0 ends at its Succeeded status write (row 3), which ends it to a watch of non-terminal
    pods, and its delete comes after; p0 made again is a new pod.  old ran to its end before the
    trace (not created, not listed, its first terminal write its delete): each of its writes
    comes after its end.  listed, in the first list, ends at its Failed delete."""
    trace = trace_frame([
        pod(0, "p0", 100), bind(1, "p0", "n0"), status(2, "p0", "Running"),
        status(3, "p0", "Succeeded"), delete(4, "p0"), pod(5, "p0", 100),
        status(6, "old", None), delete(7, "old", phase="Succeeded"),
        status(8, "listed", "Running", cpu=100), delete(9, "listed", phase="Failed")])
    masks = RowMasks(trace)
    history = PodHistory.of(trace, masks)
    listed = np.unique(history.incarnation[trace["name"].to_numpy() == "listed"])
    phases = recorded.terminal_phases(masks, history, listed)
    assert np.flatnonzero(phases.ends).tolist() == [3, 9]
    assert np.flatnonzero(phases.ended).tolist() == [4, 6, 7]
