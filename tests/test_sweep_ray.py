"""``replay sweep --executor ray`` on a real Ray cluster: the same points, rows and tables as the
local executor; results returned to the driver when a worker does not see the sweep's
directory; an interrupt cancels the tasks.

Needs the ray extra (skipped without it).  .ci/run's ray stage starts a local cluster with
``ray start --head`` and sets REPLAY_RAY_ADDRESS=auto; without it each test starts a Ray
instance of its own (``ray.init()``, with separate worker processes).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from replay.atomic import TEMPORARY_SUFFIX
from test_sweep import differences

from replay.sweep import RayExecutor, load_sweep
from replay.sweep.distributed import run_on_worker
from replay.sweep.driver import task_of
from replay.sweep.point import run_point

from conftest import REPO, SAMPLE_TRACE

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

ADDRESS = os.environ.get("REPLAY_RAY_ADDRESS")  # None: a Ray instance per test
# The sweep: 3 models x 2 scheduler counts x 2 network delays x 2 seeds, on the sample
DONE_WHEN = f"""trace = "{SAMPLE_TRACE}"
seeds = [1, 2]
[matrix]
model = ["godel", "omega", "peer"]
"model.schedulers" = [2, 4]
"stages.network.latency.p99_ms" = [5, 50]
"""
MEASURED = ["wall_seconds", "peak_memory_bytes"]


def ray_args() -> list[str]:
    return ["--executor", "ray", *(["--address", ADDRESS] if ADDRESS else [])]


def run_files(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir())}


def test_local_and_ray_give_the_same_rows_and_tables(cli, tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(DONE_WHEN)
    local, ray = tmp_path / "local" / "study", tmp_path / "ray" / "study"
    result = cli("sweep", path, "--out", local, "--jobs", "2")
    assert result.code == 0, result.err
    result = cli("sweep", path, "--out", ray, *ray_args())
    assert result.code == 0, result.err
    rows = [pl.read_parquet(out / "sweep.parquet") for out in (local, ray)]
    assert rows[0].height == 24 and rows[0]["status"].to_list() == ["done"] * 24
    assert rows[0].drop(MEASURED).equals(rows[1].drop(MEASURED))
    assert all(r[column].min() > 0 for r in rows for column in MEASURED)
    for point in rows[0]["point"]:  # manifests too
        assert run_files(local / point) == run_files(ray / point), differences(local / point,
                                                                               ray / point)


def test_a_worker_that_does_not_see_the_sweep_returns_its_tables(tmp_path):
    """A task whose token is not in the lock file it reads (as on a node without the shared
    file system) replays into a directory of its own and the driver writes what it returns."""
    path = tmp_path / "one.toml"
    path.write_text(f'trace = "{SAMPLE_TRACE}"\nseeds = [3]\n[matrix]\nmodel = ["omega"]\n')
    point = load_sweep(path).points[0]
    local = task_of(point, tmp_path / "local" / "study", "token")
    assert run_point(local).error is None
    unseen = dataclasses.replace(task_of(point, tmp_path / "ray" / "study", "token"),
                                 token="not the token in its lock file")
    ray.init(address=ADDRESS)
    try:
        outcome, files = ray.get(ray.remote(run_on_worker).remote(unseen))
    finally:
        ray.shutdown()
    assert outcome.error is None and not unseen.out.exists()  # it wrote nothing there
    assert files == run_files(local.out)
    outcomes = list(RayExecutor(ADDRESS, None).run([unseen]))
    assert [o.status.value for o in outcomes] == ["done"] and outcomes[0].error is None
    assert run_files(unseen.out) == run_files(local.out)


def test_an_interrupt_cancels_the_tasks_and_resume_completes(tmp_path):
    path = tmp_path / "sweep.toml"
    path.write_text(DONE_WHEN.replace("seeds = [1, 2]", "seeds = [1]")
                    .replace('["godel", "omega", "peer"]', '["omega"]'))
    out = tmp_path / "study"
    command = [sys.executable, "-m", "replay", "sweep", str(path), "--out", str(out), "--jobs",
               "1", *ray_args()]
    sweep = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=REPO)
    deadline = time.monotonic() + 300
    while not _done(out) and time.monotonic() < deadline:
        assert sweep.poll() is None, sweep.communicate()
        time.sleep(0.2)
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=120)
    assert sweep.returncode == 130, err
    done = _done(out)
    assert 1 <= len(done) < 4
    time.sleep(5)  # a task not cancelled would go on writing
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == sorted(
        [*done, "sweep.parquet"])
    assert not list(out.glob(f".*{TEMPORARY_SUFFIX}"))
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, cwd=REPO)
    assert resumed.returncode == 0, resumed.stderr
    assert f"({4 - len(done)} ran now)" in resumed.stdout
    assert _done(out) == pl.read_parquet(out / "sweep.parquet")["point"].to_list()


def _done(out: Path) -> list[str]:
    try:
        index = pl.read_parquet(out / "sweep.parquet")
    except (OSError, pl.exceptions.ComputeError):
        return []
    return index.filter(pl.col("status") == "done")["point"].to_list()

