"""Node selection's per-decision loops, compiled with numba: the walk, the integer scores and
the top-scored nodes in one call.

A decision walks a few dozen to a few thousand nodes; as numpy steps it cost some 40 array
operations of call overhead each (about 50 µs, most of a 1M-pod replay's minute), compiled it is
one call of a few µs.  The arithmetic is the plugins' own, in the same integer (and, for
NodeResourcesBalancedAllocation, float64) operations as ``selection``'s numpy ``scores``, so a
decision is the same node to the bit; the random draw among the top nodes stays with the
scheduler's own stream, in ``selection``.  Imported only when a what-if replay first selects a
node (numba's import takes half a second), and compiled once per machine (``cache=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from replay.jit import njit

Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]
LEAST_ALLOCATED, MOST_ALLOCATED = 0, 1
_MAX_NODE_SCORE = 100  # framework.MaxNodeScore
# What NodeResourcesFit's score counts for a pod that sets no cpu or no memory request, on the
# node and for the pod being placed (``DefaultMilliCPURequest``, ``DefaultMemoryRequest``,
# ``pkg/scheduler/util/pod_resources.go``): "so that such pods will not all be scheduled to the
# node with the smallest in-use request"
DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST = 100, 200 * 1024 * 1024


def _walk_and_score(alloc: Ints, free: Ints, zero: Ints, present: Bools, order: Ints, start: int,
                    wanted: int, cpu: int, memory: int, gpu: int, policy: int,
                    balanced_weight: int, top: Ints) -> tuple[int, int]:
    """Walk ``order`` from position ``start``, wrapping around, until ``wanted`` nodes fit the
    request; score those feasible nodes; write the top-scored ones, in walk order, to ``top``.
    Returns how many are top-scored (0: none fits) and how many nodes were evaluated (up to the
    last feasible one needed, or all)."""
    total = len(order)
    feasible = np.empty(min(wanted, total), dtype=np.int64)
    count = evaluated = 0
    while evaluated < total and count < wanted:
        node = order[(start + evaluated) % total]
        evaluated += 1
        if _fits(free, present, node, cpu, memory, gpu):
            feasible[count] = node
            count += 1
    best, tied = -1, 0
    for i in range(count):
        node = feasible[i]
        score = _score(alloc, free, zero, node, cpu, memory, policy, balanced_weight)
        if score > best:
            best, tied = score, 0
        if score == best:
            top[tied] = node
            tied += 1
    return tied, evaluated


def _fits_node(free: Ints, present: Bools, node: int, cpu: int, memory: int, gpu: int) -> bool:
    """NodeResourcesFit's filter: the node has room for the request and for one more pod
    (``fitsRequest``: "Too many pods" when ``len(nodeInfo.Pods)+1 > allowedPodNumber``; a
    ``free`` of three rows, without the pods', sets no limit)."""
    return bool(present[node] and free[0, node] >= cpu and free[1, node] >= memory
                and free[2, node] >= gpu and (free.shape[0] < 4 or free[3, node] > 0))


def _score_node(alloc: Ints, free: Ints, zero: Ints, node: int, cpu: int, memory: int,
                policy: int, balanced_weight: int) -> int:
    """NodeResourcesFit's score (LeastAllocated or MostAllocated, cpu and memory averaged) plus
    ``balanced_weight`` x NodeResourcesBalancedAllocation's, for one node.  Fit counts a request
    that is not set (0 here: ``zero`` pods on the node, and the pod if it requests none) as the
    default request (``NonZeroRequested``); BalancedAllocation counts requests as they are
    (``useRequested``, ``balanced_allocation.go``), and skips a pod that requests neither cpu
    nor memory (``isBestEffortPod``: it scored every such pod onto the same node)."""
    cpu_capacity, memory_capacity = alloc[0, node], alloc[1, node]
    cpu_requested = cpu_capacity - free[0, node]
    memory_requested = memory_capacity - free[1, node]
    cpu_fit = _fit(cpu_capacity, cpu_requested, zero[0, node], cpu, DEFAULT_MILLI_CPU_REQUEST,
                   policy)
    memory_fit = _fit(memory_capacity, memory_requested, zero[1, node], memory,
                      DEFAULT_MEMORY_REQUEST, policy)
    score: int = (cpu_fit + memory_fit) // 2
    if balanced_weight and (cpu != 0 or memory != 0):
        if cpu_capacity != 0 and memory_capacity != 0:
            std = abs(min((cpu_requested + cpu) / cpu_capacity, 1.0)
                      - min((memory_requested + memory) / memory_capacity, 1.0)) / 2
        else:
            std = 0.0
        score += balanced_weight * int((1.0 - std) * _MAX_NODE_SCORE)
    return score


def _fit_resource(capacity: int, requested: int, without_request: int, request: int,
                  default: int, policy: int) -> int:
    """One resource's NodeResourcesFit score with ``request`` placed on a node where
    ``requested`` is counted, ``without_request`` of its pods requesting none: each of those,
    and the pod if its request is 0, counts ``default`` (``NonZeroRequested``); 0 where the
    capacity is 0."""
    if capacity == 0:
        return 0
    requested += default * without_request + (request if request else default)
    if policy == LEAST_ALLOCATED:
        return 0 if requested > capacity else (capacity - requested) * _MAX_NODE_SCORE // capacity
    return min(requested, capacity) * _MAX_NODE_SCORE // capacity  # (MostAllocated clamps)


def _score_nodes(alloc: Ints, free: Ints, zero: Ints, nodes: Ints, cpu: int, memory: int,
                 policy: int, balanced_weight: int) -> Ints:
    """The scores of ``nodes`` (``_score_node`` of each)."""
    scores = np.empty(len(nodes), dtype=np.int64)
    for i in range(len(nodes)):
        scores[i] = _score(alloc, free, zero, nodes[i], cpu, memory, policy, balanced_weight)
    return scores


def _first_fit(free: Ints, present: Bools, order: Ints, cpu: int, memory: int,
               gpu: int) -> int:
    """The position in ``order`` of the first node that fits the request, -1 if none."""
    for i in range(len(order)):
        node = order[i]
        if _fits(free, present, node, cpu, memory, gpu):
            return i
    return -1


_compile: Callable[[Any], Any] = njit(cache=True, nogil=True)
_fit: Callable[[int, int, int, int, int, int], int] = _compile(_fit_resource)
_fits: Callable[[Ints, Bools, int, int, int, int], bool] = _compile(_fits_node)
_score: Callable[[Ints, Ints, Ints, int, int, int, int, int], int] = _compile(_score_node)
walk_and_score: Callable[[Ints, Ints, Ints, Bools, Ints, int, int, int, int, int, int, int, Ints],
                         tuple[int, int]] = _compile(_walk_and_score)
score_nodes: Callable[[Ints, Ints, Ints, Ints, int, int, int, int], Ints] = _compile(_score_nodes)
first_fit: Callable[[Ints, Bools, Ints, int, int, int], int] = _compile(_first_fit)
