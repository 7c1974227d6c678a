"""A view's capacity as its own placements change it (``assume``, ``forget``, ``holding``): the
snapshot the schedulers read must see every change made through the view's rows.  And as the
watch changes it: every read applies exactly the deliveries due by then."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.cluster import Pod, Write, WriteKind
from replay.engine.view import View

GIB = 1 << 30


def test_own_placements_change_the_snapshot_and_fits():
    view = View(2, lambda: 0)
    view._set_node(0, (4000, 8 * GIB, 1000))
    pod = Pod(0, None, "p0", (1500, 2 * GIB, 500), 0, -1, None, None, 0)
    free = view.snapshot().free
    view.assume(pod, 0)
    assert free[:, 0].tolist() == [2500, 6 * GIB, 500]
    assert view.fits(0, (2500, 6 * GIB, 500)) and not view.fits(0, (2501, 0, 0))
    with view.holding() as hold:
        hold(0, (1000, GIB, 0))
        assert free[:, 0].tolist() == [1500, 5 * GIB, 500]
    assert free[:, 0].tolist() == [2500, 6 * GIB, 500]
    view.forget(pod)
    assert free[:, 0].tolist() == [4000, 8 * GIB, 1000]
    assert free[:, 1].tolist() == [0, 0, 0]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_every_read_applies_exactly_the_deliveries_due(data):
    """Deliveries to the three informers (nodes, pods, another resource), each inbox in the
    order its applied times never decrease, and reads at times that never decrease: each read
    sees what applying every delivery due by then gives (``_due``, the earliest applied time
    left in any inbox, never hides one): per node its last allocatable and version applied,
    less the pods whose binding is applied and whose delete is not."""
    nodes, now = 3, [0]
    view = View(nodes, lambda: now[0])
    pods = [Pod(i, None, f"p{i}", (100 * (i + 1), i + 1, 0), 0, -1, None, None, 0)
            for i in range(4)]
    last = {"nodes": 0, "pods": 0, "other": 0}  # each informer's last applied time
    sent: list[tuple[int, Write]] = []
    for rv in range(1, data.draw(st.integers(1, 30)) + 1):
        informer = data.draw(st.sampled_from(sorted(last)))
        last[informer] += data.draw(st.integers(0, 5))
        node = data.draw(st.integers(0, nodes - 1))
        if informer == "nodes":
            write = Write(rv, 0, WriteKind.NODE_SET, None, node, "t", 0, -1, 200,
                          (1000 * rv, 100 * rv, 0), node_version=rv)
        elif informer == "pods":
            kind = data.draw(st.sampled_from([WriteKind.POD_BIND, WriteKind.POD_DELETE]))
            write = Write(rv, 0, kind, data.draw(st.sampled_from(pods)), node, "t", 0, -1, 200)
        else:
            write = Write(rv, 0, WriteKind.OTHER, None, -1, "t", 0, -1, 200)
        view._deliver(last[informer], write)
        sent.append((last[informer], write))
        if data.draw(st.booleans()):
            now[0] += data.draw(st.integers(0, 6))
            snapshot = view.snapshot()
            assert (snapshot.free.tolist(), snapshot.version.tolist()) == _applied_by(
                sent, now[0], nodes)


def _applied_by(sent: list[tuple[int, Write]], now: int, nodes: int
                ) -> tuple[list[list[int]], list[int]]:
    """The free capacity and version per node once the deliveries due by ``now`` are applied,
    in the order sent (a binding counts from its application until its pod's delete is
    applied; a node's version is the highest applied)."""
    free = [[0] * nodes for _ in range(3)]
    version = [0] * nodes
    placed: dict[Pod, int] = {}
    for applied, write in sent:
        if applied > now:
            continue
        if write.kind == WriteKind.NODE_SET:
            for resource in range(3):
                free[resource][write.node] = write.alloc[resource]
            version[write.node] = max(version[write.node], write.node_version)
        elif write.kind == WriteKind.POD_BIND:
            placed[write.pod] = write.node
        elif write.kind == WriteKind.POD_DELETE:
            placed.pop(write.pod, None)
    for pod, node in placed.items():
        for resource in range(3):
            free[resource][node] -= pod.request[resource]
    return free, version
