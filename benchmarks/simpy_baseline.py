"""The observe pipeline written by hand in SimPy, checked against ``replay run``, then timed.

    python benchmarks/simpy_baseline.py [TRACE] [--config FILE.toml] [--check-only]

This is what a researcher without ``replay`` would write: one SimPy process per queue (each
resource's watch cache and dispatcher, and each watch's sender, network and informer handler),
connected by unbounded ``simpy.Store``s.  It replays the writes of an observe run of TRACE
(without TRACE: the 1M-pod trace of ``observe.py``) and checks, delivery by delivery, that its
seven stage times equal the run's ``deliveries`` table; then it prints both engines' deliveries
per second and their ratio.  It draws every stage's delays from replay's own named random streams
(``replay.rng.Stream``, with the same counters: the write's rv for the shared stages, the event's
place in its watch for the per-watch ones), so the comparison is exact, not statistical.

What it leaves out: the mechanisms under load (bounded buffers that block the dispatcher,
terminations, re-watches, re-lists; docs/watch-pipeline.md) and client queues other than
``fifo``.  Its buffers never fill, so it is exact only for runs in which no dispatcher waits:
the check refuses a run with ``dispatch_waits`` rows.  SimPy could express a bounded buffer
(a ``Store`` with a capacity), but not upstream's dispatcher (a time budget shared by the
resource's watches, and terminating the watches still full at its deadline) without writing the
event-by-event engine again by hand.

Timing: replay's figure is ``replay run``'s whole replay step (reading the trace, the pipeline,
writing the run directory's tables; not the derivation that follows); SimPy's is building the
processes and running them, with the delays drawn beforehand by numpy and not counted (a
generous choice for SimPy).  The last line is a JSON record for ``run_all.py``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from common import big_trace, emit
from replay.api import run_replay
from replay.engine.config import STAGES, ClientQueue, RunConfig, WatcherSpec, load_config
from replay.models.observe import ObserveModel
from replay.rng import Stream, name_hash
from replay.trace.validate import read_trace

SHARED = [(stage, param) for stage in ("storage_to_cache", "cacher_queue")
          for param in STAGES[stage]]
PER_WATCH = (("watcher_queue", "service"), ("network", "latency"), ("handler", "service"))
COLUMNS = ("commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts", "dequeued_ts",
           "applied_ts")


@dataclass
class Writes:
    """The writes of an observe run and who received each, with every delay drawn.

    Per write (row = rv - 1): ``commit``, ``resource`` (an index into ``resources``) and the
    four shared draws.  Per delivery (in the run's row order): ``write`` and ``stream``; per
    stream, its watcher and resource and its three per-event draws, in the stream's order."""

    resources: list[str]
    commit: np.ndarray
    resource: np.ndarray
    shared: dict[tuple[str, str], np.ndarray]
    write: np.ndarray
    stream: np.ndarray
    stream_rows: list[np.ndarray]  # per stream, its deliveries in rv order
    per_watch: list[dict[tuple[str, str], np.ndarray]]

    @property
    def deliveries(self) -> int:
        return len(self.write)


def watcher_specs(trace: Path, config: RunConfig) -> dict[str, WatcherSpec]:
    """The run's watchers by name, as ``replay run`` chooses them."""
    watchers = config.watchers
    if watchers is None:
        watchers = ObserveModel(config.model_params).default_watchers(read_trace(trace))
    return {w.name: w for w in watchers}


def load_writes(run_dir: Path, specs: dict[str, WatcherSpec], config: RunConfig) -> Writes:
    """The writes and deliveries of ``run_dir`` (not their times), with their delays drawn from
    replay's named streams."""
    events = pl.read_parquet(run_dir / "events.parquet", columns=["rv", "commit_ts", "resource"])
    assert (events["rv"].to_numpy() == np.arange(1, events.height + 1)).all()
    resources = sorted(events["resource"].unique().to_list())
    commit = events["commit_ts"].dt.epoch("us").to_numpy()
    resource = events["resource"].cast(pl.Enum(resources)).to_physical().to_numpy().astype(np.int64)
    rv = np.arange(1, len(commit) + 1, dtype=np.uint64)
    shared = {key: np.zeros(len(commit), dtype=np.int64) for key in SHARED}
    for code, name in enumerate(resources):
        mine = np.flatnonzero(resource == code)
        costs = config.costs(resource=name)
        for stage, param in SHARED:
            stream = Stream.of(config.seed, stage, param)
            shared[stage, param][mine] = costs[stage][param].sample_us(stream, rv[mine])

    deliveries = pl.read_parquet(run_dir / "deliveries.parquet", columns=["rv", "watcher"])
    names = deliveries["watcher"].cast(pl.String)
    watchers = sorted(names.unique().to_list())
    write = deliveries["rv"].to_numpy() - 1
    watcher = names.cast(pl.Enum(watchers)).to_physical().to_numpy().astype(np.int64)
    pair = watcher * len(resources) + resource[write]
    pairs, stream = np.unique(pair, return_inverse=True)
    order = np.lexsort((write, stream))
    bounds = np.searchsorted(stream[order], np.arange(len(pairs) + 1))
    stream_rows, per_watch = [], []
    for s, p in enumerate(pairs.tolist()):
        spec, name = specs[watchers[p // len(resources)]], resources[p % len(resources)]
        if spec.client_queue != ClientQueue.FIFO:
            raise SystemExit(f"{spec.name}: client_queue {spec.client_queue.value}: this "
                             f"baseline models fifo client queues only")
        rows = order[bounds[s]:bounds[s + 1]]
        stream_rows.append(rows)
        counters = np.arange(len(rows), dtype=np.uint64)
        costs = config.costs(spec, name)
        draws = {}
        for stage, param in PER_WATCH:
            rng = Stream.of(config.seed, stage, param)
            keys = rng.watcher_keys(np.uint64(name_hash(f"{name}\x00{spec.name}")))
            draws[stage, param] = costs[stage][param].sample_us(rng, counters, keys)
        per_watch.append(draws)
    return Writes(resources, commit, resource, shared, write, stream, stream_rows, per_watch)


def simulate(writes: Writes) -> dict[str, np.ndarray]:
    """Every delivery's stage times (``COLUMNS``, in the deliveries' row order), by SimPy."""
    import simpy

    env = simpy.Environment(initial_time=int(writes.commit[0]) if len(writes.commit) else 0)
    n = writes.deliveries
    out = {c: np.zeros(n, dtype=np.int64) for c in COLUMNS[3:]}
    cached = np.zeros(len(writes.commit), dtype=np.int64)
    dispatched = np.zeros(len(writes.commit), dtype=np.int64)
    latency, service = (writes.shared["storage_to_cache", p].tolist() for p in STAGES["storage_to_cache"])
    cacher, per_watcher = (writes.shared["cacher_queue", p].tolist() for p in STAGES["cacher_queue"])
    commit = writes.commit.tolist()
    by_write = np.argsort(writes.write, kind="stable")
    fan_bounds = np.searchsorted(writes.write[by_write], np.arange(len(commit) + 1)).tolist()
    fan_out = writes.stream[by_write].tolist()
    fan_rows = by_write.tolist()
    inboxes = [simpy.Store(env) for _ in writes.stream_rows]

    def api_server(i_writes: list[int]):
        """etcd's watch of one resource: each committed write, at its commit."""
        etcd, queue = simpy.Store(env), simpy.Store(env)
        env.process(watch_cache(etcd, queue))
        env.process(dispatcher(queue))
        for i in i_writes:
            if commit[i] > env.now:
                yield env.timeout(commit[i] - env.now)
            etcd.put(i)

    def watch_cache(etcd, queue):
        """storage_to_cache: the event reaches the cache after its latency, then is served."""
        while True:
            i = yield etcd.get()
            arrival = commit[i] + latency[i]
            if arrival > env.now:
                yield env.timeout(arrival - env.now)
            yield env.timeout(service[i])
            cached[i] = env.now
            queue.put(i)

    def dispatcher(queue):
        """cacher_queue: one event at a time, to every watch it matches."""
        while True:
            i = yield queue.get()
            lo, hi = fan_bounds[i], fan_bounds[i + 1]
            yield env.timeout(cacher[i] + per_watcher[i] * (hi - lo))
            dispatched[i] = env.now
            for k in range(lo, hi):
                inboxes[fan_out[k]].put(fan_rows[k])

    def sender(inbox, wire, draws):
        """watcher_queue: the watch's buffer and the HTTP handler writing to the connection."""
        serve, sent = draws["watcher_queue", "service"].tolist(), out["sent_ts"]
        k = 0
        while True:
            row = yield inbox.get()
            yield env.timeout(serve[k])
            sent[row] = env.now
            wire.put((row, k))
            k += 1

    def network(wire, client, draws):
        """network: each event's latency; the connection never reorders."""
        lag, sent, received = draws["network", "latency"].tolist(), out["sent_ts"], out["received_ts"]
        while True:
            row, k = yield wire.get()
            arrival = int(sent[row]) + lag[k]
            if arrival > env.now:
                yield env.timeout(arrival - env.now)
            received[row] = env.now
            client.put((row, k))

    def informer(client, draws):
        """client_queue (fifo) and handler: one event at a time."""
        handle = draws["handler", "service"].tolist()
        dequeued, applied = out["dequeued_ts"], out["applied_ts"]
        while True:
            row, k = yield client.get()
            dequeued[row] = env.now
            yield env.timeout(handle[k])
            applied[row] = env.now

    for s, draws in enumerate(writes.per_watch):
        wire, client = simpy.Store(env), simpy.Store(env)
        env.process(sender(inboxes[s], wire, draws))
        env.process(network(wire, client, draws))
        env.process(informer(client, draws))
    for code in range(len(writes.resources)):
        env.process(api_server(np.flatnonzero(writes.resource == code).tolist()))
    env.run()
    return {"commit_ts": writes.commit[writes.write], "cached_ts": cached[writes.write],
            "dispatched_ts": dispatched[writes.write], **out}


def differences(run_dir: Path, times: dict[str, np.ndarray]) -> dict[str, int]:
    """Per stage column, how many deliveries' times differ from the run's (all 0: equal)."""
    table = pl.read_parquet(run_dir / "deliveries.parquet", columns=list(COLUMNS))
    return {c: int((table[c].dt.epoch("us").to_numpy() != times[c]).sum()) for c in COLUMNS}


def dispatch_waits(run_dir: Path) -> int:
    return pl.read_parquet(run_dir / "dispatch_waits.parquet").height


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path)
    parser.add_argument("--config", type=Path, help="run config (default: the default profile)")
    parser.add_argument("--check-only", action="store_true",
                        help="check equality and stop (no timing figures)")
    args = parser.parse_args(argv)
    trace = args.trace or big_trace()
    config = load_config(args.config, model="observe")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        result = run_replay(trace, config, out=run_dir)
        if dispatch_waits(run_dir):
            print(f"{trace}: a dispatcher waited on a full buffer in this run: the baseline's "
                  f"buffers never fill, so it cannot reproduce it", file=sys.stderr)
            return 2
        drawn = time.perf_counter()
        writes = load_writes(run_dir, watcher_specs(trace, config), config)
        drawn = time.perf_counter() - drawn
        started, cpu = time.perf_counter(), time.process_time()
        times = simulate(writes)
        simpy_s, simpy_cpu = time.perf_counter() - started, time.process_time() - cpu
        wrong = differences(run_dir, times)
    n, replay_s = writes.deliveries, result.seconds["replay"]
    if any(wrong.values()):
        print(f"MISMATCH: deliveries whose time differs from replay's, per stage: {wrong}",
              file=sys.stderr)
        return 1
    print(f"equal: SimPy gives replay's seven stage times for all {n:,} deliveries "
          f"({len(writes.commit):,} writes, {len(writes.stream_rows):,} watches)")
    if args.check_only:
        return 0
    ratio = simpy_s / replay_s
    print(f"replay (observe, whole replay step): {replay_s:.2f} s, {n / replay_s:,.0f} deliveries/s")
    print(f"SimPy (processes and stores, delays drawn beforehand in {drawn:.2f} s, not counted): "
          f"{simpy_s:.2f} s ({simpy_cpu:.2f} s CPU), {n / simpy_s:,.0f} deliveries/s")
    print(f"replay is {ratio:.1f}x as fast as the SimPy baseline")
    emit(deliveries=n, writes=len(writes.commit), replay_s=replay_s, simpy_s=simpy_s,
         simpy_cpu_s=simpy_cpu, replay_deliveries_per_s=n / replay_s,
         simpy_deliveries_per_s=n / simpy_s, ratio=ratio)
    return 0


if __name__ == "__main__":
    sys.exit(main())
