"""Node selection as kube-scheduler and Gödel do it: the walk, integer plugin scores, and a
uniform draw among the top-scored nodes (selectHost)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.selection import (GodelNodeSelector, NodeSelector, godel_nodes_to_find,
                                     nodes_to_find)
from replay.engine.view import Snapshot
from conftest import budget

GIB = 1 << 30


def test_nodes_to_find_follows_kubernetes():
    assert nodes_to_find(50, 0) == 50  # fewer than 100 nodes: all
    assert nodes_to_find(1000, 0) == 420  # 50 - 1000/125 = 42%
    assert nodes_to_find(5000, 0) == 500  # 50 - 40 = 10%
    assert nodes_to_find(20000, 0) == 1000  # floor of 5%
    assert nodes_to_find(1500, 1) == 100  # at least 100
    assert nodes_to_find(1500, 100) == 1500


def test_nodes_to_find_follows_godel():
    assert godel_nodes_to_find(20000, 0, 1) == 51  # a long-running task: members + 50
    assert godel_nodes_to_find(20000, 0, 8) == 58
    assert godel_nodes_to_find(30, 0, 1) == 30  # never more than there are
    assert godel_nodes_to_find(1500, 1, 1) == 15  # a percentage: no floor of 100
    assert godel_nodes_to_find(50, 1, 1) == 1  # but at least one
    assert godel_nodes_to_find(1500, 100, 1) == 1500


def snapshot(alloc, free, present=None, zero_requests=None):
    alloc, free = np.asarray(alloc, dtype=np.int64), np.asarray(free, dtype=np.int64)
    n = alloc.shape[1]
    zero = (np.zeros((2, n), dtype=np.int64) if zero_requests is None
            else np.asarray(zero_requests, dtype=np.int64))
    return Snapshot(alloc, free, np.ones(n, bool) if present is None else np.asarray(present),
                    np.zeros(n, dtype=np.int64), zero)


def test_integer_scores_worked_example():
    """4 cores and 8 GiB, 1 core and 4 GiB in use, a pod of 1 core and 2 GiB: cpu 50% and memory
    75% requested with it.  LeastAllocated: (50 + 25) / 2 = 37; MostAllocated: (50 + 75) / 2 =
    62; BalancedAllocation: std = |0.5 - 0.75| / 2 = 0.125, (1 - 0.125) x 100 = 87."""
    view = snapshot([[4000], [8 * GIB], [0]], [[3000], [4 * GIB], [0]])
    nodes, request = np.array([0]), (1000, 2 * GIB, 0)
    rng = np.random.default_rng(0)
    assert NodeSelector("least-allocated", 0, rng).scores(view, nodes, request).tolist() == [37 + 87]
    assert NodeSelector("most-allocated", 0, rng).scores(view, nodes, request).tolist() == [62 + 87]
    assert GodelNodeSelector("most-allocated", 0, rng).scores(view, nodes, request).tolist() == [62]


def test_fit_scores_count_a_request_not_set_as_upstreams_default():
    """kube-scheduler's ``NonZeroRequested``: NodeResourcesFit counts a pod without a cpu or
    memory request as 100 millicores and 200 MiB, on the node and for the pod placed (Gödel's
    resource plugins too); BalancedAllocation counts requests as they are.  Node 0 holds ten
    pods without requests, node 1 one pod of 500 millicores and 1 GiB; 4 cores and 8 GiB each.
    A pod of 1 core and 1 GiB: LeastAllocated gives node 0 (4000 - 2000) x 100 / 4000 = 50 for
    cpu and (8 - 1 - 10 x 200 / 1024) GiB / 8 GiB = 63 for memory, 56 in all; node 1 62 and 75,
    68.  Without the defaults node 0 would have scored (75 + 87) / 2 = 81 and won.  A pod
    without requests counts 100 millicores and 200 MiB itself: on node 1, 85 and 85; and
    BalancedAllocation skips it (since Kubernetes 1.33: it sent every such pod to one node)."""
    view = snapshot([[4000] * 2, [8 * GIB] * 2, [0] * 2], [[4000, 3500], [8 * GIB, 7 * GIB], [0] * 2],
                    zero_requests=[[10, 0], [10, 0]])
    nodes, rng = np.array([0, 1]), np.random.default_rng(0)
    least = NodeSelector("least-allocated", 0, rng)
    balanced = [93, 93]  # std |1/4 - 1/8| / 2 and |3/8 - 2/8| / 2 = 1/16: (1 - 1/16) x 100
    assert (least.scores(view, nodes, (1000, GIB, 0)) - balanced).tolist() == [56, 68]
    assert least.choose(view, (1000, GIB, 0))[0] == 1
    godel = GodelNodeSelector("least-allocated", 0, rng)
    assert godel.scores(view, nodes, (1000, GIB, 0)).tolist() == [56, 68]
    assert godel.scores(view, nodes[1:], (0, 0, 0)).tolist() == [(85 + 85) // 2]
    # kube-scheduler's BalancedAllocation skips a pod without requests (``isBestEffortPod``)
    assert least.scores(view, nodes[1:], (0, 0, 0)).tolist() == [85]


def reference_score(view, node, request, policy, balanced):
    """The plugins' scores of one node, one resource at a time, in plain Python: Fit's with
    a request of 0 (not set) counted as 100 millicores or 200 MiB, BalancedAllocation's not."""
    total = 0
    fractions = []
    for r, default in ((0, 100), (1, 200 * 2**20)):
        capacity = int(view.alloc[r, node])
        requested = capacity - int(view.free[r, node]) + request[r]
        nonzero = (capacity - int(view.free[r, node]) + default * int(view.zero_requests[r, node])
                   + (request[r] or default))
        if capacity == 0:
            total += 0
            continue
        if policy == "least-allocated":
            total += 0 if nonzero > capacity else (capacity - nonzero) * 100 // capacity
        else:
            total += min(nonzero, capacity) * 100 // capacity
        fractions.append(min(requested / capacity, 1.0))
    fit = total // 2
    std = abs(fractions[0] - fractions[1]) / 2 if len(fractions) == 2 else 0.0
    best_effort = request[0] == 0 and request[1] == 0  # (BalancedAllocation skips the pod)
    return fit + (int((1 - std) * 100) if balanced and not best_effort else 0)


def reference_walk(view, order, start, wanted, request):
    """Walk ``order`` from ``start``: the first ``wanted`` nodes that fit, and how many were
    evaluated."""
    feasible, evaluated = [], 0
    for k in range(len(order)):
        node = order[(start + k) % len(order)]
        evaluated += 1
        if (view.present[node] and all(view.free[r, node] >= request[r] for r in range(3))
                and view.free[3, node] > 0):  # room for one more pod
            feasible.append(node)
            if len(feasible) == wanted:
                break
    return feasible, evaluated


@settings(max_examples=budget(150), deadline=None)
@given(st.data(), st.integers(1, 400), st.sampled_from([0, 1, 10, 50, 100]),
       st.sampled_from(["least-allocated", "most-allocated"]), st.booleans())
def test_choose_matches_the_reference(data, nodes, percentage, policy, godel):
    """The walk evaluated as many nodes as the reference and kube's next start moved on by that
    many; the node chosen is the reference's: drawn from the scheduler's stream (after Gödel's
    draw of its start) among the top-scored feasible nodes in walk order."""
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    alloc = rng.integers(0, 5, size=(4, nodes)) * 1000  # (the last row: pods)
    free = (alloc * rng.random((4, nodes))).astype(np.int64)
    zero = rng.integers(0, 3, size=(2, nodes)) * rng.integers(0, 2)  # (none in half the cases)
    view = Snapshot(alloc, free, rng.random(nodes) > 0.1, np.zeros(nodes, dtype=np.int64), zero)
    request = tuple(int(x) * int(rng.random() > 0.2) for x in rng.integers(0, 3000, size=3))
    members = data.draw(st.integers(1, 8))
    seed = data.draw(st.integers(0, 1000))
    stream = np.random.default_rng(seed)  # the selector's stream, drawn again here
    if godel:
        selector = GodelNodeSelector(policy, percentage, np.random.default_rng(seed))
        start = int(stream.integers(nodes))  # the same first draw
        wanted = godel_nodes_to_find(nodes, percentage, members)
    else:
        selector = NodeSelector(policy, percentage, np.random.default_rng(seed))
        selector.next_start = start = data.draw(st.integers(0, 10 * nodes))
        wanted = nodes_to_find(nodes, percentage)
    node, evaluated = selector.choose(view, request, members)
    feasible, expected = reference_walk(view, list(range(nodes)), start % nodes, wanted, request)
    assert evaluated == expected
    if not feasible:
        assert node == -1
        return
    scores = {n: reference_score(view, n, request, policy, not godel) for n in feasible}
    top = [n for n in feasible if scores[n] == max(scores.values())]
    assert node == (top[0] if len(top) == 1 else top[int(stream.integers(len(top)))])
    if not godel:
        assert selector.next_start == start % nodes + evaluated


def test_godel_walks_its_partition_first():
    """Node 0 (the partition) is full: the walk goes on to the other nodes, never to node 0."""
    view = snapshot([[4000] * 4, [GIB] * 4, [0] * 4], [[0, 4000, 4000, 4000], [GIB] * 4, [0] * 4])
    selector = GodelNodeSelector("least-allocated", 0, np.random.default_rng(1),
                                 preferred=np.array([0]))
    node, evaluated = selector.choose(view, (1000, 0, 0))
    assert node in (1, 2, 3) and evaluated == 1 + 3
    free = view.free.copy()
    free[0, 0] = 4000
    node, evaluated = selector.choose(view._replace(free=free), (1000, 0, 0))
    assert (node, evaluated) == (0, 1)


def test_ties_are_drawn_uniformly_from_the_schedulers_own_stream():
    """Ten empty identical nodes all score the same: each is chosen about a tenth of the time
    (1,000 draws: each between 60 and 140, a 4-sigma band), and two schedulers (two streams)
    choose differently, as two seeds do."""
    view = snapshot([[8000] * 10, [32 * GIB] * 10, [0] * 10],
                    [[8000] * 10, [32 * GIB] * 10, [0] * 10])

    def choices(seed, cls=NodeSelector, count=1000):
        selector = cls("least-allocated", 0, np.random.default_rng(seed))
        return [selector.choose(view, (500, GIB, 0))[0] for _ in range(count)]

    counts = np.bincount(choices(0), minlength=10)
    assert counts.min() >= 60 and counts.max() <= 140, counts
    assert choices(0, count=20) != choices(1, count=20)
    assert choices(0, GodelNodeSelector, 20) != choices(1, GodelNodeSelector, 20)
    assert choices(7, count=50) == choices(7, count=50)  # the same stream draws the same


def test_kube_walk_rotates_its_start_by_the_nodes_processed():
    """300 nodes: 144 wanted (48%).  The first walk processes nodes 0-143 (all fit); the next
    starts at 144, where 50 nodes are full, so it processes 194 nodes to find 144, wrapping
    around to node 37; the one after starts at 338 (node 38)."""
    free = np.array([[1000] * 300, [GIB] * 300, [0] * 300])
    free[0, 144:194] = 0
    view = snapshot([[1000] * 300, [GIB] * 300, [0] * 300], free)
    selector = NodeSelector("least-allocated", 0, np.random.default_rng(0))
    assert selector.choose(view, (500, 0, 0))[1] == 144 and selector.next_start == 144
    node, evaluated = selector.choose(view, (500, 0, 0))
    assert evaluated == 194 and selector.next_start == 338
    assert node >= 194 or node <= 37


def test_random_first_fit_finds_the_one_node_that_fits():
    """Omega's walk tries each machine once: the only one with room is always found."""
    free = np.zeros((3, 500), dtype=np.int64)
    free[:, 321] = [1000, GIB, 0]
    view = snapshot(np.full((3, 500), 1000) * [[1], [GIB // 1000], [0]], free)
    selector = NodeSelector("random-first-fit", 0, np.random.default_rng(3))
    for _ in range(5):
        node, evaluated = selector.choose(view, (500, GIB // 2, 0))
        assert node == 321 and 1 <= evaluated <= 500
    assert selector.choose(view, (2000, 0, 0)) == (-1, 500)


@pytest.mark.parametrize("policy", ["least-allocated", "most-allocated", "random-first-fit"])
def test_a_node_without_room_for_another_pod_is_filtered_out(policy):
    """Node 0 has the most room for the request but its allocatable pods are all taken (free
    pods 0: NodeResourcesFit's "Too many pods"): every policy places the pod on node 1, and
    finds no node once node 1's last pod slot is taken too.  A snapshot without the pods' row
    (three rows, as a model may build one) sets no limit."""
    alloc = [[8000, 2000], [8 * GIB, 2 * GIB], [0, 0], [110, 110]]
    free = [[8000, 2000], [8 * GIB, 2 * GIB], [0, 0], [0, 1]]
    selector = NodeSelector(policy, 0, np.random.default_rng(0))
    assert selector.choose(snapshot(alloc, free), (500, GIB, 0))[0] == 1
    free[3][1] = 0
    assert selector.choose(snapshot(alloc, free), (500, GIB, 0))[0] == -1
    assert selector.choose(snapshot(alloc[:3], free[:3]), (500, GIB, 0))[0] >= 0
