"""Node selection as kube-scheduler does it: sampling from a rotating start, then scoring."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.engine.selection import NodeSelector, nodes_to_find
from replay.engine.view import Snapshot


def test_nodes_to_find_follows_kubernetes():
    assert nodes_to_find(50, 0) == 50  # fewer than 100 nodes: all
    assert nodes_to_find(1000, 0) == 420  # 50 - 1000/125 = 42%
    assert nodes_to_find(5000, 0) == 500  # 50 - 40 = 10%
    assert nodes_to_find(20000, 0) == 1000  # floor of 5%
    assert nodes_to_find(1500, 1) == 100  # at least 100
    assert nodes_to_find(1500, 100) == 1500


def chooser(percentage, policy, start, preferred=None):
    selector = NodeSelector(policy, percentage, np.random.default_rng(0), preferred)
    selector.next_start = start
    return selector


def reference(view, order, wanted, start, request, policy):
    """Walk the nodes from ``start``, keep the first ``wanted`` that fit, take the best score."""
    feasible, evaluated = [], 0
    for k in range(len(order)):
        node = order[(start + k) % len(order)]
        evaluated += 1
        if view.present[node] and all(view.free[r, node] >= request[r] for r in range(3)):
            feasible.append(node)
            if len(feasible) == wanted:
                break
    if not feasible:
        return -1, evaluated
    def score(n):
        left = [(view.free[r, n] - request[r]) / max(view.alloc[r, n], 1) for r in (0, 1)]
        s = sum(left) / 2
        return s if policy == "least-allocated" else -s
    best = max(feasible, key=lambda n: (score(n), -feasible.index(n)))
    return best, evaluated


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(1, 400), st.sampled_from([0, 1, 10, 50, 100]),
       st.sampled_from(["least-allocated", "most-allocated"]))
def test_choose_matches_the_reference(data, nodes, percentage, policy):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32)))
    alloc = rng.integers(1, 10, size=(3, nodes)) * 1000
    free = (alloc * rng.random((3, nodes))).astype(np.int64)
    present = rng.random(nodes) > 0.1
    view = Snapshot(alloc, free, present, np.zeros(nodes, dtype=np.int64))
    request = tuple(int(x) for x in rng.integers(0, 4000, size=3))
    start = data.draw(st.integers(0, 10 * nodes))
    preferred = None
    if data.draw(st.booleans()):
        preferred = np.sort(rng.choice(nodes, size=max(1, nodes // 3), replace=False))
    got = chooser(percentage, policy, start, preferred).choose(view, request)
    if preferred is None:
        want = reference(view, list(range(nodes)), nodes_to_find(nodes, percentage),
                         start % nodes, request, policy)
    else:
        want = reference(view, list(preferred), nodes_to_find(len(preferred), percentage),
                         start % len(preferred), request, policy)
        if want[0] < 0:
            other = reference(view, list(range(nodes)), nodes_to_find(nodes, percentage),
                              (start + want[1]) % nodes, request, policy)
            want = (other[0], want[1] + other[1])
    assert got == want
