"""The what-if engine's compiled fan-out (``fanoutkernel``) against ``_Watch``'s Python path: the
same writes give the same deliveries, in the same order, the same incidents, and the same state
of every stream, whichever path each write (or each target) takes.  And the replay's hand-over of
a write the fan-out delivered to every target, from its arrays (``Pipeline.step_fanned``), against
the hand-over of the same deliveries as tuples: the same tables."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import synth_specs
from test_watch_pipeline import Writes, cases, config, costs_of, watcher

from replay import models
from replay.engine import pipeline as engine_module
from replay.engine import simulation
from replay.engine.config import ClientQueue, ServerSettings, load_config
from replay.engine.distributions import Exponential
from replay.engine.pipeline import Pipeline
from replay.engine.streamstate import CONNECTED, FRONT, ROW
from replay.trace.synth import SynthSpec, synthesize
from replay.trace.validate import read_trace
from conftest import budget

MS = 1000


def run(pipeline: Pipeline, writes: Writes, compiled: bool, states: list | None = None):
    """The writes one at a time, every target by ``_Watch`` unless ``compiled``: every delivery
    in the order made, each write's times and pending watchers, and the incident tables; with
    ``states``, every stream's state after each write (each stream handed to the Python path
    and back, as the engine does when a target leaves the common case)."""
    engine = pipeline._engine = engine_module._Engine(pipeline, pipeline._last_rv_before,
                                                      compiled)
    out, steps = [], []
    for i, commit in enumerate(writes.commit):
        out += pipeline.advance(commit)
        _, cached, dispatched, deliveries = pipeline.step(
            commit, writes.targets[i], writes.resource[i], writes.key[i], writes.deleted[i])
        out += deliveries
        steps.append((cached, dispatched, list(pipeline.pending)))
        if states is not None:
            states.append([state(engine, watch) for watch in engine.watches])
    out += pipeline.finish()
    return out, steps, pipeline.incidents()


def state(engine, watch) -> tuple:
    """A stream's state as the Python path sees it (the stream handed back afterwards)."""
    watch.to_python()
    draws = watch.event_draws
    position = draws.position()
    draws.resume(position)
    seen = (watch.last_sent, watch.last_received, watch.live, watch.front, watch.last_rv,
            watch.fifo.last if watch.fifo else None, list(watch.recent),
            list(watch.recent_result), position, draws.drawn, watch.connected,
            list(watch.held), sorted(watch.known),
            # what the compiled fan-out reads of every stream to find whether a write blocks
            int(engine.state[watch.index, FRONT]), bool(engine.state[watch.index, CONNECTED]))
    watch.to_kernel()
    return seen


def same(a, b) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    for name, table in a[2].items():
        assert b[2][name].equals(table), name


@settings(max_examples=budget(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases)
def test_the_compiled_fan_out_is_the_python_path(case):
    """Random loads, buffers, budgets, windows and client queues (``test_watch_pipeline``'s
    cases): blocked dispatchers, held events, terminations, re-watches and re-lists, each
    target by the compiled fan-out or by ``_Watch``, give what ``_Watch`` alone gives; and every
    stream's state, handed from one path to the other after every write, is the same."""
    costs = costs_of(case)
    watchers = [watcher(f"w{i}", ("pods",), case["queues"][i],
                        watcher_queue__service=case["slow"][i])
                for i in range(case["watchers"])]
    data = case["data"]
    commit = np.cumsum(case["gaps"]).tolist()
    everyone = list(range(case["watchers"]))
    targets = [data.draw(st.permutations(everyone))[:data.draw(st.integers(0, len(everyone)))]
               for _ in commit]
    keys = [data.draw(st.integers(0, case["keys"] - 1)) for _ in commit]
    deleted = [data.draw(st.booleans()) for _ in commit]
    writes = Writes(commit, targets, [0] * len(commit), keys, deleted)
    python_states: list = []
    compiled_states: list = []
    by_python = run(Pipeline(costs, watchers), writes, False, python_states)
    same(run(Pipeline(costs, watchers), writes, True), by_python)
    same(run(Pipeline(costs, watchers), writes, True, compiled_states), by_python)
    assert compiled_states == python_states


def test_both_paths_and_the_refills_are_taken(monkeypatch):
    """A fast watcher, a slow one with the smallest buffer and one with a DeltaFIFO, more than a
    row of draws each: many writes go by the compiled fan-out alone, others in part (the slow
    watcher's held events, the DeltaFIFO's, by ``_Watch``), some block the dispatcher, the
    used-up rows are refilled, and the deliveries are ``_Watch``'s alone."""
    calls: Counter[str] = Counter()
    for name in ("_delivered", "_fall_back", "_refill", "_blocking_step"):
        method = getattr(engine_module._Engine, name)
        monkeypatch.setattr(engine_module._Engine, name,
                            lambda self, *a, _m=method, _n=name: (calls.update([_n]),
                                                                   _m(self, *a))[1])
    server = ServerSettings(buffer=1, timeout_budget_ms=1000.0)
    costs = config(3, server, network__latency=Exponential(0.5))
    watchers = [watcher("fast"), watcher("slow", watcher_queue__service=Exponential(0.9)),
                watcher("queued", queue=ClientQueue.DELTA_FIFO)]
    n = 3 * ROW
    writes = Writes([t * MS for t in range(n)], [[0, 1, 2], [0, 1]] * (n // 2),
                    key=[t % 5 for t in range(n)], deleted=[t % 7 == 6 for t in range(n)])
    compiled = run(Pipeline(costs, watchers), writes, True)
    assert all(calls.values()) and len(calls) == 4, calls
    same(compiled, run(Pipeline(costs, watchers), writes, False))


def test_observes_evaluation_by_event_does_not_use_the_compiled_fan_out():
    """Observe's scan evaluates a resource with a full buffer again event by event, by
    ``_Watch`` alone: the compiled fan-out (``fanoutkernel``) and its per-write arrays are the
    what-if replays'.  (numba itself is the scan's too: its FIFO scans are compiled loops.)"""
    script = """
import sys
from test_watch_pipeline import MS, Writes, blocking_pipeline, scanned
pipeline = blocking_pipeline()
scanned(pipeline, Writes([t * MS for t in range(6)], [[0, 1]] * 6))
assert pipeline.scanned.fixed, "evaluated again event by event"
assert "replay.engine.fanoutkernel" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", script], check=True,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join(
                       [str(Path(__file__).parent), *sys.path])})


def replayed(trace_path: Path, model: str, seed: int, stressed: bool, by_tuples: bool,
             monkeypatch) -> list[tuple[str, pa.Table]]:
    """A what-if replay's tables; ``stressed``: the second watcher with the smallest buffer and
    a slow watcher queue, the last behind a DeltaFIFO (so that some writes leave the compiled
    fan-out's common case, and others not); ``by_tuples``: every write's deliveries handed
    over as tuples."""
    with monkeypatch.context() as patch:
        if by_tuples:
            patch.setattr(Pipeline, "step_fanned", _step_by_tuples)
        trace = read_trace(trace_path)
        config = load_config(model=model, seed=seed)
        replaying = models.load(model)(config.model_params)
        watchers = replaying.default_watchers(trace)
        if stressed:
            watchers[1] = dataclasses.replace(
                watchers[1], buffer=1, stages={"watcher_queue": {"service": Exponential(2.0)}})
            watchers[-1] = dataclasses.replace(watchers[-1], client_queue=ClientQueue.DELTA_FIFO)
        return [(name, table.to_arrow() if not isinstance(table, pa.Table) else table)
                for name, table in replaying.tables(trace, config, watchers)]


_step_fanned = Pipeline.step_fanned


def _step_by_tuples(self, commit, watches, resource=0, key=None, deleted=False, payload=None,
                    ends=False):
    """``step_fanned`` that hands every delivery back as a tuple (``step_to``'s)."""
    rv, cached, dispatched, out, fanned = _step_fanned(self, commit, watches, resource, key,
                                                       deleted, payload, ends)
    if fanned:
        out += watches.deliveries(rv, payload)
    return rv, cached, dispatched, out, False


@settings(max_examples=budget(25), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(spec=synth_specs(), model=st.sampled_from(["godel", "peer", "kube", "omega"]),
       seed=st.integers(0, 3), stressed=st.booleans())
def test_the_fanned_hand_over_is_the_tuples(tmp_path_factory, monkeypatch, spec, model, seed,
                                            stressed):
    """Random workloads through the models, with and without watches that leave the compiled
    fan-out's common case: the tables are the same whether a write the fan-out delivered to
    every target is handed to the log, the views and the reactions from its arrays or as
    tuples."""
    path = tmp_path_factory.mktemp("fanned") / "trace.parquet"
    synthesize(spec, path)
    fanned = replayed(path, model, seed, stressed, False, monkeypatch)
    assert fanned == replayed(path, model, seed, stressed, True, monkeypatch)


def test_both_hand_overs_are_taken(tmp_path, monkeypatch):
    """A Gödel replay with watches that leave the common case: writes go both ways, by arrays
    and by tuples (the check that the test above compares two paths)."""
    path = tmp_path / "trace.parquet"
    synthesize(SynthSpec(nodes=3, pods=60, arrival_rate=200.0, seed=1), path)
    calls: Counter[str] = Counter()
    for name in ("_hand_over", "_hand_over_fanned"):
        method = getattr(simulation.Simulation, name)
        monkeypatch.setattr(simulation.Simulation, name,
                            lambda self, a, b, *c, _m=method, _n=name: (
                                calls.update([_n] if _n == "_hand_over_fanned" or a else []),
                                _m(self, a, b, *c))[1])
    replayed(path, "godel", 0, True, False, monkeypatch)
    assert calls["_hand_over"] and calls["_hand_over_fanned"], calls


@settings(max_examples=budget(80), deadline=None)
@given(st.data())
def test_the_stores_are_a_set_per_watch(data):
    """What each watch's client store holds (``_Watch.known``: a bit in its resource's
    ``holders``, or a node's watch's ``own`` set), changed by one event at a time
    (``_Watch.store``), by a write the compiled fan-out delivered to every target at once
    (``_Engine._delivered``: one mask, the node watches' sets; the targets made before re-lists
    and kept, as a replay keeps them; a write setting a pod's terminal phase deletes it from a
    scheduler's watch only) and by re-lists (``relisted``): a plain set per watch."""
    watchers = [dataclasses.replace(watcher(f"w{i}"), node=f"n{i}" if i % 3 == 2 else None,
                                    role="scheduler" if i % 2 else "observer")
                for i in range(6)]
    pipeline = Pipeline(config(), watchers)
    code = pipeline.resource_code("pods")
    everyone = range(len(watchers))
    watches = list(pipeline.watches(code, everyone))
    engine = pipeline._engine
    assert sorted(bool(w.bit) for w in watches) == [False] * 2 + [True] * 4
    subsets = [pipeline.watches(code, data.draw(st.permutations(everyone))[:k])
               for k in range(len(watchers) + 1)]
    plain: list[set[int]] = [set() for _ in watches]
    for _ in range(data.draw(st.integers(0, 80))):
        key, deleted = data.draw(st.integers(0, 7)), data.draw(st.booleans())
        ends = not deleted and data.draw(st.booleans())
        what = data.draw(st.sampled_from(["event", "fanned", "relist"]))
        if what == "event":
            j = data.draw(st.sampled_from(everyone))
            watches[j].store(key, deleted)
            changed = [j]
        elif what == "fanned":
            targets = data.draw(st.sampled_from(subsets))
            engine._delivered(engine.resources[code], key, deleted, targets, ends)
            changed = [watches.index(w) for w in targets]
        else:
            j = data.draw(st.sampled_from(everyone))
            listed = sorted(data.draw(st.sets(st.integers(0, 7))))
            watches[j].relisted(listed, sorted(watches[j].known.difference(listed)))
            plain[j] = set(listed)
            changed = []
        for j in changed:
            gone = deleted or (what == "fanned" and ends and watchers[j].role == "scheduler")
            (plain[j].discard if gone else plain[j].add)(key)
        assert [w.known for w in watches] == plain
