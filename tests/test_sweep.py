"""``replay sweep``: the sweep file, its points, the local executor, the index, resuming after a
kill, and queries over a sweep.  The Ray executor's tests are in test_sweep_ray.py."""

from __future__ import annotations

import errno
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from test_queries import FEW_WATCHERS, WORKED, Answers, network, replay_rows

from replay.analysis.check import INVARIANTS
from replay.analysis.runs import points_of
from replay.atomic import TEMPORARY_SUFFIX
from replay.engine.distributions import LogNormal
from replay.engine.rundir import DERIVED_TABLES, TABLES
from replay.errors import ReplayError
from replay.sweep import LocalExecutor, load_sweep, run_sweep
from replay.sweep import local as local_module
from replay.sweep import point as point_module
from replay.sweep.point import Task, run_point
from replay.trace.io import write_trace
from replay.trace.synth import SynthSpec, synthesize

import query_reference as ref
from conftest import REPO

TINY = SynthSpec(nodes=8, pods=60, arrival_rate=30.0, mean_lifetime=5.0)
BASE = '[model]\npolicy = "most-allocated"\n'
# three points, in this order (the matrix's, seeds innermost)
KILLED = """trace = "tiny.parquet"
config = "base.toml"
seeds = [1]
[matrix]
model = ["omega"]
"model.schedulers" = [1, 2, 3]
"stages.network.latency.p99_ms" = [20]
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    synthesize(TINY, folder / "tiny.parquet")
    (folder / "base.toml").write_text(BASE)
    return folder


def sweep_file(folder: Path, text: str, name: str = "sweep.toml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


# --- the sweep file and its points ---------------------------------------------------------------

def test_the_matrix_expands_into_named_typed_points(folder):
    path = sweep_file(folder, """trace = "tiny.parquet"
seeds = [1, 2]
[matrix]
model = ["godel", "omega"]
"model.schedulers" = [1, 2]
"stages.network.latency.p99_ms" = [5, 20.5]
[[exclude]]
model = "omega"
"model.schedulers" = 1
""")
    sweep = load_sweep(path)
    assert len(sweep.points) == 2 * 2 * 2 * 2 - 2 * 2
    assert sweep.columns == {"model_schedulers": pl.Int64,
                             "stages_network_latency_p99_ms": pl.Float64}
    first, last = sweep.points[0], sweep.points[-1]
    assert first.name == "tiny-godel-schedulers_1-p99_ms_5-seed_1"
    assert last.name == "tiny-omega-schedulers_2-p99_ms_20.5-seed_2"
    assert dict(last.values) == {"model_schedulers": 2, "stages_network_latency_p99_ms": 20.5}
    assert last.config.model == "omega" and last.config.model_params == {"schedulers": 2}
    assert last.config.seed == 2
    assert last.config.stages["network"]["latency"] == LogNormal(0.5, 20.5)
    assert not any(p.model == "omega" and p.values["model_schedulers"] == 1
                   for p in sweep.points)
    assert [p.name for p in load_sweep(path).points] == [p.name for p in sweep.points]
    assert all(p.memory_bytes > 512 << 20 for p in sweep.points)


def test_unquoted_dotted_keys_and_defaults(folder):
    """TOML reads model.schedulers = [...] as a table in a table; seeds default to the base
    config's seed, the model to the base config's."""
    (folder / "seeded.toml").write_text('seed = 7\n[model]\nname = "godel"\n')
    path = sweep_file(folder, 'trace = "tiny.parquet"\nconfig = "seeded.toml"\n'
                              '[matrix]\nmodel.schedulers = [1, 4]\n')
    points = load_sweep(path).points
    assert [p.name for p in points] == ["tiny-godel-schedulers_1-seed_7",
                                        "tiny-godel-schedulers_4-seed_7"]


def test_names_stay_unique_across_traces_with_one_stem(folder):
    for sub in ("a", "b"):
        (folder / sub).mkdir(exist_ok=True)
        (folder / sub / "tiny.parquet").write_bytes((folder / "tiny.parquet").read_bytes())
    path = sweep_file(folder, 'traces = ["a/tiny.parquet", "b/tiny.parquet"]\n'
                              '[matrix]\nmodel = ["omega"]\n')
    names = [p.name for p in load_sweep(path).points]
    assert len(set(names)) == 2 and all(n.startswith("tiny-") and "-omega-seed_0" in n
                                        for n in names)


MATRIX = 'trace = "tiny.parquet"\n[matrix]\n'


@pytest.mark.parametrize(("text", "message"), [
    ('colour = 1\n' + MATRIX, "colour: unknown key"),
    ('[matrix]\nmodel = ["omega"]\n', "give the trace to replay"),
    ('trace = "nope.parquet"\n', "trace 'nope.parquet': no such file"),
    (MATRIX + 'model = ["godel", "omega"]\n"model.partition" = ["even"]\n',
     "matrix.model.partition: model 'omega' has no parameter 'partition'"),
    (MATRIX + 'model = ["omega"]\n"stages.netwrk.latency.p99_ms" = [5]\n',
     "stages.netwrk: unknown stage"),
    (MATRIX + 'model = ["omega"]\n"stages.network.latency.p99_ms" = [0.1]\n',
     "stages.network.latency.p99_ms: 0.1 is below median_ms 0.5"),
    (MATRIX + 'model = ["omega"]\n"model.schedulers" = [2, 2.0]\n',
     "matrix.model.schedulers: 2.0 is listed twice"),
    (MATRIX + 'model = ["omega"]\n"model.schedulers" = [2, "x"]\n', "values of one type"),
    (MATRIX + 'model = ["omega"]\n"model.schedulers" = []\n', "a non-empty list of values"),
    (MATRIX + 'model = ["omega"]\nseed = [1]\n', "sweep seeds with seeds = [...]"),
    (MATRIX + 'model = ["gödel"]\n', "matrix.model: no model named 'gödel'"),
    (MATRIX + 'model = ["omega"]\n"model.schedulers" = [0]\n', "must be >= 1, got 0"),
    (MATRIX + 'model = ["omega"]\n"stages.network.latency" = [{dist = "constant", ms = 1}]\n',
     "values are strings, numbers or booleans"),
    (MATRIX + 'model = ["omega"]\n[[exclude]]\nmodel.policy = "x"\n',
     "exclude[0].model.policy: not a swept key"),
    (MATRIX + 'model = ["omega"]\n[[exclude]]\nmodel = "kube"\n',
     "exclude[0].model: 'kube' is not one of its values"),
    (MATRIX + 'model = ["omega"]\n[[exclude]]\nmodel = "omega"\n',
     "exclude: leaves out every point; nothing would run"),
    ('traces = ["tiny.parquet", "./tiny.parquet"]\n[matrix]\nmodel = ["omega"]\n',
     "traces: 'tiny.parquet' and './tiny.parquet' are the same file"),
])
def test_a_bad_sweep_file_is_one_line_and_runs_nothing(cli, folder, tmp_path, text, message):
    path = sweep_file(folder, text, "bad.toml")
    result = cli("sweep", path, "--out", tmp_path / "out")
    assert result.code == 1
    assert result.err == f"replay: error: {path}: {result.err.split(': ', 3)[-1]}"
    assert message in result.err and result.err.count("\n") == 1, result.err
    assert not (tmp_path / "out").exists()


def test_an_out_that_is_a_file_is_one_line(cli, folder, tmp_path):
    trace = folder / "tiny.parquet"
    path = sweep_file(tmp_path, f'trace = "{trace}"\n[matrix]\nmodel = ["oracle"]\n')
    result = cli("sweep", path, "--out", folder / "tiny.parquet")
    assert result.code == 1 and result.err == (
        f"replay: error: {folder / 'tiny.parquet'}: a file, not a sweep's directory; choose "
        "another --out\n")


@pytest.mark.parametrize("options, message", [
    ("size=4k", "{disk}/sw/sweep.parquet: cannot write the sweep's index (No space left on "
                "device)"),
    ("ro,size=4k", "{disk}/sw: cannot make the sweep's directory (Read-only file system)"),
], ids=["full", "read-only"])
def test_a_disk_that_fails_is_one_line_naming_the_path(cli, folder, tmp_path, options, message):
    """polars reports a full disk in an error of its own: it is told as the system's error."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {mounted.stderr.strip()}")
    try:
        result = cli("sweep", sweep_file(folder, KILLED), "--out", disk / "sw")
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    assert result.code == 1
    assert result.err == f"replay: error: {message.format(disk=disk)}\n"


def test_dry_run_prints_the_points_and_runs_nothing(cli, folder, tmp_path):
    result = cli("sweep", sweep_file(folder, KILLED), "--out", tmp_path / "out", "--dry-run")
    assert result.code == 0, result.err
    for schedulers in (1, 2, 3):
        assert f"tiny-omega-schedulers_{schedulers}-p99_ms_20-seed_1" in result.out
    assert "3 points, 3 to run" in result.out and not (tmp_path / "out").exists()
    assert cli("sweep", sweep_file(folder, KILLED), "--address", "auto").code == 1
    missing = cli("sweep", tmp_path / "missing.toml")
    assert missing.code == 1 and "missing.toml: no such sweep file" in missing.err


def test_points_run_together_only_as_far_as_memory_allows(tmp_path):
    def task(gib: float) -> Task:
        return Task("p", tmp_path, None, tmp_path / "p", {}, int(gib * 2**30), "")

    def running(*gibs):
        return [type("Running", (), {"task": task(g)}) for g in gibs]

    executor = LocalExecutor(jobs=3, memory_bytes=4 << 30)
    assert executor._fits(task(9), running())  # alone, even when too big: one at a time
    assert executor._fits(task(1), running(1, 2))
    assert not executor._fits(task(2), running(1, 2))
    assert not executor._fits(task(0.1), running(1, 1, 1))  # --jobs
    assert LocalExecutor(jobs=2, memory_bytes=None)._fits(task(9), running(9))


def test_points_are_forked_by_a_server_that_holds_numba_and_runs_no_other_thread(folder,
                                                                                 tmp_path):
    """A point starts with numba imported and started (``replay.forkserver``), forked by a
    server that holds nothing else: no thread of polars, pyarrow or DuckDB, which a fork would
    leave holding its locks in the child, and none of the sweep's own pages."""
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to see the fork server")
    sweep = load_sweep(sweep_file(folder, 'trace = "tiny.parquet"\n[matrix]\nmodel = ["omega"]\n',
                                  "forked.toml"))
    assert run_sweep(sweep, tmp_path / "out", LocalExecutor(jobs=1, memory_bytes=None)).done == 1
    servers = [pid for pid in children_of(os.getpid())
               if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(servers) == 1
    mapped = Path(f"/proc/{servers[0]}/maps").read_text()
    assert "llvmlite" in mapped
    assert not [name for name in ("polars", "pyarrow", "duckdb") if name in mapped]
    assert len(list(Path(f"/proc/{servers[0]}/task").iterdir())) == 1


def test_points_run_in_fresh_interpreters_where_there_is_no_fork_server(folder, tmp_path,
                                                                       monkeypatch):
    """Off Linux a point is spawned: the sweep's own process is then its parent."""
    monkeypatch.setattr(local_module, "_context", lambda: multiprocessing.get_context("spawn"))
    sweep = load_sweep(sweep_file(folder, 'trace = "tiny.parquet"\n[matrix]\nmodel = ["omega"]\n',
                                  "spawned.toml"))
    report = run_sweep(sweep, tmp_path / "out", LocalExecutor(jobs=1, memory_bytes=None))
    assert (report.done, report.failed) == (1, 0)


def test_the_fork_server_has_numba_started_the_views_kernels_loaded_and_all_frozen():
    loaded = ("import gc, replay.forkserver; from replay import jit; from replay.engine import "
              "viewkernel; print(jit.initialize.cache_info().currsize, "
              "viewkernel.compiled.cache_info().currsize, gc.get_freeze_count() > 10000)")
    done = subprocess.run([sys.executable, "-c", loaded], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert done.stdout.split() == ["1", "1", "True"], done.stderr


# A Ray task's body (``run_on_worker``) run twice in one process, as a Ray worker serves tasks:
# the points are replayed in children of the process's fork server, so the process itself loads
# none of a replay's modules (its kernels, numba's compiler), however many points it serves.
RAY_WORKER = """
import sys
from pathlib import Path
from replay.sweep import load_sweep
from replay.sweep.distributed import run_on_worker
from replay.sweep.driver import LOCK, task_of

out = Path(sys.argv[2])
out.mkdir()
(out / LOCK).write_text("token")
tasks = [task_of(point, out, "token") for point in load_sweep(Path(sys.argv[1])).points]
loaded = set(sys.modules)
for task in tasks:
    outcome, files = run_on_worker(task)
    print(outcome.status.value, files, (task.out / "manifest.json").is_file())
print(sorted(m for m in set(sys.modules) - loaded if m.startswith(("replay.", "numba."))))
"""


def test_a_ray_worker_replays_each_point_in_a_child_and_loads_no_replay(folder, tmp_path):
    """A Ray worker serves task after task; each point runs in a child forked by the worker's
    own fork server, as the local executor runs each, so the point's memory goes back when the
    child ends and the worker starts Python, Ray and numba once, not once a point."""
    sweep = sweep_file(folder, 'trace = "tiny.parquet"\nseeds = [1, 2]\n[matrix]\n'
                               'model = ["omega"]\n', "worker.toml")
    done = subprocess.run([sys.executable, "-c", RAY_WORKER, str(sweep), str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert done.stdout.splitlines() == ["done None True", "done None True", "[]"], done.stderr


# --- running: failures, resuming, killing --------------------------------------------------------

def test_a_failed_point_does_not_stop_the_sweep_and_resume_runs_it_again(folder, tmp_path,
                                                                         capfd):
    for sub in ("ok", "broken"):
        (folder / sub).mkdir(exist_ok=True)
        (folder / sub / "t.parquet").write_bytes((folder / "tiny.parquet").read_bytes())
    sweep = load_sweep(sweep_file(folder, 'traces = ["ok/t.parquet", "broken/t.parquet"]\n'
                                          '[matrix]\nmodel = ["omega"]\n'))
    broken = folder / "broken" / "t.parquet"
    good = broken.read_bytes()
    broken.write_bytes(b"not parquet")  # after the sweep was checked: the point fails running
    out = tmp_path / "out"
    report = run_sweep(sweep, out, LocalExecutor(jobs=2, memory_bytes=None))
    assert (report.done, report.failed, report.ran) == (1, 1, 2)
    index = pl.read_parquet(out / "sweep.parquet")
    assert index["status"].to_list() == ["done", "failed"]
    assert "not a readable Parquet file" in index["error"][1] and index["error"][0] is None
    err = capfd.readouterr().err
    assert err.count("failed:") == 1 and f"point {index['point'][1]} failed: " in err
    manifest = out / index["point"][0] / "manifest.json"
    before = manifest.stat().st_mtime_ns

    broken.write_bytes(good)
    report = run_sweep(sweep, out, LocalExecutor(jobs=2, memory_bytes=None), resume=True)
    assert (report.done, report.failed, report.ran) == (2, 0, 1)
    assert manifest.stat().st_mtime_ns == before
    assert pl.read_parquet(out / "sweep.parquet")["status"].to_list() == ["done", "done"]


@pytest.mark.parametrize("raised, message", [
    (OSError(errno.ENOSPC, "No space left on device", "/full/run"),
     "/full/run: No space left on device"),
    (MemoryError(), "out of memory"),
    (KeyError("bug"), "KeyError: 'bug' (at test_sweep.py:"),
])
def test_a_point_that_fails_says_why_in_one_line(monkeypatch, tmp_path, raised, message):
    """The machine's errors as ``replay run`` says them; a bug with its type and place."""
    def failing(*args, **kwargs):
        raise raised

    monkeypatch.setattr(point_module, "run_replay", failing)
    outcome = run_point(Task("p", tmp_path / "t.parquet", None, tmp_path / "p", {}, 0, "t"))
    assert outcome.status.value == "failed" and outcome.error.startswith(message)


def test_what_a_points_replay_notes_is_said_once(cli, folder, tmp_path):
    """The points of a trace share its notes (here: pods created before it began): said once,
    naming the point it came from."""
    tiny = pl.read_parquet(folder / "tiny.parquet")
    first = tiny.filter(pl.col("resource") == "pods")["name"][:3]
    cut = tmp_path / "cut.parquet"
    created = (pl.col("verb") == "create") & pl.col("name").is_in(first.implode())
    write_trace(tiny.filter(~created), cut, source="test", source_args={})
    path = sweep_file(tmp_path, 'trace = "cut.parquet"\nseeds = [1, 2]\n[matrix]\n'
                                'model = ["kube", "omega"]\n')
    result = cli("sweep", path, "--out", tmp_path / "out")
    assert result.code == 0, result.err
    assert result.err.count("3 of 60 pods existed before the trace began") == 1, result.err
    assert "replay: warning: point cut-" in result.err


def differences(a: Path, b: Path) -> list[str]:
    """What differs between two run directories, for a failure's message."""
    found = []
    for name in sorted(p.name for p in a.iterdir()):
        if (a / name).read_bytes() == (b / name).read_bytes():
            continue
        if not name.endswith(".parquet"):
            found.append(f"{a.name}/{name} differs")
            continue
        x, y = pl.read_parquet(a / name), pl.read_parquet(b / name)
        if x.shape != y.shape:
            found.append(f"{a.name}/{name}: shapes {x.shape} and {y.shape}")
        elif x.equals(y):
            found.append(f"{a.name}/{name}: the same rows in different bytes")
        else:
            same = pl.select(pl.all_horizontal([x[c].eq_missing(y[c]) for c in x.columns])).to_series()
            row = same.arg_min()
            found.append(f"{a.name}/{name}: {int((~same).sum())} rows differ, the first "
                         f"{x.row(row)} and {y.row(row)}")
    return found


def start_sweep(path: Path, out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "replay", "sweep", str(path), "--out", str(out),
                             "--jobs", "1", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


def wait_for_done(out: Path, count: int, process: subprocess.Popen) -> pl.DataFrame:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            index = pl.read_parquet(out / "sweep.parquet")
            if (index["status"] == "done").sum() >= count:
                return index
        except (OSError, pl.exceptions.ComputeError):
            pass
        assert process.poll() is None, process.communicate()
        time.sleep(0.1)
    raise AssertionError(f"no {count} points done in time")


def wait_for_partial(out: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 300
    while not partial_dirs(out) and time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    assert partial_dirs(out), "no point was being written"


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text()
                                            .rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
        except OSError:
            pass
    return found


def descendants_of(pid: int) -> list[int]:
    children = children_of(pid)
    return children + [d for child in children for d in descendants_of(child)]


def partial_dirs(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.endswith(TEMPORARY_SUFFIX))


@pytest.fixture(scope="module")
def killed_and_resumed(folder, tmp_path_factory):
    """A sweep of three points stopped with SIGTERM after its first point, resumed and killed
    with SIGKILL after its second, and resumed to the end.  Returns what each step saw."""
    if not Path("/proc").is_dir():
        pytest.skip("needs /proc to find the sweep's child processes")
    path, out = sweep_file(folder, KILLED, "killed.toml"), tmp_path_factory.mktemp("k") / "study"
    seen = {}

    first = start_sweep(path, out)
    wait_for_done(out, 1, first)
    wait_for_partial(out, first)  # the second point is being written
    first.send_signal(signal.SIGTERM)
    _, err = first.communicate(timeout=120)
    seen["terminated"] = (first.returncode, err, partial_dirs(out),
                          pl.read_parquet(out / "sweep.parquet"),
                          sorted(p.name for p in out.iterdir() if not p.name.startswith(".")))
    done = seen["terminated"][3].filter(pl.col("status") == "done")["point"].to_list()
    seen["first_manifests"] = {p: (out / p / "manifest.json").stat().st_mtime_ns for p in done}

    second = start_sweep(path, out, "--resume")
    wait_for_done(out, len(done) + 1, second)
    wait_for_partial(out, second)
    children = descendants_of(second.pid)  # the fork server and the point it forked
    second.kill()
    second.communicate(timeout=60)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{c}").exists() for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    seen["orphans"] = [c for c in children if Path(f"/proc/{c}").exists()]
    index = pl.read_parquet(out / "sweep.parquet")
    seen["killed_done"] = index.filter(pl.col("status") == "done")
    seen["killed_dirs"] = sorted(p.name for p in out.iterdir() if p.is_dir()
                                 and not p.name.startswith("."))

    third = subprocess.run([sys.executable, "-m", "replay", "sweep", str(path), "--out", str(out),
                            "--resume"], capture_output=True, text=True, cwd=REPO)
    seen["resumed"] = (third.returncode, third.stdout + third.stderr, partial_dirs(out),
                       pl.read_parquet(out / "sweep.parquet"))
    seen["out"] = out
    return seen


def test_an_interrupted_sweep_exits_130_and_leaves_no_partial_run(killed_and_resumed):
    code, err, partial, index, listed = killed_and_resumed["terminated"]
    assert code == 130 and "replay: interrupted" in err, err
    assert partial == []
    assert (index["status"] == "done").sum() >= 1 and (index["status"] == "skipped").sum() >= 1
    assert set(index["status"]) <= {"done", "skipped"}
    done = index.filter(pl.col("status") == "done")["point"].to_list()
    assert listed == sorted([*done, "sweep.parquet"])  # no run directory of a skipped point


def test_a_killed_sweep_resumes_without_rerunning_finished_points(killed_and_resumed):
    assert killed_and_resumed["orphans"] == []
    # its replay died with it, not finishing a point the index would not know
    assert killed_and_resumed["killed_dirs"] == killed_and_resumed["killed_done"]["point"].to_list()
    code, output, partial, index = killed_and_resumed["resumed"]
    assert code == 0, output
    assert index["status"].to_list() == ["done"] * 3 and partial == []
    assert index["point"].to_list() == [f"tiny-omega-schedulers_{n}-p99_ms_20-seed_1"
                                        for n in (1, 2, 3)]
    out = killed_and_resumed["out"]
    for point, mtime in killed_and_resumed["first_manifests"].items():
        assert (out / point / "manifest.json").stat().st_mtime_ns == mtime
    before = killed_and_resumed["killed_done"]
    after = index.join(before, on="point", suffix="_before")
    assert after["wall_seconds"].to_list() == after["wall_seconds_before"].to_list()
    assert f"({3 - before.height} ran now)" in output
    assert index["peak_memory_bytes"].min() > 50 << 20 and index["wall_seconds"].min() > 0


def test_a_point_is_exactly_replay_run_with_its_config_and_seed(cli, killed_and_resumed,
                                                                folder, tmp_path):
    out = killed_and_resumed["out"]
    point = out / "tiny-omega-schedulers_2-p99_ms_20-seed_1"
    config = sweep_file(tmp_path, BASE + 'name = "omega"\nschedulers = 2\n'
                        '[stages.network]\nlatency = { dist = "lognormal", median_ms = 0.5, '
                        'p99_ms = 20 }\n', "point.toml")
    alone = tmp_path / point.name
    result = cli("run", folder / "tiny.parquet", "--config", config, "--seed", "1", "--out", alone)
    assert result.code == 0, result.err
    tables = sorted(p.name for p in point.glob("*.parquet"))
    every = sorted(f"{name}.parquet" for name in (*TABLES, *DERIVED_TABLES))
    assert tables == every == sorted(p.name for p in alone.glob("*.parquet"))
    assert all((point / t).read_bytes() == (alone / t).read_bytes() for t in tables), (
        differences(point, alone))
    recorded = json.loads((point / "manifest.json").read_text())
    assert recorded["config"] == json.loads((alone / "manifest.json").read_text())["config"]
    assert recorded["sweep"] == {"sweep": "study", "model_schedulers": 2,
                                 "stages_network_latency_p99_ms": 20}


def test_a_sweep_directory_is_not_reused_by_accident(cli, killed_and_resumed, folder):
    out = killed_and_resumed["out"]
    result = cli("sweep", folder / "killed.toml", "--out", out)
    assert result.code == 1 and "pass --resume" in result.err
    changed = sweep_file(folder, KILLED.replace('config = "base.toml"\n', ""), "changed.toml")
    result = cli("sweep", changed, "--out", out, "--resume")  # the policy is not the same
    assert result.code == 1 and "another configuration" in result.err, result.err
    assert cli("sweep", folder / "killed.toml", "--out", out, "--resume").code == 0


# --- queries over a sweep ------------------------------------------------------------------------

def test_query_treats_every_point_as_a_run_with_its_swept_values(cli, killed_and_resumed):
    out = killed_and_resumed["out"]
    result = cli("query", out, "sweep_summary", "--format", "json")
    assert result.code == 0, result.err
    rows = json.loads(result.out)
    assert [(r["sweep"], r["model"], r["model_schedulers"], r["stages_network_latency_p99_ms"],
             r["seed"]) for r in rows] == [("study", "omega", n, 20, 1) for n in (1, 2, 3)]
    assert [r["schedulers"] for r in rows] == [1, 2, 3]
    assert all(r["attempts"] > 0 and set(r["end_to_end_p99_ms"]) == {"kubelet", "scheduler"}
               for r in rows)
    mine = out.parent / "by_schedulers.sql"
    mine.write_text("SELECT model_schedulers, count(*) AS attempts FROM attempts GROUP BY ALL "
                    "ORDER BY ALL")
    result = cli("query", out, mine, "--format", "json")
    assert json.loads(result.out) == [{"model_schedulers": r["model_schedulers"],
                                       "attempts": r["attempts"]} for r in rows]
    assert cli("query", out).code == 0


def test_check_and_derive_take_a_sweep_directory(cli, killed_and_resumed, tmp_path):
    """Every finished point, as query and report take them; replayed again, a point's manifest
    records the sweep too (without it, ``deterministic`` failed on every point)."""
    out = tmp_path / "study"
    shutil.copytree(killed_and_resumed["out"], out)
    points = [f"tiny-omega-schedulers_{n}-p99_ms_20-seed_1" for n in (1, 2, 3)]
    checked = cli("check", "--rerun", out)
    assert checked.code == 0, checked.out + checked.err
    assert [line for line in checked.out.splitlines() if not line.startswith(" ")] == [
        f"{out / point}: every invariant holds ({len(INVARIANTS)} checked)" for point in points]
    assert checked.out.count("ok        deterministic") == 3
    derived = cli("derive", out)
    assert derived.code == 0 and [line.partition(":")[0] for line in derived.out.splitlines()] \
        == [str(out / point) for point in points]


@pytest.mark.parametrize("point", ["../elsewhere", "/abs/run", "..", "", "a/b"])
def test_an_index_naming_a_point_outside_the_sweep_is_refused(tmp_path, point):
    """An edited sweep.parquet must not point the queries at run directories nobody named."""
    pq.write_table(pa.table({"point": ["good", point], "status": ["done", "done"]}),
                   tmp_path / "sweep.parquet")
    with pytest.raises(ReplayError, match=f"the point {point!r} is not the name of a run "):
        points_of(str(tmp_path))
    pq.write_table(pa.table({"point": ["good"], "status": ["done"]}), tmp_path / "sweep.parquet")
    assert points_of(str(tmp_path)) == [str(tmp_path / "good")]


def test_sweep_summary_agrees_with_the_reference(tmp_path):
    run = replay_rows(tmp_path, WORKED, network(5) + FEW_WATCHERS)
    answers = Answers(run)
    got = answers.query("sweep_summary").row(0, named=True)
    expected = ref.sweep_summary(answers.tables, answers.reference_windows)
    assert got["sweep"] is None and got["run"] == run.name
    for column, value in expected.items():
        if isinstance(value, float):
            assert got[column] == pytest.approx(value, rel=1e-9, abs=1e-9), column
        else:
            assert got[column] == value, column


def test_the_example_sweep_file_is_valid(cli, tmp_path):
    result = cli("sweep", REPO / "examples" / "sweep.toml", "--out", tmp_path / "example",
                 "--dry-run")
    assert result.code == 0, result.err
    assert "24 points, 24 to run" in result.out


class _InterruptedAfterTheFirstRun:
    """An executor interrupted just after its first point's run landed, before its outcome
    reached the sweep (the window a SIGTERM can hit in either executor)."""

    def run(self, tasks: list[Task]):
        run_point(tasks[0])
        raise KeyboardInterrupt
        yield  # a generator, as the executors are


def test_a_run_that_lands_as_the_sweep_is_interrupted_is_recorded_done(folder, tmp_path):
    sweep = load_sweep(sweep_file(folder, 'traces = ["tiny.parquet"]\n'
                                          '[matrix]\nmodel = ["omega", "kube"]\n'))
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(sweep, out, _InterruptedAfterTheFirstRun())
    index = pl.read_parquet(out / "sweep.parquet")
    assert index["status"].to_list() == ["done", "skipped"]
    assert (out / index["point"][0]).is_dir() and not (out / index["point"][1]).exists()
