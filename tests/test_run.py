"""``replay run`` end to end: run directories, determinism, observe semantics on traces."""

from __future__ import annotations

import datetime as dt
import io
import json
import subprocess
import sys

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replay import memory, models
from replay.analysis.check import check_run, failed
from replay.analysis.runs import open_runs
from replay.api import run_replay
from replay.engine.config import load_config
from replay.engine.rundir import TABLES as RUN_TABLES
from replay.engine.rundir import WIDE_BATCH, TableFile, _batch_size, conform_table, write_run
from replay.errors import ReplayError
from replay.models.observe import ObserveModel
from replay.trace.io import write_trace
from replay.trace.synth import SynthSpec, synthesize
from replay.trace.validate import read_trace

from audit_events import event as audit_event
from audit_events import pod as audit_pod
from audit_events import write_log
from conftest import SAMPLE_TRACE, budget, cut_sample

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
MODEL_TABLES = tuple(RUN_TABLES)  # events, deliveries, ..., watch_terminations, relists
TABLES = MODEL_TABLES + ("capacity_windows",)  # derived by replay run


def read_run(run_dir, tables=TABLES):
    return {t: pl.read_parquet(run_dir / f"{t}.parquet") for t in tables}


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "sample"
    run_replay(SAMPLE_TRACE, load_config(), out=out)
    return out


def test_run_directory_is_complete(sample_run):
    manifest = json.loads((sample_run / "manifest.json").read_text())
    tables = read_run(sample_run)
    assert manifest["tables"] == {t: tables[t].height for t in TABLES}
    assert manifest["model"]["name"] == "observe"
    assert len(manifest["trace"]["sha256"]) == 64
    assert manifest["config"]["stages"]["network"]["latency"]["dist"] == "lognormal"
    assert tables["deliveries"].schema["applied_ts"] == pl.Datetime("us", "UTC")
    assert tables["deliveries"].schema["watcher"] == pl.String
    # a light load: no buffer ever full, so nothing waited, was terminated or re-listed
    for name in ("dispatch_waits", "watch_terminations", "relists"):
        assert tables[name].height == 0 and tables[name].columns == RUN_TABLES[name].names
    assert set(tables["deliveries"]["source"]) == {"watch"}
    assert not tables["deliveries"]["coalesced"].any()


def test_observe_keeps_the_recorded_truth(sample_run):
    tables = read_run(sample_run)
    trace = pl.read_parquet(SAMPLE_TRACE)
    assert tables["events"].height == trace.height  # every synthesized write succeeded
    assert tables["events"]["rv"].to_list() == list(range(1, trace.height + 1))
    bindings = trace.filter(pl.col("subresource") == "binding").height
    assert tables["attempts"].height == bindings
    assert (tables["attempts"]["outcome"] == "bound").all()
    pods = tables["pods"]
    assert pods.height == trace.filter((pl.col("resource") == "pods")
                                       & (pl.col("verb") == "create")
                                       & pl.col("subresource").is_null()).height
    assert (pods["bound_ts"] > pods["created_ts"]).all()
    assert (pods["deleted_ts"] > pods["bound_ts"]).all()
    watchers = tables["watchers"]
    assert watchers.filter(pl.col("role") == "kubelet").height == 200
    assert watchers.filter(pl.col("role") == "scheduler")["watcher"].to_list() == ["kube-scheduler"]


def test_kubelets_see_only_their_node_and_its_pods(sample_run):
    tables = read_run(sample_run)
    kubelet = tables["deliveries"].filter(pl.col("role") == "kubelet").join(
        tables["events"], on="rv").join(tables["watchers"], on="watcher")
    pods = kubelet.filter(pl.col("resource") == "pods")
    bound = tables["pods"].select(pl.col("pod").str.split("/").list.last().alias("name"),
                                  pl.col("node").alias("bound"))
    pods = pods.join(bound, on="name")
    assert (pods["bound"] == pods["node_right"]).all()
    assert set(pods["verb"].unique()) == {"create", "delete"}  # the binding and the delete
    nodes = kubelet.filter(pl.col("resource") == "nodes")
    assert (nodes["name"] == nodes["node_right"]).all()


def test_components_sum_to_end_to_end(sample_run):
    d = read_run(sample_run)["deliveries"]
    stages = ["commit_ts", "cached_ts", "dispatched_ts", "sent_ts", "received_ts",
              "dequeued_ts", "applied_ts"]
    for a, b in zip(stages, stages[1:]):
        assert (d[b] >= d[a]).all(), f"{b} before {a}"


def test_the_sample_observed_keeps_every_invariant(sample_run):
    """Determinism across processes and threads, for every model:
    tests/test_consistency.py."""
    assert failed(check_run(sample_run)) == []


@pytest.mark.parametrize(("model", "bind"), [("observe", "least-allocated"), ("godel", None),
                                             ("omega", None)])
def test_dictionary_columns_hold_each_value_once(tmp_path, model, bind):
    """Parquet writes an Arrow dictionary holding a value twice with other bytes from one
    process to the next (the same rows): byte-identical tables need each value once."""
    synthesize(SynthSpec(nodes=8, pods=60, arrival_rate=30.0, mean_lifetime=5.0, bind=bind),
               tmp_path / "trace.parquet")
    trace = read_trace(tmp_path / "trace.parquet")
    replay_model = models.load(model)()
    config = load_config(model=model)
    for name, table in replay_model.tables(trace, config, replay_model.default_watchers(trace)):
        table = conform_table(name, table)
        for column in table.columns:
            for chunk in column.chunks:
                if pa.types.is_dictionary(chunk.type):
                    values = chunk.dictionary.to_pylist()
                    assert len(values) == len(set(values)), (name, chunk.type)


def test_another_seed_changes_delays_not_truth(tmp_path):
    a = tmp_path / "a"
    b = tmp_path / "b"
    run_replay(SAMPLE_TRACE, load_config(seed=1), out=a)
    run_replay(SAMPLE_TRACE, load_config(seed=2), out=b)
    ra, rb = read_run(a), read_run(b)
    assert ra["events"].equals(rb["events"])
    assert not ra["deliveries"].equals(rb["deliveries"])


def test_tables_that_come_one_at_a_time_are_written_alike(tmp_path):
    """write_run takes (name, table) pairs as a model yields them, a table possibly in parts:
    the same directory as from RunTables, and none at all when the model fails half-way."""
    trace, model, config = read_trace(SAMPLE_TRACE), ObserveModel(), load_config()
    watchers = model.default_watchers(trace)
    tables = model.replay(trace, config, watchers)
    write_run(tmp_path / "all", tables, {})
    write_run(tmp_path / "streamed", model.tables(trace, config, watchers), {})
    halves = ((name, part) for name, table in tables.items()
              for whole in [conform_table(name, table)]
              for part in (whole.slice(0, whole.num_rows // 2), whole.slice(whole.num_rows // 2)))
    write_run(tmp_path / "parts", halves, {})
    streamed = read_run(tmp_path / "streamed", MODEL_TABLES)
    parts = read_run(tmp_path / "parts", MODEL_TABLES)
    for table, frame in read_run(tmp_path / "all", MODEL_TABLES).items():
        assert frame.equals(streamed[table]), table
        assert frame.equals(parts[table]), table

    def failing():
        yield from list(tables.items())[:2]
        raise RuntimeError("the model failed")

    with pytest.raises(RuntimeError):
        write_run(tmp_path / "failed", failing(), {})

    def failing_derivation(run_dir):
        raise ReplayError("the derivation failed")

    with pytest.raises(ReplayError):
        write_run(tmp_path / "failed", tables, {}, derive=failing_derivation)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all", "parts", "streamed"]


def test_cli_run_default_out_and_force(cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = cli("run", SAMPLE_TRACE)
    assert first.code == 0, first.err
    assert "wrote runs/sample-observe" in first.out
    assert "end-to-end watch delay, scheduler: p50" in first.out
    again = cli("run", SAMPLE_TRACE)
    assert again.code == 1 and "already exists" in again.err
    forced = cli("run", SAMPLE_TRACE, "--force", "--seed", "3")
    assert forced.code == 0
    manifest = json.loads((tmp_path / "runs/sample-observe/manifest.json").read_text())
    assert manifest["seed"] == 3
    assert not [p for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")]


def small_trace(path, rows):
    """Write a trace of (seconds, verb, resource, subresource, name, node, code, cpu) rows."""
    frame = pl.DataFrame(
        [(T0 + dt.timedelta(seconds=s), verb, res, sub, "ns" if res == "pods" else None, name,
          node, code, cpu, "kube-scheduler" if sub == "binding" else "workload")
         for s, verb, res, sub, name, node, code, cpu in rows],
        schema=["ts", "verb", "resource", "subresource", "namespace", "name", "node", "code",
                "cpu_milli", "component"], orient="row")
    write_trace(frame, path, source="test", source_args={})
    return path


def test_failed_binding_is_a_conflict_and_reaches_nobody(tmp_path):
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 4000),
        (1, "create", "pods", None, "p", None, 201, 1000),
        (2, "create", "pods", "binding", "p", "n1", 409, None),
        (3, "create", "pods", "binding", "p", "n1", 201, None),
        (9, "delete", "pods", None, "p", None, 200, None),
        (10, "create", "pods", None, "p", None, 201, 500),  # the same name again: a new pod
    ])
    out = tmp_path / "run"
    run_replay(trace, load_config(), out=out)
    t = read_run(out)
    assert t["events"].height == 5
    assert t["attempts"]["outcome"].to_list() == ["conflict", "bound"]
    assert t["attempts"]["reason"].to_list() == ["api_conflict", None]
    # the retry was enqueued when the first attempt failed
    assert t["attempts"]["enqueued_ts"][1] == T0 + dt.timedelta(seconds=2)
    # the failed one is forgotten when it fails, the bound one when the scheduler sees it
    applied = t["deliveries"].filter(pl.col("watcher") == "kube-scheduler", pl.col("rv") == 3)
    assert t["attempts"]["forgotten_ts"].to_list() == [T0 + dt.timedelta(seconds=2),
                                                       applied["applied_ts"][0]]
    pods = t["pods"]
    assert pods["attempts"].to_list() == [2, 0]
    assert pods["cpu_milli"].to_list() == [1000, 500]
    assert pods["node"].to_list() == ["n1", None]
    kubelet = t["deliveries"].filter(pl.col("watcher") == "kubelet/n1")["rv"].to_list()
    assert kubelet == [1, 3, 4]  # its node, the binding, the delete; not the second pod


@pytest.mark.parametrize("name", [None, "observe"])
def test_a_replay_looks_its_model_up_once(tmp_path, monkeypatch, name):
    """Each lookup of the models reads every installed distribution's entry points (a few
    milliseconds of a replay step's tenths of a second): a trace with bindings, named observe
    or not, is replayed after one."""
    lookups = []
    registrations = models.registrations

    def counted():
        lookups.append(1)
        return registrations()

    monkeypatch.setattr(models, "registrations", counted)
    result = run_replay(SAMPLE_TRACE, load_config(None, model=name), out=tmp_path / "run")
    assert result.model == "observe" and len(lookups) == 1


def test_no_bindings_and_no_what_if_model_names_the_models(cli, tmp_path, monkeypatch):
    from replay import models

    only_observe = {n: p for n, p in models.registered().items() if n == "observe"}
    monkeypatch.setattr(models, "registered", lambda: only_observe)
    trace = small_trace(tmp_path / "t.parquet", [(0, "create", "pods", None, "p", None, 201, 1)])
    result = cli("run", trace, "--out", tmp_path / "run")
    assert result.code == 1 and "records no bindings" in result.err
    assert "none installed" in result.err
    assert not (tmp_path / "run").exists()


def test_the_summary_counts_the_attempts_by_outcome(cli, tmp_path):
    """A pod of 2 cores finds no room on a node of 1 at its first attempt; the node's growth
    to 4 cores brings a retry, which binds it: two attempts, one unschedulable."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 1000),
        (1, "create", "pods", None, "p", None, 201, 2000),
        (2, "update", "nodes", None, "n1", "n1", 200, 4000)])
    result = cli("run", trace, "--model", "kube", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert "scheduling attempts 2, conflicts 0, unschedulable 1" in result.out, result.out


def test_bad_config_is_one_line(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[stages.network]\nlatency = { dist = \"lognormal\", median_ms = 2, p99_ms = 1 }\n")
    result = cli("run", SAMPLE_TRACE, "--config", config, "--out", tmp_path / "run")
    assert result.code == 1
    assert result.err.count("\n") == 1 and "p99_ms" in result.err


def _write_file(path, table):
    file = TableFile(path)
    file.add(table)
    file.close()
    return path.read_bytes()


def test_wide_encoder_batches_write_the_same_bytes(tmp_path, monkeypatch):
    """``TableFile`` hands the deliveries (numbers, times, flags and small Arrow dictionaries)
    to the encoder in wide batches: the file must be the one pyarrow's default batches give
    (pages of 20,000 rows, here 60,000 rows in two row groups of a part each); a table with
    plain strings, whose dictionary outgrows its limit mid-way, keeps the default batches."""
    rng = np.random.default_rng(7)
    rows = 60_000
    deliveries = pa.table({
        "rv": pa.array(np.sort(rng.integers(1, 10**6, rows))),
        "watcher": pa.DictionaryArray.from_arrays(
            pa.array(np.repeat(np.arange(3, dtype=np.int32), rows // 3)), ["a", "b", "c"]),
        "sent_ts": pa.array(np.cumsum(rng.integers(0, 10**4, rows))).view(
            pa.timestamp("us", tz="UTC")),
        "source": pa.DictionaryArray.from_arrays(
            pa.array(np.where(rng.random(rows) < 0.01, 1, 0).astype(np.int8)),
            ["watch", "rewatch", "relist"]),
        "coalesced": pa.array(rng.random(rows) < 0.05),
    })
    names = pa.table({"rv": pa.array(np.arange(rows)),
                      "name": pa.array([f"pod-{i:06d}-{'x' * 16}" for i in range(rows)])})
    assert _batch_size(deliveries) == WIDE_BATCH and _batch_size(names) is None
    wide = {name: _write_file(tmp_path / f"{name}-wide.parquet", table)
            for name, table in (("deliveries", deliveries), ("names", names))}
    monkeypatch.setattr("replay.engine.rundir._batch_size", lambda part: None)
    for name, table in (("deliveries", deliveries), ("names", names)):
        assert _write_file(tmp_path / f"{name}.parquet", table) == wide[name], name


def test_a_table_files_digest_taken_as_it_grows_is_the_whole_files(tmp_path, monkeypatch):
    """``TableFile`` hashes each part's bytes after writing it and only the footer at the end:
    the manifest's size and SHA-256 must be the finished file's, and the parts must have been
    hashed before the close (else the digest is taken after the last part, as before)."""
    import hashlib

    from replay.engine import rundir

    rng = np.random.default_rng(3)
    path = tmp_path / "t.parquet"
    file = TableFile(path)
    hashed_before_close = []
    catch_up = rundir._Digest.catch_up

    def counting(digest):
        catch_up(digest)
        hashed_before_close.append(digest.size)

    monkeypatch.setattr(rundir._Digest, "catch_up", counting)
    for rows in (5_000, 70_000, 1, 20_000):
        file.add(pa.table({"rv": pa.array(np.sort(rng.integers(0, 10**9, rows))),
                           "name": pa.array([f"p-{i % 977}" for i in range(rows)])}))
    file._done[-1].result()
    before = list(hashed_before_close)
    file.close()
    data = path.read_bytes()
    assert file.digest == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert len(before) == 4 and 0 < before[0] < before[-1] < len(data)


def test_a_table_file_queues_at_most_ahead_parts(tmp_path, monkeypatch):
    """``TableFile(ahead=n)``: ``add`` waits while more than n parts are not yet written, so a
    caller quicker than the encoder does not hold a whole table in its queue."""
    import threading

    release = threading.Event()
    written = []

    def slow_write(self, part):
        release.wait(timeout=10)
        written.append(part.num_rows)

    monkeypatch.setattr(TableFile, "_write", slow_write)
    file = TableFile(tmp_path / "t.parquet", ahead=2)
    part = pa.table({"x": [1]})
    added = []
    adder = threading.Thread(target=lambda: [added.append(file.add(part)) for _ in range(5)])
    adder.start()
    adder.join(timeout=0.5)
    assert len(added) == 2  # the first in the writer, the second queued; the third waits
    release.set()
    adder.join(timeout=10)
    file.close()
    assert len(added) == 5 and written == [1] * 5


# glibc's thresholds while freed memory is kept, and afterwards (``replay.memory``)
KEPT = {memory.M_MMAP_THRESHOLD: memory.KEEP_BYTES, memory.M_TRIM_THRESHOLD: memory.KEEP_BYTES}
AFTER = {memory.M_MMAP_THRESHOLD: memory.AFTER_MMAP_BYTES,
         memory.M_TRIM_THRESHOLD: memory.AFTER_TRIM_BYTES}


class _Malloc:
    """glibc's malloc as ``replay.memory`` sees it, its calls recorded: the thresholds in force
    (None: glibc's own, adaptive) and every trim."""

    def __init__(self) -> None:
        self.thresholds: dict[int, int | None] = {memory.M_MMAP_THRESHOLD: None,
                                                  memory.M_TRIM_THRESHOLD: None}
        self.trims: list[int] = []

    def mallopt(self, option: int, value: int) -> int:
        self.thresholds[option] = value
        return 1

    def malloc_trim(self, pad: int) -> int:
        self.trims.append(pad)
        return 1


def test_freed_memory_is_kept_until_the_outermost_keeping_ends(monkeypatch):
    malloc = _Malloc()
    monkeypatch.setattr(memory, "_libc", lambda: malloc)
    with memory.keeping_freed_memory():
        assert malloc.thresholds == KEPT
        with memory.keeping_freed_memory():
            pass
        assert malloc.thresholds == KEPT and malloc.trims == []
    assert malloc.thresholds == AFTER
    assert malloc.trims == [0]


def test_a_run_derives_its_tables_with_freed_memory_kept(monkeypatch, tmp_path):
    """The derivation makes and drops as many large arrays as the replay before it: glibc's
    malloc keeps what it frees for the next ones there too (with the thresholds the replay left,
    128 KiB, a 1M-pod run's derivation faulted in twice the pages and took a fifth longer), and
    what the replay freed goes back to the system before it starts."""
    import replay.analysis.derive as derive_module
    malloc = _Malloc()
    monkeypatch.setattr(memory, "_libc", lambda: malloc)
    during: list[tuple[dict, int]] = []
    write = derive_module._write

    def watched(con, name, dest):
        during.append((dict(malloc.thresholds), len(malloc.trims)))
        return write(con, name, dest)

    monkeypatch.setattr(derive_module, "_write", watched)
    run_replay(SAMPLE_TRACE, load_config(), out=tmp_path / "run")
    assert during == [(KEPT, 1)]
    assert malloc.thresholds == AFTER


class _HugePages:
    """numpy's switch for its huge pages as ``replay.memory`` sees it (it returns the setting
    it replaces)."""

    def __init__(self, on: bool):
        self.on = on

    def __call__(self, on: bool) -> bool:
        previous, self.on = self.on, on
        return previous


@pytest.mark.parametrize("before", [True, False])
def test_huge_pages_stay_off_until_the_outermost_ends_then_are_as_they_were(monkeypatch, before):
    switch = _HugePages(before)
    monkeypatch.setattr(memory, "huge_page_switch", lambda: switch)
    with memory.without_huge_pages():
        assert switch.on is False
        with memory.without_huge_pages():
            pass
        assert switch.on is False
    assert switch.on is before


def test_a_run_replays_and_derives_without_numpys_huge_pages(monkeypatch, tmp_path):
    """numpy asks the kernel for no huge pages while a run replays and while it derives (with
    them, the 1M-pod observe replay step took 4.0-5.0 s instead of 3.3-3.6 s, and a derivation
    up to a third longer), and as before once the run is written."""
    import replay.analysis.derive as derive_module
    switch = _HugePages(True)
    monkeypatch.setattr(memory, "huge_page_switch", lambda: switch)
    during: list[tuple[str, bool]] = []
    tables, write = ObserveModel.tables, derive_module._write

    def watched_tables(self, *args):
        for table in tables(self, *args):
            during.append(("replay", switch.on))
            yield table

    def watched_write(*args):
        during.append(("derive", switch.on))
        return write(*args)

    monkeypatch.setattr(ObserveModel, "tables", watched_tables)
    monkeypatch.setattr(derive_module, "_write", watched_write)
    run_replay(SAMPLE_TRACE, load_config(), out=tmp_path / "run")
    assert {stage for stage, _ in during} == {"replay", "derive"}
    assert not any(on for _, on in during)
    assert switch.on is True


def test_numpys_huge_page_switch_is_found():
    """The private switch ``replay.memory`` turns (``_set_madvise_hugepage``) is where it looks
    for it in this numpy: if numpy moved it, the runs would quietly take huge pages again."""
    switch = memory.huge_page_switch()
    assert switch is not None
    before = switch(False)
    assert switch(before) is False


@settings(max_examples=budget(60), deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["binder", "kubelet", "scheduler"]),
                                   st.integers(0, 10**7)), min_size=0, max_size=40),
                min_size=1, max_size=4), st.booleans(), st.integers(1, 3))
def test_the_delay_summary_is_polars_nearest_quantiles_per_role(parts, dictionary, chunks):
    """The run's delay by role (``RunResult.delay_by_role``) from deliveries given in parts: the
    nearest-rank p50 and p99 of each role's end-to-end delays, as polars computes them on the
    whole table, whether a role's deliveries are in one part (summarised without a copy) or in
    several, whether the role column is an Arrow dictionary of every role, as observe's is,
    whichever a part holds, or plain strings, and whatever the chunks of ``commit_ts``
    (observe's come in chunks)."""
    from replay.api import _summarised
    every_role = ["scheduler", "kubelet", "binder"]  # not sorted: a code is not a role's rank

    def table(rows):
        roles = pa.array([role for role, _ in rows], pa.string())
        codes = pa.array([every_role.index(role) for role, _ in rows], pa.int32())
        delay = np.array([d for _, d in rows], dtype=np.int64)
        commit = np.arange(len(rows), dtype=np.int64) * 1_000
        times = {c: pa.array(commit).view(pa.timestamp("us", tz="UTC"))
                 for c in ("cached_ts", "dispatched_ts", "sent_ts", "received_ts",
                           "dequeued_ts")}
        times["commit_ts"] = pa.chunked_array(
            [pa.array(c).view(pa.timestamp("us", tz="UTC"))
             for c in np.array_split(commit, chunks)], pa.timestamp("us", tz="UTC"))
        return pa.table({
            "rv": pa.array(np.arange(len(rows), dtype=np.int64)), "watcher": roles,
            "role": pa.DictionaryArray.from_arrays(codes, every_role) if dictionary else roles,
            **times,
            "applied_ts": pa.array(commit + delay).view(pa.timestamp("us", tz="UTC")),
            "source": pa.array(["watch"] * len(rows)), "coalesced": pa.array([False] * len(rows))})

    summary: dict = {}
    list(_summarised([("deliveries", table(rows)) for rows in parts], summary))
    every = pl.DataFrame([row for rows in parts for row in rows], schema=["role", "delay"],
                         orient="row")
    expected = every.group_by("role").agg(
        pl.len().alias("deliveries"), pl.col("delay").quantile(0.5, "nearest").alias("p50"),
        pl.col("delay").quantile(0.99, "nearest").alias("p99")).sort("role")
    assert summary["delay"].rows() == [(role, n, float(p50) / 1000, float(p99) / 1000)
                                       for role, n, p50, p99 in expected.rows()]


@pytest.mark.parametrize("part", [97, 1000, 1 << 20])
def test_observe_deliveries_take_their_writes_shared_stage_times(monkeypatch, part):
    """observe's deliveries take their writes' commit, cached and dispatched times in chunks (a
    resource's writes' times sliced for each watcher of the whole cluster, the kubelets'
    gathered): each must be its write's, in parts of any size (a stream split between parts,
    kubelets and schedulers in one part), and the tables the same as in one part."""
    from replay.models.observe import _Replay

    monkeypatch.setattr("replay.models.observe.PART", part)
    trace = read_trace(SAMPLE_TRACE)
    config = load_config(None, model="observe")
    watchers = ObserveModel(config.model_params).default_watchers(trace)
    assert any(w.node is None for w in watchers) and any(w.node for w in watchers)
    replay = _Replay(trace, config, watchers)
    parts = list(replay.deliveries())
    assert len(parts) == -(-sum(p.num_rows for p in parts) // part)
    for part_table in parts:
        write = part_table.column("rv").to_numpy() - 1
        for name, times in zip(("commit_ts", "cached_ts", "dispatched_ts"), replay.scan.shared):
            column = part_table.column(name)
            assert column.type == pa.timestamp("us", tz="UTC")
            assert np.array_equal(column.to_numpy().view(np.int64), times[write]), name
    if part < 1000:
        assert any(p.column("commit_ts").num_chunks > 1 for p in parts)
    whole = pa.concat_tables(parts).combine_chunks()
    monkeypatch.setattr("replay.models.observe.PART", 1 << 20)
    assert whole.equals(pa.concat_tables(list(_Replay(trace, config, watchers).deliveries()))
                        .combine_chunks())


def test_pods_that_existed_before_the_trace_began_are_said(cli, tmp_path):
    """A log of a running cluster: the pods created before its first line hold no capacity in
    observe and are set aside by a what-if model; each says how many, in a warning."""
    trace = tmp_path / "cut.parquet"
    sample, cut = cut_sample(trace)
    pods = sample.filter(pl.col("resource") == "pods", pl.col("subresource").is_null())
    before = pods.filter(pl.col("ts") < cut, verb="create")["name"]
    existed = pods.filter(pl.col("ts") >= cut, pl.col("name").is_in(before.implode()))
    count = existed["name"].n_unique()
    assert count > 1000  # (1,376)
    for model, effect in (("observe", "so they hold no capacity on their nodes"),
                          ("kube", "they are set aside")):
        result = cli("run", trace, "--model", model, "--out", tmp_path / model)
        assert result.code == 0, result.err
        assert f"replay: warning: {count:,} of " in result.err and effect in result.err
    whole = cli("run", SAMPLE_TRACE, "--model", "kube", "--out", tmp_path / "whole")
    assert whole.code == 0 and "existed before" not in whole.err


def test_a_log_of_a_running_cluster_lists_what_its_bodies_say(cli, tmp_path):
    """A RequestResponse log begun after its node and a pod were made: the pod's status write
    says its node and requests, the node's its allocatable.  Both are in every cache from the
    start (events and deliveries of origin and source 'list'), so the pod's delete frees 3
    cpu that the scheduler is blind to until it applies the delete, while a pending pod needs
    it (a wasted window); a pod that ran to its end before the log (its delete finds it
    Succeeded) is not listed, and one that ends during it frees its node then.  The scheduler's
    informer selects non-terminal pods: it receives neither pod's delete, the kubelet the
    second's."""
    def stored(name, cpu, node=None, phase="Running"):
        body = audit_pod([{"requests": {"cpu": cpu, "memory": "1Gi"}}],
                         **({"nodeName": node} if node else {}))
        return {**body, "metadata": {"name": name}, "status": {"phase": phase}}

    node = {"kind": "Node", "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi"}}}
    kubelet = {"user": "system:node:n1", "code": 200, "level": "RequestResponse"}
    binding = {"kind": "Binding", "metadata": {"name": "web-2"}, "target": {"name": "n1"}}
    log = write_log(tmp_path / "cluster.log", [
        audit_event("patch", "nodes", name="n1", namespace=None, subresource="status", **kubelet,
                    request={"status": {}}, response=node, audit_id="a", second=1),
        audit_event("patch", name="old-1", subresource="status", **kubelet,
                    request={"status": {}}, response=stored("old-1", "3", "n1"), audit_id="b",
                    second=2),
        audit_event(name="web-2", level="RequestResponse", request=stored("web-2", "2"),
                    audit_id="c", second=3),
        audit_event("delete", name="old-1", **kubelet, response=stored("old-1", "3", "n1"),
                    audit_id="d", second=5),
        audit_event(name="web-2", subresource="binding", user="system:kube-scheduler",
                    level="Request", request=binding, audit_id="e", second=6),
        audit_event("patch", name="done-3", subresource="status", **kubelet,
                    request={"status": {}}, response=stored("done-3", "1", "n1", "Succeeded"),
                    audit_id="f", second=7),
        audit_event("delete", name="gone-4", **kubelet,
                    response=stored("gone-4", "1", "n1", "Succeeded"), audit_id="g", second=8),
        audit_event("delete", name="done-3", **kubelet,
                    response=stored("done-3", "1", "n1", "Succeeded"), audit_id="h", second=9)])
    trace = tmp_path / "t.parquet"
    assert cli("ingest", log, "--out", trace).code == 0
    result = cli("run", trace, "--model", "observe", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert "3 of 4 pods existed before the trace began (writes but no create): 2 are listed " \
        "at its start" in result.err and "of the other 1 (their bodies say neither" in result.err
    assert "scheduler: p50 " in result.out and "(6 deliveries)" in result.out  # the list: no delay
    tables = read_run(tmp_path / "run")
    events = tables["events"]
    listed = events.filter(origin="list").select("rv", "verb", "resource", "name", "node",
                                                 "cpu_milli")
    assert listed.rows() == [(1, "create", "nodes", "n1", "n1", 4000),
                             (2, "create", "pods", "done-3", "n1", 1000),
                             (3, "create", "pods", "old-1", "n1", 3000)]
    assert events["commit_ts"][0] == events["commit_ts"][3]  # the first write's commit
    deletes = events.filter(verb="delete").select("rv", "name")
    assert sorted(tables["deliveries"].join(deletes, on="rv").select("watcher", "name").rows()) \
        == [("kube-scheduler", "old-1"), ("kubelet/n1", "done-3"), ("kubelet/n1", "old-1")]
    first_lists = tables["deliveries"].filter(source="list")
    assert sorted(first_lists.select("watcher", "rv").rows()) == [
        (w, rv) for w in ("kube-scheduler", "kubelet/n1") for rv in (1, 2, 3)]
    assert (first_lists["applied_ts"] == first_lists["commit_ts"]).all()
    pods = {row["pod"]: row for row in tables["pods"].to_dicts()}
    assert (pods["default/old-1"]["bound_rv"], pods["default/old-1"]["cpu_milli"]) == (3, 3000)
    assert pods["default/gone-4"]["bound_rv"] is None
    windows = tables["capacity_windows"].filter(watcher="kube-scheduler", resource="cpu")
    assert windows.select("kind", "gap_max", "wasted").rows() == [
        ("stale", 3.0, True), ("stale", 1.0, False)]  # old-1's delete, done-3's end
    assert not failed(check_run(tmp_path / "run"))
    delays = cli("query", tmp_path / "run", "per_component_delay", "--format", "csv")
    assert delays.code == 0 and ",scheduler,end_to_end,6," in delays.out  # the list is no delay


def test_listing_what_the_bodies_say_recovers_the_windows_of_the_whole_trace(cli, tmp_path):
    """The sample trace cut at 120 s misses a third of its scheduler's stale windows from
    150 s on, the capacity that pods created before the cut free at their deletes; with those
    deletes saying the pods' node and requests, observe lists the pods and finds the whole
    trace's windows again: the same count (5,678), and blind core-seconds within 3% (the watch
    delays' draws differ with the writes)."""
    def scheduler_row(trace, name):
        assert cli("run", trace, "--model", "observe", "--out", tmp_path / name).code == 0
        result = cli("query", tmp_path / name, "stale_capacity_by_role", "--from",
                     "2026-01-01T00:02:30Z", "--format", "csv")
        rows = pl.read_csv(io.StringIO(result.out)).filter(watcher="kube-scheduler")
        return rows.row(0, named=True)

    whole = scheduler_row(SAMPLE_TRACE, "whole")
    cut_sample(tmp_path / "cut.parquet")
    cut_sample(tmp_path / "bodies.parquet", bodies=True)
    cut, listed = (scheduler_row(tmp_path / f"{name}.parquet", name)
                   for name in ("cut", "bodies"))
    assert cut["windows"] < 0.7 * whole["windows"]  # (3,717 of 5,678)
    assert listed["windows"] == whole["windows"]
    assert listed["blind_core_seconds"] == pytest.approx(whole["blind_core_seconds"], rel=0.03)


def test_writes_without_their_bodies_are_said(cli, tmp_path):
    """A Metadata-level log: no requests on pod creates, no node on bindings."""
    sample = pl.read_parquet(SAMPLE_TRACE)
    is_pod = pl.col("resource") == "pods"
    trace = tmp_path / "metadata.parquet"
    write_trace(sample.with_columns(
        pl.when(pl.col("subresource") == "binding").then(None).otherwise("node").alias("node"),
        *[pl.when(is_pod).then(None).otherwise(c).alias(c)
          for c in ("cpu_milli", "memory_bytes", "gpu_milli")]), trace, source="test",
        source_args={})
    requests = "5,000 of 5,000 pod creates carry no requests (the log left out their bodies"
    nodes = "5,000 of 5,000 bindings name no node"
    observed = cli("run", trace, "--model", "observe", "--out", tmp_path / "observe")
    assert observed.code == 0 and requests in observed.err and nodes in observed.err
    what_if = cli("run", trace, "--model", "kube", "--out", tmp_path / "kube")
    assert what_if.code == 0 and requests in what_if.err and nodes not in what_if.err


def test_a_pod_created_on_its_node_is_placed_there(cli, tmp_path):
    """A mirror pod (created with spec.nodeName by its kubelet, never bound): observe places it
    at its create, so its node's kubelet receives its writes and its request is held there
    until its delete.  So does a what-if model, whose schedulers never see it pending: its
    kubelet created it for a pod it runs (it once scheduled the pod anew), and it says so."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 4000),
        (0, "create", "nodes", None, "n2", "n2", 201, 4000),
        (1, "create", "pods", None, "static-n1", "n1", 201, 1000),
        (2, "patch", "pods", "status", "static-n1", None, 200, None),
        (5, "delete", "pods", None, "static-n1", None, 200, None)])
    observed = cli("run", trace, "--model", "observe", "--out", tmp_path / "observe")
    assert observed.code == 0 and "name their node" not in observed.err, observed.err
    tables = read_run(tmp_path / "observe")
    assert tables["pods"].select("bound_rv", "node", pl.col("bound_ts") == pl.col("created_ts"),
                                 "deleted_rv").rows() == [(3, "n1", True, 5)]
    kubelets = tables["deliveries"].filter(pl.col("role") == "kubelet")
    assert kubelets.group_by("watcher").agg(pl.col("rv").sort()).sort("watcher").rows() == [
        ("kubelet/n1", [1, 3, 4, 5]), ("kubelet/n2", [2])]
    claims = open_runs([str(tmp_path / "observe")]).sql(
        "SELECT rv, node, takes, change, cpu_milli FROM claims ORDER BY rv").fetchall()
    assert claims == [(3, "n1", True, "binding", 1000), (5, "n1", False, "delete", 1000)]
    assert cli("check", tmp_path / "observe").code == 0
    note = "1 of 1 pod creates name their node already (static pods' mirror pods"
    what_if = cli("run", trace, "--model", "kube", "--out", tmp_path / "kube")
    assert what_if.code == 0 and note in what_if.err, what_if.err
    assert "the model creates each on its node, as the trace does" in what_if.err
    tables = read_run(tmp_path / "kube")
    assert tables["events"].filter(
        pl.col("verb") == "create", pl.col("resource") == "pods",
        pl.col("subresource").is_null())["node"].to_list() == ["n1"]
    assert tables["attempts"].height == 0  # no scheduler places it
    # (its status write set aside: its delete, at 5 s, is rv 4)
    assert tables["pods"].select("bound_rv", "node", pl.col("bound_ts") == pl.col(
        "created_ts"), "deleted_rv", "deleted_ts").rows() == [
            (3, "n1", True, 4, T0 + dt.timedelta(seconds=5))]
    kubelets = tables["deliveries"].filter(pl.col("role") == "kubelet")
    assert kubelets.group_by("watcher").agg(pl.col("rv").unique().sort()).sort(
        "watcher").rows() == [("kubelet/n1", [1, 3, 4]), ("kubelet/n2", [2])]
    assert cli("check", tmp_path / "kube").code == 0


def test_a_mirror_pod_in_an_audit_log_is_placed_on_its_node(cli, tmp_path):
    """From the log on: the kubelet of node-1 creates its static pod's mirror pod (spec.nodeName
    set, as ``CreateMirrorPod`` does); ingest keeps the node, and observe holds its request on
    node-1 from the create on."""
    node = {"metadata": {"name": "node-1"},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}
    mirror = audit_pod([{"requests": {"cpu": "250m", "memory": "512Mi"}}], nodeName="node-1")
    log = write_log(tmp_path / "audit.log", [
        audit_event(resource="nodes", name="node-1", namespace=None, user="system:node:node-1",
                    level="Request", request=node, audit_id="n", second=0),
        audit_event(name="etcd-node-1", namespace="kube-system", user="system:node:node-1",
                    level="Request", request=mirror, audit_id="m", second=1)])
    trace = tmp_path / "t.parquet"
    assert cli("ingest", log, "--out", trace).code == 0
    result = cli("run", trace, "--model", "observe", "--out", tmp_path / "run")
    assert result.code == 0 and "warning" not in result.err, result.err
    pods = read_run(tmp_path / "run")["pods"]
    assert pods.select("pod", "node", "cpu_milli").rows() == [
        ("kube-system/etcd-node-1", "node-1", 250)]
    deliveries = read_run(tmp_path / "run")["deliveries"]
    assert sorted(deliveries.filter(pl.col("watcher") == "kubelet/node-1")["rv"]) == [1, 2]


def test_a_pod_that_ran_to_its_end_gives_its_node_back_at_its_terminal_phase(cli, tmp_path):
    """A Job's pod: bound, Running, then Succeeded, deleted much later (a Job keeps its pods).
    The schedulers' informers select non-terminal pods and a kubelet counts active ones, so
    observe frees its request at the Succeeded status write, not at the delete, and a what-if
    model runs it as long as it ran."""
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}
    binding = {"kind": "Binding", "metadata": {"name": "job-1"}, "target": {"name": "n1"}}
    kubelet = {"verb": "patch", "name": "job-1", "subresource": "status", "user": "system:node:n1",
               "level": "Request", "code": 200}
    log = write_log(tmp_path / "audit.log", [
        audit_event(resource="nodes", name="n1", namespace=None, user="system:node:n1",
                    level="Request", request=node, audit_id="n", second=0),
        audit_event(name="job-1", level="Request", request=audit_pod([{"requests": {"cpu": "1"}}]),
                    audit_id="c", second=1),
        audit_event(name="job-1", subresource="binding", user="system:kube-scheduler",
                    level="Request", request=binding, audit_id="b", second=2),
        audit_event(**kubelet, request={"status": {"phase": "Running"}}, audit_id="r", second=3),
        audit_event(**kubelet, request={"status": {"phase": "Succeeded"}}, audit_id="s", second=5),
        audit_event(verb="delete", name="job-1", audit_id="d", second=40, code=200)])
    trace = tmp_path / "t.parquet"
    assert cli("ingest", log, "--out", trace).code == 0
    assert cli("run", trace, "--out", tmp_path / "run").code == 0
    events = read_run(tmp_path / "run")["events"]
    assert events["pod_state"].to_list() == [None, None, None, None, "succeeded", None]
    claims = open_runs([str(tmp_path / "run")]).sql(
        "SELECT rv, takes, change, cpu_milli FROM claims ORDER BY rv").fetchall()
    assert claims == [(3, True, "binding", 1000), (5, False, "succeeded", 1000)]
    assert cli("check", tmp_path / "run").code == 0
    # a what-if model deletes it when it ended: 3 s after its binding, as recorded
    assert cli("run", trace, "--model", "kube", "--out", tmp_path / "kube").code == 0
    pods = read_run(tmp_path / "kube")["pods"]
    assert (pods["deleted_ts"] - pods["bound_ts"]).to_list() == [dt.timedelta(seconds=3)]


def test_status_writes_without_a_phase_are_said(cli, tmp_path):
    """A Metadata-level log's status writes have no body: no pod is seen to end before its
    delete.  One phase anywhere in the trace says the log carries them."""
    rows = [(0, "create", "nodes", None, "n1", "n1", 201, 4000),
            (1, "create", "pods", None, "p", None, 201, 1000),
            (2, "create", "pods", "binding", "p", "n1", 201, None),
            (3, "patch", "pods", "status", "p", None, 200, None),
            (9, "delete", "pods", None, "p", None, 200, None)]
    note = "1 pod status write, not saying the pod's phase (the log left out their bodies"
    trace = small_trace(tmp_path / "t.parquet", rows)
    observed = cli("run", trace, "--model", "observe", "--out", tmp_path / "observe")
    assert observed.code == 0 and note in observed.err and "holds its node until its delete" \
        in observed.err
    what_if = cli("run", trace, "--model", "kube", "--out", tmp_path / "kube")
    assert what_if.code == 0 and note in what_if.err and "runs until its recorded delete" \
        in what_if.err
    phased = tmp_path / "phased.parquet"
    write_trace(read_trace(trace).with_columns(
        phase=pl.when(pl.col("subresource") == "status").then(pl.lit("Running"))),
        phased, source="test", source_args={})
    assert "phase" not in cli("run", phased, "--model", "observe", "--out",
                              tmp_path / "phased").err


def test_nodes_whose_writes_never_say_their_allocatable_are_said(cli, tmp_path):
    """A log of a running cluster whose nodes' status writes leave allocatable out: no model can
    place a pod on such a node, and a user should not have to find out from the attempts.
    Node a's create says it; b's create does not, its patch does; c's only write that says it
    failed; d is named by a binding alone; e, made before the trace, says it in its second
    write (both replays list it with it: no note)."""
    rows = [(0, "create", "nodes", None, "a", "a", 201, 4000),
            (0, "create", "nodes", None, "b", "b", 201, None),
            (0, "patch", "nodes", "status", "e", "e", 200, None),
            (1, "patch", "nodes", "status", "b", "b", 200, 4000),
            (1, "patch", "nodes", "status", "c", "c", 200, None),
            (1, "patch", "nodes", "status", "c", "c", 409, 4000),
            (1, "patch", "nodes", "status", "e", "e", 200, 4000),
            (2, "create", "pods", None, "p", None, 201, 1000),
            (3, "create", "pods", "binding", "p", "d", 201, None),
            (4, "create", "pods", None, "q", None, 201, 1000),
            (5, "create", "pods", "binding", "q", "a", 201, None)]
    never = "2 of 5 nodes: no write of theirs says their allocatable (made before the trace, " \
        "with status writes that leave it out): "
    late = "1 of 5 nodes: their create does not say their allocatable, a later write does (the " \
        "log left out the create's body): "
    trace = small_trace(tmp_path / "t.parquet", rows)
    observed = cli("run", trace, "--model", "observe", "--out", tmp_path / "observe")
    assert observed.code == 0, observed.err
    assert f"{never}each of their resources is 0 here" in observed.err
    assert f"{late}each of their resources is 0 until then" in observed.err
    what_if = cli("run", trace, "--model", "kube", "--out", tmp_path / "kube")
    assert what_if.code == 0, what_if.err
    assert f"{never}a what-if model places no pod on them (" in what_if.err
    assert f"{late}a what-if model places no pod on them until then" in what_if.err
    assert what_if.err.count("replay: warning:") == 2
    said = small_trace(tmp_path / "said.parquet", [r for r in rows if r[4] in ("a", "q")])
    assert "allocatable" not in cli("run", said, "--model", "kube", "--out",
                                    tmp_path / "said").err


@pytest.mark.parametrize("model", ["kube", "godel"])
def test_a_what_if_replay_lists_a_node_made_before_the_trace_as_observe_does(tmp_path, model):
    """A node the trace did not see created, whose allocatable only its second write says (a
    kubelet's status patch names it only when it changes): every cache held it when the log
    began, so a what-if model finds it from the trace's first write (a status write of a pod
    made before it, which a what-if model sets aside), as observe lists it, and places the pod
    created at 2 s there at once (it waited for the node's write at 60 s)."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "patch", "pods", "status", "old", None, 200, None),
        (1, "patch", "nodes", "status", "e", "e", 200, None),
        (2, "create", "pods", None, "p", None, 201, 1000),
        (3, "create", "pods", "binding", "p", "e", 201, None),
        (60, "patch", "nodes", "status", "e", "e", 200, 4000),
        (100, "delete", "pods", None, "p", None, 200, None)])
    runs = {m: run_replay(trace, load_config(model=m), out=tmp_path / m).out
            for m in ("observe", model)}
    columns = ("rv", "commit_ts", "verb", "resource", "name", "node", "cpu_milli", "code",
               "component")
    listed = {m: read_run(run)["events"].filter(origin="list").select(columns).rows()
              for m, run in runs.items()}
    assert listed[model] == listed["observe"] == [(1, T0, "create", "nodes", "e", "e", 4000, 200,
                                                   None)]
    tables = read_run(runs[model])
    first = tables["deliveries"].filter(rv=1)
    assert first["source"].unique().to_list() == ["list"]
    assert (first["applied_ts"] == first["commit_ts"]).all()
    assert set(first["watcher"]) == set(tables["watchers"].filter(
        pl.col("resources").str.split(",").list.contains("nodes"),
        pl.col("node").is_null() | (pl.col("node") == "e"))["watcher"])
    placed = tables["attempts"].filter(outcome="bound").row(0, named=True)
    assert placed["node"] == "e" and placed["decided_ts"] < T0 + dt.timedelta(seconds=3)
    assert tables["attempts"].filter(outcome="bound").height == 1
    assert not failed(check_run(runs[model]))


@pytest.mark.parametrize("model", ["kube", "godel", "omega"])
def test_a_what_if_replay_lists_the_pods_made_before_the_trace_as_observe_does(tmp_path, model):
    """A log begun while ``old`` ran on n1 (1.5 of its 2 cpu) and ``wait`` was pending: its
    status writes say so.  A what-if model lists both as observe does (the same event rows);
    ``old`` holds n1 in the truth and every cache from the first write, without an attempt,
    until its recorded delete at 3 s, and ``wait`` is the model's to schedule.  So no pod is
    placed on n1 before 3 s; before, ``old`` was set aside, and the first went to n1.  A pod
    listed on a node the trace names nowhere else is set aside, and said to be."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "patch", "nodes", "status", "n1", "n1", 200, 2000),
        (0, "create", "nodes", None, "n2", "n2", 201, 2000),
        (0.001, "patch", "pods", "status", "old", "n1", 200, 1500),
        (0.002, "patch", "pods", "status", "wait", None, 200, 500),
        (1, "create", "pods", None, "p", None, 201, 1000),
        (1.001, "create", "pods", None, "q", None, 201, 1000),
        (2, "patch", "pods", "status", "elsewhere", "n9", 200, 500),
        (3, "delete", "pods", None, "old", "n1", 200, 1500)])
    results = {m: run_replay(trace, load_config(model=m), out=tmp_path / m)
               for m in ("observe", model)}
    runs = {m: result.out for m, result in results.items()}
    assert "1 pods listed at the trace's start ran on nodes that no node write or binding of " \
        "the trace names, which a what-if model does not have: they are set aside" \
        in results[model].notes
    columns = ("rv", "commit_ts", "verb", "resource", "namespace", "name", "node", "cpu_milli",
               "code", "component")
    listed = {m: read_run(run)["events"].filter(origin="list").select(columns).rows()
              for m, run in runs.items()}
    assert listed[model] == [
        (1, T0, "create", "nodes", None, "n1", "n1", 2000, 200, None),
        (2, T0, "create", "pods", "ns", "old", "n1", 1500, 200, None),
        (3, T0, "create", "pods", "ns", "wait", None, 500, 200, None)]
    assert [row[1:] for row in listed["observe"]] == [
        row[1:] for row in listed[model][:1] + [
            (0, T0, "create", "pods", "ns", "elsewhere", "n9", 500, 200, None)]
        + listed[model][1:]]
    tables = read_run(runs[model])
    old = tables["pods"].filter(pod="ns/old").row(0, named=True)
    assert (old["node"], old["bound_ts"], old["bound_rv"], old["attempts"]) == ("n1", T0, 2, 0)
    assert old["created_ts"] is None and old["deleted_ts"] == T0 + dt.timedelta(seconds=3)
    on_node = tables["deliveries"].filter(rv=2)
    assert on_node["source"].unique().to_list() == ["list"]
    assert (on_node["applied_ts"] == on_node["commit_ts"]).all()
    assert "kubelet/n1" in on_node["watcher"] and "kubelet/n2" not in on_node["watcher"]
    bound = tables["attempts"].filter(outcome="bound")
    assert sorted(bound["pod"]) == ["ns/p", "ns/q", "ns/wait"]
    # (Gödel's schedulers race for n2, and one waits for n1)
    on_n1 = tables["attempts"].filter(pl.col("pod").is_in(["ns/p", "ns/q"]), node="n1")
    assert (on_n1["decided_ts"] > T0 + dt.timedelta(seconds=3)).all()
    assert not failed(check_run(runs[model]))


def test_a_kubelet_counts_the_pods_listed_on_its_node(tmp_path):
    """Two kube-schedulers each place a 1-cpu pod on n1 at once, where ``old`` runs on 1 of its
    2 cpu: the kubelet, which admitted ``old`` before the trace, admits the first and fails the
    second (OutOfcpu).  Without ``old`` in its account it admitted both.  ``old`` is no
    scheduler's: it takes no turn in the round-robin."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 2000),
        (0.001, "patch", "pods", "status", "old", "n1", 200, 1000),
        (1, "create", "pods", None, "p", None, 201, 1000),
        (1, "create", "pods", None, "q", None, 201, 1000)])
    config = load_config(model="kube", overrides=["schedulers=2"])
    tables = read_run(run_replay(trace, config, out=tmp_path / "run").out)
    attempts = tables["attempts"].sort("attempt_id")
    assert attempts.select("pod", "scheduler", "node", "outcome", "reason").rows()[:2] == [
        ("ns/p", "kube-scheduler-0", "n1", "bound", None),
        ("ns/q", "kube-scheduler-1", "n1", "conflict", "kubelet_admission")]
    assert not failed(check_run(tmp_path / "run"))


def test_a_watcher_of_a_node_the_trace_never_names_is_said(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('[[watchers]]\nname = "k"\nresources = ["pods"]\nnode = "node-7"\n'
                      '[[watchers]]\nname = "ok"\nresources = ["pods"]\nnode = "node-007"\n')
    result = cli("run", SAMPLE_TRACE, "--config", config, "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert result.err.count("replay: warning:") == 1
    assert "watcher 'k': its node 'node-7' is not in" in result.err
    assert "which names 200 nodes (node-000, node-001, node-002, ...): it receives nothing" \
        in result.err


def test_a_pod_bound_again_while_bound_is_said(cli, tmp_path):
    """Two committed bindings with no delete between: the log lost rows."""
    trace = small_trace(tmp_path / "t.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 0),
        (0, "create", "nodes", None, "n2", "n2", 201, 0),
        (1, "create", "pods", None, "p", None, 201, 1),
        (2, "create", "pods", "binding", "p", "n1", 201, 0),
        (3, "create", "pods", "binding", "p", "n2", 201, 0)])
    result = cli("run", trace, "--model", "observe", "--out", tmp_path / "run")
    assert result.code == 0, result.err
    assert "replay: warning: 1 pod is bound again while bound, with no delete between" \
        in result.err
    once = small_trace(tmp_path / "once.parquet", [
        (0, "create", "nodes", None, "n1", "n1", 201, 0),
        (1, "create", "pods", None, "p", None, 201, 1),
        (2, "create", "pods", "binding", "p", "n1", 201, 0),
        (3, "create", "pods", "binding", "p", "n1", 409, 0)])
    assert "bound again" not in cli("run", once, "--model", "observe", "--out",
                                    tmp_path / "once").err


def test_numbas_start_comes_after_the_checks_and_out_of_the_replay_steps_clock(tmp_path):
    """numba's start (the registries it loads at a process's first kernel, 0.14-0.27 s;
    ``replay.jit.initialize``) waits for the checks of the inputs, so that a refused run says so
    sooner, and the replay step's clock leaves it out, as it leaves out every import.  In a
    process of its own: a refused run leaves numba unstarted; a run starts it in
    ``initialize`` (no kernel before), whose time, made a second longer, the step's clock does
    not count.  (``_registries`` is numba's own record of them.)"""
    trace = tmp_path / "small.parquet"
    synthesize(SynthSpec(nodes=10, pods=200, bind="least-allocated"), trace)
    script = f"""
import time
from numba.core.registry import cpu_target
import replay.api as api
from replay.engine.config import load_config
from replay.errors import ReplayError
assert not cpu_target.target_context._registries, "numba started on import"
try:
    api.run_replay({str(trace)!r}, load_config(None, model="observe"), out={str(trace)!r})
except ReplayError:
    pass
assert not cpu_target.target_context._registries, "numba started for a refused run"
initialize, before = api.jit.initialize, []
def slower():
    before.append(len(cpu_target.target_context._registries))
    time.sleep(1)
    initialize()
api.jit.initialize = slower
started = time.perf_counter()
result = api.run_replay({str(trace)!r}, load_config(None, model="observe"),
                        out={str(tmp_path / "run")!r})
print(before, time.perf_counter() - started - result.seconds["replay"] - result.seconds["derive"])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    before, untimed = done.stdout.rsplit(" ", 1)
    assert before == "[0]"  # no kernel started numba before initialize
    assert float(untimed) >= 1
