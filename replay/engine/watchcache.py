"""How big the API server's watch cache and its watchers' buffers are, by upstream's rules.

Each resource has its own watch cache (``k8s.io/apiserver/pkg/storage/cacher``), which keeps a
window of its recent events: a re-watch from a resource version older than the window gets
"410 Gone" and must re-list.  Upstream sizes the window dynamically
(``watch_cache_history.go``): it starts at 100 events and doubles while it is full of events younger
than ``DefaultEventFreshDuration`` (75 s, ``cacher.go``), up to 102,400, and halves when its newest
quarter spans more than that.  Here the window has one size per resource for the whole run: the
size that rule reaches for the busiest 75 s of the resource's writes (it grows within a few
events of a burst and shrinks only slowly after one).  A trace whose load falls keeps a larger
window than upstream would after the fall, so it re-lists a little less.

A watcher's buffer (``suggestedWatchChannelSize``, same file) is about one second of the window,
``ceil(capacity / 75)``, at least 10 and at most 10 for a watch that uses the resource's trigger
index (a kubelet's pods, selected by ``spec.nodeName``), 1,000 for another watch of a resource
that has one (any other pods watch), and 100 for a resource without one (nodes and the rest: of
the resources here only pods register a trigger function,
``pkg/registry/core/pod/strategy.go``).  Upstream's watcher holds two channels of that size
(``cache_watcher.go``: ``input`` and ``result``).
"""

from __future__ import annotations

import math

import numpy as np

EVENT_FRESH_US = 75_000_000  # DefaultEventFreshDuration: defaultBookmarkFrequency (1 min) + 15 s
LOWER_CAPACITY = 100  # defaultLowerBoundCapacity
UPPER_CAPACITY = 100 * 1024  # defaultUpperBoundCapacity
MIN_CHANNEL = 10  # minWatchChanSize
MAX_CHANNEL_INDEXED_TRIGGERED = 10  # maxWatchChanSizeWithIndexAndTrigger
MAX_CHANNEL_INDEXED = 1000  # maxWatchChanSizeWithIndexWithoutTrigger
MAX_CHANNEL_UNINDEXED = 100  # maxWatchChanSizeWithoutIndex
TRIGGER_INDEXED = frozenset({"pods"})  # resources whose registry sets a TriggerFunc


def capacity_for(times_us: np.ndarray) -> int:
    """The window the dynamic rule settles at for events at ``times_us`` (ascending, as a
    trace's are): the smallest 100 x 2^k holding the busiest 75 s (counted in whole seconds
    since the first), within [100, 102,400]."""
    if len(times_us) == 0:
        return LOWER_CAPACITY
    first = int(times_us[0])
    seconds = (int(times_us[-1]) - first) // 1_000_000 + 1
    # the events before each whole second: a binary search a second, not a division an event
    running = np.searchsorted(times_us, first + 1_000_000 * np.arange(seconds + 1))
    window = EVENT_FRESH_US // 1_000_000
    busiest = int((running[window:] - running[:-window]).max()) if len(running) > window \
        else int(running[-1])
    capacity = LOWER_CAPACITY
    while capacity < busiest and capacity < UPPER_CAPACITY:
        capacity *= 2
    return capacity


def capacities(resources: list[str], codes: np.ndarray, times_us: np.ndarray) -> dict[str, int]:
    """``capacity_for`` of each resource's writes: ``codes`` per write index ``resources``."""
    if len(resources) == 1:
        return {resources[0]: capacity_for(times_us)}
    return {name: capacity_for(times_us[codes == code]) for code, name in enumerate(resources)}


def channel_size(capacity: int, resource: str, node_bound: bool) -> int:
    """Upstream's ``suggestedWatchChannelSize`` for a watch of ``resource`` whose cache keeps
    ``capacity`` events; ``node_bound``: the watch selects by node (a kubelet's)."""
    size = max(math.ceil(capacity / (EVENT_FRESH_US / 1_000_000)), MIN_CHANNEL)
    if resource not in TRIGGER_INDEXED:
        return min(size, MAX_CHANNEL_UNINDEXED)
    return min(size, MAX_CHANNEL_INDEXED_TRIGGERED if node_bound else MAX_CHANNEL_INDEXED)
