"""The watch pipeline's semantics: hand-worked cases, invariants, queueing theory, and the
agreement of the vectorised scan with the step-by-step evaluation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.arrays import (
    lindley,
    previous_in_group,
    previous_in_segment,
    segmented_cummax,
    segmented_lindley,
)
from replay.engine.config import PROFILES, ClientQueue, RunConfig, WatcherSpec
from replay.engine.distributions import Z99, Constant, Empirical, Exponential, LogNormal
from replay.engine.pipeline import STAGE_COLUMNS, Pipeline, Scan, view_lag_us
from replay.engine.watchers import Streams, match, receives, watched_nodes

from conftest import budget
from strategies import PER_WATCHER_PARAMS, STAGE_PARAMS, distributions


def naive_lindley(arrival, service):
    out, last = [], None
    for a, s in zip(arrival, service):
        last = (a if last is None else max(a, last)) + s
        out.append(last)
    return out


ints = st.lists(st.integers(0, 10**6), min_size=0, max_size=60)


@given(st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), max_size=80))
def test_lindley_is_the_fifo_recursion(pairs):
    arrival = np.sort(np.array([a for a, _ in pairs], dtype=np.int64))
    service = np.array([s for _, s in pairs], dtype=np.int64)
    assert lindley(arrival, service).tolist() == naive_lindley(arrival, service)


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(-10**9, 10**9), st.integers(0, 9)),
                max_size=80), st.sampled_from([1, 40]))
def test_segmented_scans_restart_per_segment(items, spread):
    """Segment ids 0..4, or spread to 0..160 (a kubelet each, with ids that skip)."""
    items.sort(key=lambda t: t[0])
    segment = np.array([g * spread for g, _, _ in items], dtype=np.int64)
    values = np.array([v for _, v, _ in items], dtype=np.int64)
    service = np.array([s for _, _, s in items], dtype=np.int64)
    expected_max, expected_lindley = [], []
    for g in sorted(set(segment.tolist())):
        part = segment == g
        expected_max += np.maximum.accumulate(values[part]).tolist()
        expected_lindley += naive_lindley(values[part], service[part])
    assert segmented_cummax(values, segment).tolist() == expected_max
    assert segmented_lindley(values, service, segment).tolist() == expected_lindley


@given(st.lists(st.tuples(st.integers(-1, 4), st.integers(0, 10**6)), max_size=60))
def test_previous_in_group_is_the_group_s_element_before(items):
    """A pod's previous attempt: the value of the last element before it in its group."""
    group = np.array([g for g, _ in items], dtype=np.int64)
    values = np.array([v for _, v in items], dtype=np.int64)
    last: dict[int, int] = {}
    expected = []
    for g, v in items:
        expected.append(last.get(g, -1) if g >= 0 else -1)
        if g >= 0:
            last[g] = v
    assert previous_in_group(group, values, 5).tolist() == expected


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 4)), max_size=60))
def test_previous_in_segment_is_the_segment_s_last_element_with_the_key(items):
    """A delivery's previous one of the same object to the same watcher: the position of the
    last element before it with its key, in its own segment (sorted ids) only."""
    items = sorted(items, key=lambda item: item[0])  # (stable: each segment keeps its order)
    segment = np.array([s for s, _ in items], dtype=np.int64)
    key = np.array([k for _, k in items], dtype=np.int64)
    expected = []
    for i, (s, k) in enumerate(items):
        before = [j for j in range(i) if items[j] == (s, k)]
        expected.append(before[-1] if before and k >= 0 else -1)
    assert previous_in_segment(segment, key, 5).tolist() == expected


def zero_config(seed=0, **stages) -> RunConfig:
    costs = {stage: dict(params) for stage, params in PROFILES["zero"].items()}
    for key, dist in stages.items():
        stage, param = key.rsplit("__", 1)
        costs[stage][param] = dist
    return RunConfig(seed=seed, profile="zero", stages=costs)


def observer(name, role="observer", **fields):
    """A watcher of pods alone: one stream, whose number is the watcher's."""
    return WatcherSpec(name, role, ("pods",), **fields)


def scan(config, watchers, commit, targets):
    """Run Pipeline.scan on per-write target lists (watchers of pods alone, so that a watcher's
    stream is its index); returns rows (watcher, write, *times)."""
    write = np.array([i for i, t in enumerate(targets) for _ in t], dtype=np.int64)
    owner = np.array([w for t in targets for w in t], dtype=np.int64)
    order = np.lexsort((write, owner))
    write, owner = write[order], owner[order]
    times = Pipeline(config, watchers).scan(np.asarray(commit, dtype=np.int64), write, owner)
    return [(int(w), int(i), *(int(times[c][k]) for c in STAGE_COLUMNS))
            for k, (w, i) in enumerate(zip(owner, write))]


def test_hand_worked_example():
    """Two watchers, constant costs; every number below is worked out by hand."""
    config = zero_config(storage_to_cache__latency=Constant(1.0),
                         storage_to_cache__service=Constant(0.5),
                         cacher_queue__service=Constant(0.1),
                         cacher_queue__per_watcher=Constant(0.2),
                         watcher_queue__service=Constant(0.3),
                         network__latency=Constant(2.0),
                         handler__service=Constant(4.0))
    watchers = [observer("a", "scheduler"), observer("b")]
    # write 0 at t=0 to both; write 1 at t=100us to a only; write 2 at t=200us to both
    rows = scan(config, watchers, [0, 100, 200], [[0, 1], [0], [0, 1]])
    # cached: 0+1000+500=1500; max(1100,1500)+500=2000; max(1200,2000)+500=2500
    # dispatched: 1500+100+400=2000; max(2000,2000)+100+200=2300; 2500+100+400=3000
    # a: sent 2300, 2600, 3300; received 4300, 4600, 5300; applied 8300, 12300, 16300
    # b: sent 2300, 3300; received 4300, 5300; applied 8300, 12300
    assert rows == [
        (0, 0, 0, 1500, 2000, 2300, 4300, 4300, 8300),
        (0, 1, 100, 2000, 2300, 2600, 4600, 8300, 12300),
        (0, 2, 200, 2500, 3000, 3300, 5300, 12300, 16300),
        (1, 0, 0, 1500, 2000, 2300, 4300, 4300, 8300),
        (1, 2, 200, 2500, 3000, 3300, 5300, 8300, 12300),
    ]


def test_a_stream_never_reorders():
    """A slow packet holds back the next one: received = max(sent + latency, previous)."""
    config = zero_config(network__latency=Empirical((10.0, 0.0), (1.0, 1.0)))
    rows = scan(config, [observer("a")], list(range(0, 4000, 100)),
                [[0]] * 40)
    received = [r[6] for r in rows]
    assert received == sorted(received)
    # some drew no latency but waited behind a slow one: neither 0 nor 10 ms after it was sent
    assert {r[6] - r[5] for r in rows} - {0, 10_000}


stage_keys = [f"{stage}__{param}" for stage, param in STAGE_PARAMS]
cases = st.fixed_dictionaries({
    "costs": st.fixed_dictionaries({k: distributions() for k in stage_keys}),
    "gaps": st.lists(st.integers(0, 3000), min_size=1, max_size=60),
    "own": st.lists(st.dictionaries(st.sampled_from(PER_WATCHER_PARAMS), distributions(),
                                    max_size=2), min_size=1, max_size=4),
    "seed": st.integers(0, 2**31),
    "data": st.data(),
})


def with_own_costs(index: int, own: dict) -> WatcherSpec:
    stages: dict = {}
    for (stage, param), dist in own.items():
        stages.setdefault(stage, {})[param] = dist
    return observer(f"w{index}", stages=stages)


@settings(max_examples=budget(100), deadline=None)
@given(cases)
def test_invariants_and_step_equals_scan(case):
    """The differential test: the vectorised scan (observe) and the step-by-step evaluation
    (the what-if engine) give every delivery the same times, whatever the distributions, zero
    stages and watchers' own costs."""
    config = zero_config(case["seed"], **case["costs"])
    watchers = [with_own_costs(i, own) for i, own in enumerate(case["own"])]
    commit = np.cumsum(case["gaps"]).tolist()
    targets = [case["data"].draw(st.lists(st.integers(0, len(watchers) - 1), unique=True))
               for _ in commit]
    targets = [sorted(t) for t in targets]
    rows = scan(config, watchers, commit, targets)

    # each watcher receives each matching write exactly once
    assert sorted((w, i) for w, i, *_ in rows) == sorted(
        (w, i) for i, t in enumerate(targets) for w in t)
    for _, i, *times in rows:
        assert times == sorted(times), "stage times must not decrease along a row"
        assert times[0] == commit[i]
    for w in range(len(watchers)):
        mine = [r for r in rows if r[0] == w]
        applied = [r[-1] for r in mine]
        assert applied == sorted(applied), "a watcher applies writes in commit order"
        assert [r[1] for r in mine] == sorted(r[1] for r in mine)

    pipeline = Pipeline(config, watchers)
    stepped = []
    for i, t in enumerate(targets):
        rv, cached, dispatched, deliveries = pipeline.step(commit[i], t)
        assert rv == i + 1
        stepped += [(w, i, commit[i], cached, dispatched, sent, received, dequeued, applied)
                    for w, _, _, sent, received, dequeued, applied, _, _ in deliveries]
    assert sorted(stepped) == sorted(rows)


def test_step_equals_scan_past_the_first_blocks_of_draws():
    """``step`` takes each stream's draws from blocks (the first 128 events 16 at a time, then
    blocks of 32, 64, ... 4,096): over thousands of events, across every block's end, they are
    the draws ``scan`` makes at once."""
    rng = np.random.default_rng(11)
    commit = np.cumsum(rng.integers(0, 3000, 3000)).tolist()
    targets = [sorted(set(rng.choice(2, rng.integers(1, 3)).tolist())) for _ in commit]
    costs = {"watcher_queue__service": Exponential(0.5), "network__latency": LogNormal(0.5, 5.0),
             "handler__service": Exponential(1.0)}
    watchers = [observer("a"), observer("b")]
    rows = scan(zero_config(5, **costs), watchers, commit, targets)
    pipeline = Pipeline(zero_config(5, **costs), watchers)
    stepped = []
    for i, t in enumerate(targets):
        _, cached, dispatched, deliveries = pipeline.step(commit[i], t)
        stepped += [(w, i, commit[i], cached, dispatched, *times)
                    for w, _, _, *times, _, _ in deliveries]
    assert sorted(stepped) == sorted(rows)


@pytest.mark.parametrize("cuts", [[0, 2000], [0, 700, 2000], [0, 1, 2, 399, 400, 1999, 2000],
                                  [0, 150, 300, 450, 600, 1200, 2000]])
def test_scanning_a_part_at_a_time_gives_the_same_times(cuts):
    """observe scans (and writes) the deliveries in parts, cut anywhere, even in the midst of a
    watcher's deliveries."""
    rng = np.random.default_rng(7)
    commit = np.cumsum(rng.integers(0, 3000, 1000))
    owner = np.sort(rng.integers(0, 3, 2000))
    write = np.concatenate([np.sort(rng.choice(1000, (owner == w).sum(), replace=False))
                            for w in range(3)])
    costs = {"watcher_queue__service": Exponential(0.5), "network__latency": LogNormal(0.5, 5.0),
             "handler__service": Exponential(1.0)}
    pipeline = Pipeline(zero_config(3, **costs), [observer(f"w{i}") for i in range(3)])
    whole = pipeline.scan(commit, write, owner)
    sizes = np.diff(cuts)
    for size in sorted(set(sizes.tolist())):  # parts of one size; the last may be shorter
        scan = Scan(pipeline, commit, write, owner, part=int(size))
        parts = list(scan.parts())
        for column in STAGE_COLUMNS:
            assert np.concatenate([p[column] for p in parts]).tolist() == whole[column].tolist()


def test_zero_cost_pipeline_applies_at_commit():
    watchers = [observer(f"w{i}") for i in range(3)]
    commit = list(range(0, 5000, 7))
    rows = scan(zero_config(), watchers, commit, [[0, 1, 2]] * len(commit))
    assert all(len(set(r[2:])) == 1 for r in rows)


def test_same_seed_same_draws_other_seed_other_draws():
    costs = {"network__latency": LogNormal(0.5, 5.0), "handler__service": Exponential(0.1)}
    args = ([observer("a")], list(range(0, 10**6, 1000)), [[0]] * 1000)
    assert scan(zero_config(1, **costs), *args) == scan(zero_config(1, **costs), *args)
    assert scan(zero_config(1, **costs), *args) != scan(zero_config(2, **costs), *args)


def test_another_watcher_does_not_change_my_draws():
    costs = {"network__latency": LogNormal(0.5, 5.0)}
    commit = list(range(0, 10**6, 1000))
    alone = scan(zero_config(3, **costs), [observer("a")], commit, [[0]] * 1000)
    crowd = scan(zero_config(3, **costs), [observer("a"),
                                           observer("b")], commit,
                 [[0, 1]] * 1000)
    assert alone == [r for r in crowd if r[0] == 0]


def client_queue_wait_ms(service, queue=ClientQueue.FIFO, rate_per_s=100.0, n=200_000, seed=5):
    """Mean wait in the client queue of one watcher whose only cost is its handler (each event
    of another object: every client queue is then the same queue)."""
    gaps = np.random.default_rng(seed).exponential(1e6 / rate_per_s, n)
    commit = np.cumsum(np.rint(gaps)).astype(np.int64)
    config = zero_config(seed, handler__service=service)
    times = Pipeline(config, [observer("a", client_queue=queue)]).scan(
        commit, np.arange(n), np.zeros(n, dtype=np.int64))
    return float(np.mean(times["dequeued_ts"] - times["received_ts"])) / 1000


@pytest.mark.parametrize("queue", list(ClientQueue))
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm1_wait_matches_theory(rho, queue):
    """M/M/1: Wq = rho / (mu - lambda); 200k events at rate 100/s, tolerance 5%."""
    lam = 100.0
    mu = lam / rho
    expected_ms = rho / (mu - lam) * 1000
    assert client_queue_wait_ms(Exponential(1000 / mu), queue) == pytest.approx(expected_ms,
                                                                               rel=0.05)


@pytest.mark.parametrize("queue", list(ClientQueue))
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_wait_matches_theory(rho, queue):
    """M/D/1: Wq = rho / (2 mu (1 - rho)); 200k events at rate 100/s, tolerance 3%."""
    lam = 100.0
    mu = lam / rho
    expected_ms = rho / (2 * mu * (1 - rho)) * 1000
    assert client_queue_wait_ms(Constant(1000 / mu), queue) == pytest.approx(expected_ms,
                                                                            rel=0.03)


def test_mg1_wait_matches_pollaczek_khinchine():
    """M/G/1 with lognormal service (median 4 ms, p99 20 ms; rho = 0.51): Wq = lambda E[S^2] /
    (2 (1 - rho)) = 4.2 ms; 200k events at rate 100/s, tolerance 5% (seeds 5 to 11 land
    within 2.5%: the heavy tail converges more slowly than M/M/1's)."""
    service = LogNormal(4.0, 20.0)
    sigma = math.log(20.0 / 4.0) / Z99
    mean_ms, square_ms = 4.0 * math.exp(sigma**2 / 2), 16.0 * math.exp(2 * sigma**2)
    lam = 0.1  # per ms
    expected_ms = lam * square_ms / (2 * (1 - lam * mean_ms))
    assert client_queue_wait_ms(service) == pytest.approx(expected_ms, rel=0.05)


def test_cacher_cost_grows_with_the_matching_watchers():
    """The watch cache's dispatch loop spends its service time plus per_watcher for each
    watcher the write matches: writes far apart wait for nothing else."""
    config = zero_config(cacher_queue__service=Constant(0.005),
                         cacher_queue__per_watcher=Constant(0.01))
    watchers = [WatcherSpec(f"w{i}", "observer") for i in range(5)]
    targets = [list(range(k)) for k in range(1, 6)]
    rows = scan(config, watchers, [i * 1000 for i in range(5)], targets)
    cacher_us = {i: dispatched - cached for _, i, _, cached, dispatched, *_ in rows}
    assert cacher_us == {k - 1: 5 + 10 * k for k in range(1, 6)}


def test_view_lag_is_the_age_of_the_oldest_unapplied_write():
    commit = np.array([0, 10, 20, 30])
    applied = np.array([5, 25, 26, 50])
    at = np.array([0, 4, 5, 12, 24, 25, 26, 29, 31, 60])
    # t=4: write 0 committed, not applied -> 4; t=12: write 1 (10) pending -> 2
    # t=24: write 1 pending -> 14; t=25: write 2 (20) pending -> 5
    # t=26: all applied and write 3 not yet committed -> 0; t=31: write 3 pending -> 1
    assert view_lag_us(commit, applied, at).tolist() == [0, 4, 0, 2, 14, 5, 0, 0, 1, 0]


@given(st.lists(st.tuples(st.sampled_from(["pods", "nodes", "leases"]), st.integers(-1, 2),
                          st.booleans()), max_size=40),
       st.lists(st.tuples(st.sampled_from([("pods",), ("nodes",), ("pods", "nodes")]),
                          st.none() | st.sampled_from(["n0", "n1", "n2"]),
                          st.sampled_from(["scheduler", "kubelet", "observer"])),
                min_size=1, max_size=6))
def test_match_delivers_what_each_watcher_receives(writes, specs):
    """``match`` against ``receives``, write by write: watchers of the whole cluster only (their
    runs joined in stream order, unsorted) and mixed with node-bound ones (sorted after); a
    scheduler's watch of pods (non-terminal pods only) without the writes of ended pods."""
    watchers = [WatcherSpec(f"w{i}", role, resources, node=node)
                for i, (resources, node, role) in enumerate(specs)]
    streams = Streams(watchers, ["pods", "nodes", "leases"])
    resource = np.array([streams.code[r] for r, _, _ in writes], dtype=np.int64)
    nodes = watched_nodes(watchers)
    node = np.array([n if n < len(nodes) else -1 for _, n, _ in writes], dtype=np.int64)
    ended = np.array([r == "pods" and e for r, _, e in writes], dtype=bool)
    write, stream = match(streams, resource, node, ended)
    expected = sorted(
        (s, i) for s in range(len(streams)) for i, (r, n, _) in enumerate(writes)
        if streams.resources[streams.resource[s]] == r
        and receives(watchers[streams.watcher[s]], r, nodes[node[i]] if node[i] >= 0 else None,
                     bool(ended[i])))
    assert list(zip(stream.tolist(), write.tolist())) == expected
    assert write.dtype == np.int64 and stream.dtype == np.int32
