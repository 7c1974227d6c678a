"""Every registered model keeps every invariant of ``replay check`` on random workloads.

The models are the built-ins, anything installed, and ``tiny``, a plugin model written here as a
user would write one and registered through an entry point.  Each example replays a random
workload (tests/strategies.py) through one model with random parameters and a random pipeline,
then checks the run directory; a failure prints the invariant and the rows that break it.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay import models
from replay.analysis.check import check_run, failed
from replay.api import run_replay
from replay.engine.cluster import POD_BIND, POD_CREATE
from replay.engine.config import WatcherSpec
from replay.models.base import Param
from replay.models.whatif import WhatIfModel
from replay.trace.validate import read_trace

from conftest import budget
from strategies import model_params, pipelines, rows_to_trace, workloads

TINY = "tiny"


class TinyModel(WhatIfModel):
    """A plugin: one scheduler binding each pod to the node with the most free cpu in its view
    after ``think_ms``, trying a pod that fits nowhere three times, 5 ms apart."""

    name = TINY
    description = "One scheduler binding each pod to the emptiest node of its view."
    params = (Param("think_ms", 1.0, "time to decide one pod", minimum=0),)

    def components(self):
        return [WatcherSpec(TINY, "scheduler", ("pods", "nodes"))]

    def start(self, sim):
        self.sim, self.view = sim, sim.view(TINY)
        self.assumed = {}
        self.view.on_forget = self.forgotten
        sim.react(TINY, {POD_CREATE}, lambda write: self.schedule(write.pod, sim.env.now, 3))

    def forgotten(self, pod, now):
        attempt = self.assumed.pop(pod, None)
        if attempt is not None:
            attempt.forgotten = now

    def schedule(self, pod, enqueued, tries):
        sim = self.sim
        if not pod.pending:
            return
        self.view.sync(sim.env.now)
        fits = [n for n in range(len(sim.truth.nodes)) if self.view.fits(n, pod.request)]
        node = max(fits, key=lambda n: (int(self.view.free[0, n]), -n)) if fits else -1
        attempt = sim.new_attempt(pod, TINY, enqueued, sim.env.now, node, 0)
        sim.env.after(round(self.settings["think_ms"] * 1000), self.decide, attempt, tries)

    def decide(self, attempt, tries):
        sim, pod = self.sim, attempt.pod
        attempt.decided = sim.env.now
        if not pod.pending:
            sim.settle(attempt, "error", "pod_deleted")
        elif attempt.node < 0:
            attempt.committed = sim.env.now
            sim.settle(attempt, "unschedulable", "no_fit")
            if tries > 1:
                sim.env.after(5000, self.schedule, pod, sim.env.now, tries - 1)
        else:
            self.view.assume(pod, attempt.node)
            self.assumed[pod] = attempt
            sim.commit(POD_BIND, pod, TINY, node=attempt.node, attempt=attempt)
            sim.settle(attempt, "bound")


@pytest.fixture(scope="module")
def tiny_plugin(tmp_path_factory):
    """``tiny`` registered in the ``replay.models`` entry-point group, as an installed package's
    would be."""
    root = tmp_path_factory.mktemp("plugin")
    info = root / "tiny_model-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-model\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[replay.models]\n{TINY} = {__name__}:TinyModel\n")
    sys.path.insert(0, str(root))
    try:
        assert TINY in models.registered()
        yield
    finally:
        sys.path.remove(str(root))


MODELS = sorted({*models.registered(), TINY})


def replay(tmp_path: Path, rows: list[dict], model: str, params: dict, pipeline) -> Path:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))  # a fresh path: DuckDB caches what it read
    trace = rows_to_trace(folder / "trace.parquet", rows)
    model_class = models.load(model)
    config = pipeline.config(model_class, params, read_trace(trace))
    return run_replay(trace, config, out=folder / "run").out


@st.composite
def model_runs(draw) -> tuple[str, dict]:
    model = draw(st.sampled_from(MODELS))
    return model, draw(model_params(models.load(model) if model != TINY else TinyModel))


@settings(max_examples=budget(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(rows=workloads(), run=model_runs(), pipeline=pipelines())
def test_every_model_keeps_every_invariant(tiny_plugin, tmp_path, rows, run, pipeline):
    model, params = run
    findings = check_run(replay(tmp_path, rows, model, params, pipeline))
    assert failed(findings) == []
