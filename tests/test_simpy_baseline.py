"""The SimPy baseline (benchmarks/simpy_baseline.py) gives replay's delivery times exactly.

The baseline is the observe pipeline written by hand in SimPy; the speed comparison of issue 17
means something only if both compute the same thing.  Needs the ``bench`` extra (SimPy): skipped
without it, run by .ci/run's bench stage.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from replay.api import run_replay
from replay.engine.config import load_config
from replay.trace.synth import SynthSpec, synthesize

from conftest import REPO

pytest.importorskip("simpy")
sys.path.insert(0, str(REPO / "benchmarks"))
import simpy_baseline  # noqa: E402

# Every stage random, queues that build up (services near the arrival gaps), a resource's own
# costs and a watcher's own; buffers that never fill (the baseline has no bounded buffers).
BUSY = """seed = 11
[stages.storage_to_cache]
latency = { dist = "lognormal", median_ms = 0.5, p99_ms = 8.0 }
service = { dist = "exponential", mean_ms = 2.0 }
[stages.cacher_queue]
service = { dist = "exponential", mean_ms = 1.0 }
per_watcher = { dist = "uniform", low_ms = 0.1, high_ms = 0.9 }
[stages.watcher_queue]
service = { dist = "exponential", mean_ms = 3.0 }
buffer = 100000
[stages.network]
latency = { dist = "lognormal", median_ms = 2.0, p99_ms = 40.0 }
[stages.handler]
service = { dist = "exponential", mean_ms = 4.0 }
[resources.pods.stages.storage_to_cache]
service = { dist = "exponential", mean_ms = 3.0 }

[[watchers]]
name = "scheduler"
role = "scheduler"
replicas = 2

[[watchers]]
name = "slow-binder"
role = "binder"
[watchers.stages.handler]
service = { dist = "exponential", mean_ms = 15.0 }

[[watchers]]
name = "kubelet/node-1"
role = "kubelet"
node = "node-1"
"""


@pytest.fixture(scope="module")
def busy_run(tmp_path_factory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("simpy")
    trace = tmp / "trace.parquet"
    synthesize(SynthSpec(nodes=10, pods=300, arrival_rate=50.0, mean_lifetime=5.0,
                         bind="least-allocated", heartbeat_interval=1.0, seed=3), trace)
    config = tmp / "busy.toml"
    config.write_text(BUSY)
    run_dir = tmp / "run"
    run_replay(trace, load_config(config, model="observe"), out=run_dir)
    return trace, config, run_dir


def baseline_times(trace: Path, config_path: Path, run_dir: Path):
    config = load_config(config_path, model="observe")
    writes = simpy_baseline.load_writes(run_dir, simpy_baseline.watcher_specs(trace, config),
                                        config)
    return writes, simpy_baseline.simulate(writes)


def test_simpy_gives_replays_delivery_times(busy_run):
    trace, config, run_dir = busy_run
    writes, times = baseline_times(trace, config, run_dir)
    assert writes.deliveries > 3000 and len(writes.stream_rows) == 8  # 4 watchers x 2 resources
    assert simpy_baseline.differences(run_dir, times) == dict.fromkeys(simpy_baseline.COLUMNS, 0)
    queued = times["dequeued_ts"] > times["received_ts"]  # the handlers' queues did build up
    assert queued.mean() > 0.2


def test_a_changed_delay_is_caught(busy_run):
    """The comparison can fail: one write's cache latency 50 ms longer delays it and the writes
    queued behind it at every stage."""
    trace, config, run_dir = busy_run
    writes, _ = baseline_times(trace, config, run_dir)
    writes.shared["storage_to_cache", "latency"][100] += 50_000
    wrong = simpy_baseline.differences(run_dir, simpy_baseline.simulate(writes))
    assert wrong["commit_ts"] == 0
    assert all(wrong[c] > 0 for c in simpy_baseline.COLUMNS[1:]), wrong


def test_the_command_checks_then_times(busy_run, capsys):
    trace, config, _ = busy_run
    assert simpy_baseline.main([str(trace), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "equal: SimPy gives replay's seven stage times" in out and '"ratio"' in out
