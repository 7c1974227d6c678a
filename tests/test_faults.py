"""Fault injection: every command, given bad input or a hostile environment, fails cleanly.

Each case runs the command line as a subprocess (``python -m replay``) in a folder of its own
holding a copy of small inputs (a trace, a run directory, an audit log, the Alibaba CSVs), and
checks what docs/reliability.md promises: the exit status, one line on stderr that says what is
wrong (no traceback), nothing on stdout, and every file of the folder byte for byte as it was
(inputs unchanged, no output, no temporary left).  The cases run in parallel processes, since
each spends most of its second importing polars, pyarrow and DuckDB.

Then the process tests: a real ``kill -9`` and a real Ctrl-C (SIGINT to the process group) of
``ingest`` with its worker processes, of ``run``, ``derive`` and ``query``.  Ingest reads stdin
from a pipe that is left open after three blocks, so that its workers are certainly running
when the signal comes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replay import atomic, interrupts
from replay.api import run_replay
from replay.engine.rundir import TABLES, TableFile, write_run
from replay.engine.config import load_config
from replay.trace.synth import SynthSpec, synthesize
from replay import workers
from replay.workers import worker_pool

from audit_events import event, write_log

PYTHON = sys.executable
INJECTED = ("import sys\nfrom replay.cli.main import main\n{code}\n"
            "sys.exit(main(sys.argv[1:]))")
DROP_CAPABILITIES = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--"]
TIMEOUT = 300  # a case takes seconds; this only stops one that hangs
ACTED_ON = 20  # seconds in which a command acts on a Ctrl-C (the injected renames wait 60)


# --- the inputs every case starts from ----------------------------------------------------------

NODES_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,786432,8,V100\nn2,64000,262144,0,\n"
PODS_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
               "creation_time,deletion_time,scheduled_time\n")
PODS_CSV = PODS_HEADER + "p1,1000,1024,1,1000,,LS,Running,10,20,11\n" \
                         "p2,2000,2048,0,0,,BE,Running,12,40,13\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """The inputs, made once: copied into each case's folder."""
    root = tmp_path_factory.mktemp("world")
    synthesize(SynthSpec(nodes=4, pods=30, bind="first-fit", seed=1), root / "trace.parquet")
    run_replay(root / "trace.parquet", load_config(), out=root / "run")
    write_log(root / "a.log", [event(audit_id=f"e{i}", name=f"web-{i}", second=i)
                               for i in range(3)])
    (root / "nodes.csv").write_text(NODES_CSV)
    (root / "pods.csv").write_text(PODS_CSV)
    return root


def snapshot(folder: Path) -> dict[str, str]:
    """Every path under ``folder`` (hidden ones too) and what it is: a file's SHA-256, a link's
    target, or a directory."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key, mode = str(path.relative_to(folder)), path.lstat().st_mode
        if stat.S_ISLNK(mode):
            found[key] = "-> " + os.readlink(path)
        elif stat.S_ISDIR(mode):
            found[key] = "dir"
        elif stat.S_ISREG(mode):
            found[key] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[key] = f"special {stat.S_IFMT(mode):o}"
    return found


# --- the cases ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]
    message: str  # in the one line on stderr
    setup: Callable[[Path], None] | None = None
    status: int = 1
    unprivileged: bool = False  # run without root's capabilities (to meet a read-only folder)
    inject: str | None = None  # Python run in the process before the command
    appears: tuple[str, ...] = ()  # paths another process creates meanwhile (not the command)


def lines(path: str, *texts: bytes) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        (folder / path).write_bytes(b"".join(text + b"\n" for text in texts))
    return setup


def text(path: str, content: str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(content)
    return setup


def both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        for one in setups:
            one(folder)
    return setup


def read_only(path: str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        (folder / path).mkdir(exist_ok=True)
        (folder / path).chmod(0o555)
    return setup


def full_disk(path: str, size: str = "16k") -> Callable[[Path], None]:
    """A tmpfs of ``size`` at ``path`` (the test is skipped where it cannot be mounted)."""
    def setup(folder: Path) -> None:
        (folder / path).mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(folder / path)], capture_output=True)
        if done.returncode != 0:
            raise CannotMount(done.stderr.decode(errors="replace").strip())
    return setup


def read_only_disk(path: str, *inputs: str) -> Callable[[Path], None]:
    """A tmpfs at ``path`` holding copies of ``inputs``, then mounted read-only."""
    def setup(folder: Path) -> None:
        full_disk(path, "64m")(folder)
        copied_in = [copied(name, f"{path}/{name}") for name in inputs]
        both(*copied_in)(folder)
        subprocess.run(["mount", "-o", "remount,ro", str(folder / path)], check=True)
    return setup


class CannotMount(Exception):
    pass


def damaged(path: str, at: int = -100) -> Callable[[Path], None]:
    """Flip one byte of ``path`` (keeping its size)."""
    def setup(folder: Path) -> None:
        data = bytearray((folder / path).read_bytes())
        data[at] ^= 0xFF
        (folder / path).write_bytes(bytes(data))
    return setup


def truncated(path: str, keep: int) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        data = (folder / path).read_bytes()
        (folder / path).write_bytes(data[:keep])
    return setup


def copied(source: str, dest: str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        if (folder / source).is_dir():
            shutil.copytree(folder / source, folder / dest)
        else:
            shutil.copy(folder / source, folder / dest)
    return setup


def linked(source: str, dest: str, hard: bool = False) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        if hard:
            os.link(folder / source, folder / dest)
        else:
            os.symlink(source, folder / dest)
    return setup


def edited_manifest(run: str, **changes: Any) -> Callable[[Path], None]:
    """The run's manifest.json with keys replaced (``"key.inner"``: inside an object) or, given
    ``DROP``, removed: a manifest edited by hand, or written by an older version."""
    def setup(folder: Path) -> None:
        manifest = json.loads((folder / run / "manifest.json").read_text())
        for key, value in changes.items():
            *outer, last = key.split(".")
            holder = manifest[outer[0]] if outer else manifest
            if value is DROP:
                del holder[last]
            else:
                holder[last] = value
        (folder / run / "manifest.json").write_text(json.dumps(manifest))
    return setup


DROP = object()


def moved(source: str, dest: str) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        (folder / source).rename(folder / dest)
    return setup


def no_checksums(run: str) -> Callable[[Path], None]:
    return edited_manifest(run, files=DROP)


GOOD = json.dumps(event(audit_id="g", second=0)).encode()


def audit(audit_id: str = "x", **changes) -> bytes:
    """A JSON line of an audit event with keys replaced."""
    base = event(audit_id=audit_id, name="web-9", second=1)
    for key, value in changes.items():
        key = {"received": "requestReceivedTimestamp", "stage": "stageTimestamp"}.get(key, key)
        base[key] = value
    return json.dumps(base).encode()


def deep(depth: int) -> bytes:
    return GOOD[:-1] + b', "requestObject": ' + b"[" * depth + b"]" * depth + b"}"


FULL_AT_FLUSH = ("import errno, os, replay.atomic\n"  # a full disk, found when flushing
                 "def full(path):\n"
                 "    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
                 "replay.atomic.fsync = full")
POD_SPEC = {"kind": "Pod", "spec": {"containers": [{"name": "c"}], "priority": 2**40}}
QUERY = ["query", "run"]
EVERY_DELIVERY = "SELECT * FROM deliveries"  # more than a page, as CSV or Parquet
WATCHERS = '[[watchers]]\nname = "{name}"\nresources = {resources}\n{extra}'

CASES = [
    # synth ---------------------------------------------------------------------------------------
    Case("synth-out-is-a-directory", ("synth", "--out", "run"), "run: is a directory"),
    Case("synth-out-is-a-pipe", ("synth", "--out", "pipe"), "pipe: is not a regular file",
         setup=lambda folder: os.mkfifo(folder / "pipe")),
    Case("synth-file-where-a-folder-is-expected", ("synth", "--out", "a.log/t.parquet"),
         "a.log: Not a directory"),
    Case("synth-read-only-folder", ("synth", "--out", "ro/t.parquet"), "ro: Permission denied",
         setup=read_only("ro"), unprivileged=True),
    Case("synth-disk-full", ("synth", "--pods", "3000", "--out", "full/t.parquet"),
         "full/t.parquet: No space left on device", setup=full_disk("full")),
    Case("synth-disk-full-keeps-the-old-trace", ("synth", "--pods", "3000", "--out",
                                                 "full/t.parquet"),
         "full/t.parquet: No space left on device",
         setup=both(full_disk("full"), copied("trace.parquet", "full/t.parquet"))),
    Case("synth-infinite-lifetime", ("synth", "--mean-lifetime", "inf", "--out", "t2.parquet"),
         "--mean-lifetime must be a finite number"),
    Case("synth-too-many-rows", ("synth", "--pods", "100000000", "--out", "t2.parquet"),
         "more than the limit of 250,000,000"),
    Case("synth-trace-past-year-9999", ("synth", "--start", "9999-12-31", "--mean-lifetime",
                                        "100000", "--out", "t2.parquet"),
         "would end after 9999-01-01, the limit of a trace's times"),
    Case("synth-trace-before-year-1", ("synth", "--start", "0001-01-01", "--out", "t2.parquet"),
         "would begin (its first request received) before 0001-01-01"),
    # ingest --------------------------------------------------------------------------------------
    Case("ingest-out-is-the-log", ("ingest", "a.log", "--out", "a.log"), "a.log: is the input"),
    Case("ingest-a-trace", ("ingest", "trace.parquet", "--out", "t2.parquet"),
         "trace.parquet: a Parquet file (a trace?), not an audit log"),
    Case("ingest-binary", ("ingest", "b.log", "--out", "t2.parquet"),
         "b.log:1: not valid JSON (JSON is malformed: invalid character (byte 0))",
         setup=lines("b.log", b"\x00\x01binary")),
    Case("ingest-out-is-a-hard-link", ("ingest", "a.log", "--out", "b.log"),
         "b.log: is the input a.log (a link to it)", setup=linked("a.log", "b.log", hard=True)),
    Case("ingest-out-is-a-symlink", ("ingest", "a.log", "--out", "b.log"),
         "b.log: is the input a.log (a link to it)", setup=linked("a.log", "b.log")),
    Case("ingest-invalid-utf8", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: not valid JSON (invalid UTF-8",
         setup=lines("bad.log", GOOD, audit(user={"username": "u"}).replace(b'"u"', b'"\xff"'))),
    Case("ingest-deeply-nested-json", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: JSON nested too deeply", setup=lines("bad.log", GOOD, deep(100_000))),
    Case("ingest-line-over-64-mib", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: a line longer than 64 MiB",
         setup=lines("bad.log", GOOD, b'{"kind": "' + b"x" * (65 << 20) + b'"}', GOOD)),
    Case("ingest-status-code-out-of-range", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: key responseStatus.code: 999 is not an HTTP status",
         setup=lines("bad.log", GOOD, audit(responseStatus={"code": 999}))),
    Case("ingest-time-past-a-traces", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: key stageTimestamp: outside the times a trace may hold (from 0001-01-01 up "
         "to 9999-01-01)", setup=lines("bad.log", GOOD, audit(received="9999-06-01T00:00:00Z",
                                                               stage="9999-06-01T00:00:01Z"))),
    Case("ingest-status-code-beyond-int64", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: key responseStatus.code",
         setup=lines("bad.log", GOOD, audit(responseStatus={"code": 2**70}))),
    Case("ingest-received-after-completed", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: key requestReceivedTimestamp: later than the stageTimestamp",
         setup=lines("bad.log", GOOD, audit(received="2026-03-01T10:00:30.000000Z"))),
    Case("ingest-priority-beyond-int32", ("ingest", "bad.log", "--out", "t2.parquet"),
         "bad.log:2: key requestObject.spec.priority",
         setup=lines("bad.log", GOOD, audit(level="Request", requestObject=POD_SPEC))),
    Case("ingest-a-directory", ("ingest", "run", "--out", "t2.parquet"),
         "run: is a directory, not an audit log"),
    Case("ingest-read-only-folder", ("ingest", "a.log", "--out", "ro/t.parquet"),
         "ro: Permission denied", setup=read_only("ro"), unprivileged=True),
    # import --------------------------------------------------------------------------------------
    Case("import-out-is-the-pods-csv",
         ("import", "alibaba-gpu-2023", "--pods", "pods.csv", "--nodes", "nodes.csv", "--out",
          "pods.csv"), "pods.csv: is the input pods.csv"),
    Case("import-memory-overflows",
         ("import", "alibaba-gpu-2023", "--pods", "p.csv", "--nodes", "nodes.csv", "--out",
          "t2.parquet"), "p.csv:2: column memory_mib is 9000000000000000",
         setup=text("p.csv", PODS_HEADER + "p1,1,9000000000000000,0,0,,LS,Running,1,2,\n")),
    Case("import-gpus-overflow",
         ("import", "alibaba-gpu-2023", "--pods", "p.csv", "--nodes", "nodes.csv", "--out",
          "t2.parquet"), "p.csv:2: column num_gpu",
         setup=text("p.csv", PODS_HEADER + f"p1,1,1,{2**62},1000,,LS,Running,1,2,\n")),
    Case("import-time-overflows",
         ("import", "alibaba-gpu-2023", "--pods", "p.csv", "--nodes", "nodes.csv", "--out",
          "t2.parquet"), "p.csv:2: column creation_time is 9000000000000000000",
         setup=text("p.csv", PODS_HEADER + "p1,1,1,0,0,,LS,Running,9000000000000000000,"
                                           "9000000000000000001,\n")),
    Case("import-deleted-before-created",
         ("import", "alibaba-gpu-2023", "--pods", "p.csv", "--nodes", "nodes.csv", "--out",
          "t2.parquet"), "p.csv:3: column deletion_time is 5: before the pod's creation_time",
         setup=text("p.csv", PODS_CSV.splitlines()[0] + "\np0,1,1,0,0,,LS,Running,1,2,\n"
                                                        "p1,1,1,0,0,,LS,Running,10,5,\n")),
    Case("import-out-is-a-directory",
         ("import", "alibaba-gpu-2023", "--pods", "pods.csv", "--nodes", "nodes.csv", "--out",
          "run"), "run: is a directory"),
    Case("import-parquet-out-is-the-table",
         ("import", "parquet", "--table", "trace.parquet", "--out", "trace.parquet"),
         "trace.parquet: is the input"),
    Case("import-parquet-truncated-table",
         ("import", "parquet", "--table", "cut.parquet", "--out", "t2.parquet"),
         "cut.parquet: not a readable Parquet file",
         setup=both(copied("trace.parquet", "cut.parquet"), truncated("cut.parquet", 300))),
    Case("import-parquet-a-log", ("import", "parquet", "--table", "a.log", "--out", "t2.parquet"),
         "a.log: not a readable Parquet file"),
    Case("import-parquet-a-directory",
         ("import", "parquet", "--table", "run", "--out", "t2.parquet"), "run: is a directory"),
    # validate ------------------------------------------------------------------------------------
    Case("validate-a-directory", ("validate", "run"), "run: is a directory"),
    Case("validate-truncated-trace", ("validate", "cut.parquet"), "not a readable Parquet file",
         setup=both(copied("trace.parquet", "cut.parquet"), truncated("cut.parquet", 300))),
    Case("validate-unreadable-trace", ("validate", "secret.parquet"), "Permission denied",
         setup=both(copied("trace.parquet", "secret.parquet"),
                    lambda folder: (folder / "secret.parquet").chmod(0)), unprivileged=True),
    # run -----------------------------------------------------------------------------------------
    Case("run-force-over-the-folder-of-its-trace", ("run", "t/trace.parquet", "--out", "t",
                                                    "--force"),
         "t: holds the input t/trace.parquet",
         setup=both(copied("run", "t"), copied("trace.parquet", "t/trace.parquet"))),
    Case("run-force-over-a-folder-that-is-no-run", ("run", "trace.parquet", "--out", "mine",
                                                    "--force"),
         "mine: is not a run directory written by replay",
         setup=text("mine/notes.txt", "my notes")),
    Case("run-force-over-a-run-holding-other-files", ("run", "trace.parquet", "--out", "r2",
                                                      "--force"),
         "r2: holds files replay did not write (notes.txt)",
         setup=both(copied("run", "r2"), text("r2/notes.txt", "mine"))),
    Case("run-force-over-a-file", ("run", "trace.parquet", "--out", "a.log", "--force"),
         "a.log: exists and is not a directory"),
    Case("run-force-over-a-link-to-a-run", ("run", "trace.parquet", "--out", "link", "--force"),
         "link: is a symbolic link; not replacing it", setup=linked("run", "link")),
    Case("run-out-exists", ("run", "trace.parquet", "--out", "run"), "run: already exists"),
    Case("run-out-not-utf8", ("run", "trace.parquet", "--out", "r\udcff"),
         "r\\xff: not UTF-8 (byte 1)"),
    Case("run-out-name-too-long-for-its-temporary", ("run", "trace.parquet", "--out", "x" * 240),
         "a name of 240 bytes; replay writes it first under a temporary name up to 38 bytes"),
    Case("run-config-inside-the-out-folder",
         ("run", "trace.parquet", "--config", "run/c.toml", "--out", "run", "--force"),
         "run: holds the input run/c.toml", setup=text("run/c.toml", "seed = 1\n")),
    Case("run-out-read-only-folder", ("run", "trace.parquet", "--out", "ro/r"),
         "ro: Permission denied", setup=read_only("ro"), unprivileged=True),
    Case("run-out-on-a-read-only-disk", ("run", "trace.parquet", "--out", "full/r"),
         "full: Read-only file system", setup=read_only_disk("full")),
    Case("run-disk-full", ("run", "trace.parquet", "--out", "full/r"),
         "No space left on device", setup=full_disk("full")),
    Case("run-force-fails-keeps-the-old-run", ("run", "trace.parquet", "--out", "run",
                                               "--force"),
         "run/manifest.json: No space left on device", inject=FULL_AT_FLUSH),
    Case("run-concurrent-writer-won",
         ("run", "trace.parquet", "--out", "race"),
         "race: another process wrote it meanwhile",
         inject="import os\nreal = os.rename\n"
                "def racing(source, dest, *args, **kwargs):\n"
                "    if str(dest).endswith('race'):\n"
                "        os.mkdir(dest)\n"
                "        open(os.path.join(dest, 'theirs.txt'), 'w').write('theirs')\n"
                "    return real(source, dest, *args, **kwargs)\n"
                "os.rename = racing",
         appears=("race", "race/theirs.txt")),
    Case("run-watcher-of-nothing-in-the-trace",
         ("run", "trace.parquet", "--config", "w.toml", "--out", "r2"),
         "watcher 'typo': its resources (pod) name nothing in trace.parquet, which holds nodes, "
         "pods", setup=text("w.toml", WATCHERS.format(name="typo", resources='["pod"]', extra=""))),
    Case("run-a-hundred-million-replicas",
         ("run", "trace.parquet", "--config", "w.toml", "--out", "r2"),
         "more than 1,000,000 watchers, the limit",
         setup=text("w.toml", WATCHERS.format(name="w", resources='["pods"]',
                                              extra="replicas = 100000000\n"))),
    Case("run-what-if-without-its-scheduler-watcher",
         ("run", "trace.parquet", "--model", "kube", "--config", "w.toml", "--out", "r2"),
         "w.toml: the [[watchers]] list has no watcher named 'kube-scheduler-0', which the kube "
         "model's components need (kube-scheduler-0)",
         setup=text("w.toml", WATCHERS.format(name="kube-scheduler", resources='["pods"]',
                                              extra=""))),
    Case("run-what-if-scheduler-blind-to-nodes",
         ("run", "trace.parquet", "--model", "kube", "--config", "w.toml", "--out", "r2"),
         "w.toml: watcher 'kube-scheduler-0' must watch nodes too",
         setup=text("w.toml", WATCHERS.format(name="kube-scheduler-0", resources='["pods"]',
                                              extra=""))),
    Case("run-nan-parameter", ("run", "trace.parquet", "--model", "kube", "-p",
                               "per_node_ms=nan", "--out", "r2"), "expected a finite number"),
    Case("run-percentage-over-100", ("run", "trace.parquet", "--model", "kube", "-p",
                                     "percentage_of_nodes_to_score=150", "--out", "r2"),
         "must be <= 100"),
    Case("run-a-hundred-thousand-schedulers", ("run", "trace.parquet", "--model", "godel", "-p",
                                               "schedulers=100000", "--out", "r2"),
         "must be <= 1000"),
    Case("run-duration-beyond-int64", ("run", "trace.parquet", "--model", "kube", "-p",
                                       "backoff_max_ms=1e300", "--out", "r2"), "must be <="),
    Case("run-negative-seed", ("run", "trace.parquet", "--seed", "-1", "--out", "r2"),
         "--seed: expected an integer from 0"),
    Case("run-stage-cost-beyond-int64", ("run", "trace.parquet", "--config", "c.toml", "--out",
                                         "r2"), "more than the limit",
         setup=text("c.toml", '[stages.network]\nlatency = { dist = "constant", ms = 1e300 }\n')),
    # derive --------------------------------------------------------------------------------------
    Case("derive-damaged-table", ("derive", "run"), "the events table is damaged",
         setup=damaged("run/events.parquet")),
    Case("derive-no-such-run", ("derive", "nowhere"), "nowhere: no such run directory"),
    Case("derive-manifest-tables-edited", ("derive", "run"),
         "run/manifest.json: unreadable manifest ('tables' must be an object)",
         setup=edited_manifest("run", tables=5)),
    Case("derive-manifest-row-count-edited", ("derive", "run"), "'tables' must map each table "
         "to its number of rows", setup=edited_manifest("run", **{"tables.pods": "many"})),
    Case("derive-read-only-run", ("derive", "run"), "run: Permission denied",
         setup=lambda folder: (folder / "run").chmod(0o555), unprivileged=True),
    Case("derive-run-on-a-read-only-disk", ("derive", "full/run"),
         "full/run: Read-only file system", setup=read_only_disk("full", "run")),
    # query ---------------------------------------------------------------------------------------
    Case("query-out-over-a-run-table", (*QUERY, "conflict_rate", "--format", "parquet", "--out",
                                        "run/events.parquet"),
         "run/events.parquet: lies inside the input run"),
    Case("query-out-is-the-run", (*QUERY, "conflict_rate", "--format", "csv", "--out", "run"),
         "run: is the input run"),
    Case("query-out-is-the-query", (*QUERY, "q.sql", "--format", "csv", "--out", "q.sql"),
         "q.sql: is the input q.sql", setup=text("q.sql", "SELECT 1 AS one")),
    Case("query-copy-to", (*QUERY, "q.sql"), "statement 1 (COPY (SELECT ...) is refused",
         setup=text("q.sql", "COPY (SELECT 1) TO 'run/events.parquet' (FORMAT parquet)")),
    Case("query-create-table", (*QUERY, "q.sql"), "statement 2 (CREATE TABLE ...) is refused",
         setup=text("q.sql", "SET VARIABLE x = 1;\nCREATE TABLE t AS SELECT 1;\nSELECT 1")),
    Case("query-attach", (*QUERY, "q.sql"), "(ATTACH 'run/x.db' ...) is refused",
         setup=text("q.sql", "ATTACH 'run/x.db';\nSELECT 1")),
    Case("query-install-extension", (*QUERY, "q.sql"), "(INSTALL httpfs ...) is refused",
         setup=text("q.sql", "INSTALL httpfs;\nSELECT 1")),
    Case("query-load-extension", (*QUERY, "q.sql"), "(LOAD json ...) is refused",
         setup=text("q.sql", "LOAD json;\nSELECT 1")),
    Case("query-pragma", (*QUERY, "q.sql"), "(PRAGMA threads=1 ...) is refused",
         setup=text("q.sql", "PRAGMA threads=1;\nSELECT 1")),
    Case("query-change-a-setting", (*QUERY, "q.sql"), "(SET enable_external_access=true ...) is "
         "refused", setup=text("q.sql", "SET enable_external_access=true;\nSELECT 1")),
    Case("query-read-outside-the-runs", (*QUERY, "q.sql"), "Permission Error",
         setup=text("q.sql", "SELECT * FROM read_csv('/etc/passwd')")),
    Case("query-point-the-views-elsewhere", (*QUERY, "q.sql"), "Permission Error",
         setup=text("q.sql", "SET VARIABLE run_dirs = ['/etc'];\nSELECT * FROM runs")),
    Case("query-through-a-link-in-a-run", (*QUERY, "q.sql"), "Cannot access file \"run/etc/passwd\"",
         setup=both(text("q.sql", "SELECT * FROM read_csv('run/etc/passwd')"),
                    lambda folder: os.symlink("/etc", folder / "run" / "etc"))),
    Case("query-out-name-too-long-for-its-temporary",
         (*QUERY, "conflict_rate", "--format", "csv", "--out", "y" * 240),
         "a name of 240 bytes; replay writes it first under a temporary name up to 38 bytes"),
    Case("query-empty-file", (*QUERY, "q.sql"), "q.sql: holds no SQL statement",
         setup=text("q.sql", "")),
    Case("query-comments-only", (*QUERY, "q.sql"), "q.sql: holds no SQL statement",
         setup=text("q.sql", "-- what it would answer\n/* nothing yet */\n")),
    Case("query-damaged-table", (*QUERY, "conflict_rate"), "the deliveries table is damaged",
         setup=damaged("run/deliveries.parquet")),
    Case("query-truncated-table", (*QUERY, "conflict_rate"), "run: the attempts table is "
         "damaged", setup=truncated("run/attempts.parquet", 1000)),
    Case("query-table-linked-from-outside", (*QUERY, "conflict_rate"),
         "run/pods.parquet: a symbolic link out of the run directory",
         setup=both(moved("run/pods.parquet", "pods.parquet"),
                    linked("../pods.parquet", "run/pods.parquet"))),
    Case("query-manifest-seed-edited", (*QUERY, "conflict_rate"),
         "run/manifest.json: unreadable manifest ('seed' must be an integer)",
         setup=edited_manifest("run", seed="7")),
    Case("query-manifest-without-model-name", (*QUERY, "conflict_rate"),
         "('model.name' must be a string)", setup=edited_manifest("run", **{"model.name": DROP})),
    Case("query-manifest-file-sizes-edited", (*QUERY, "conflict_rate"),
         "('files' must give each table's bytes and sha256)",
         setup=edited_manifest("run", **{"files.pods": {"bytes": "1"}})),
    Case("query-verify-a-run-without-checksums", (*QUERY, "conflict_rate", "--verify"),
         "written by an older version of replay, without checksums",
         setup=no_checksums("run")),
    Case("query-out-read-only-folder", (*QUERY, "conflict_rate", "--format", "csv", "--out",
                                        "ro/out.csv"), "ro: Permission denied",
         setup=read_only("ro"), unprivileged=True),
    Case("query-disk-full-at-flush", (*QUERY, "conflict_rate", "--format", "csv", "--out",
                                      "out.csv"), "out.csv: No space left on device",
         setup=text("out.csv", "an earlier answer\n"), inject=FULL_AT_FLUSH),
    *[Case(f"query-stdout-temporary-folder-full-{fmt}", (*QUERY, "q.sql", "--format", fmt),
           "/full: No space left on device (the result waits there to be printed; TMPDIR names",
           setup=both(full_disk("full", "4k"), text("q.sql", EVERY_DELIVERY)),
           inject="import os\nos.environ['TMPDIR'] = 'full'")
      for fmt in ("csv", "json")],
    # DuckDB's own writers (CSV, Parquet) meet the full disk, not Python's
    *[Case(f"query-disk-full-{fmt}", (*QUERY, "q.sql", "--format", fmt, "--out",
                                      f"full/out.{fmt}"), f"full/out.{fmt}: No space left on device",
           setup=both(full_disk("full", "4k"), text("q.sql", EVERY_DELIVERY)))
      for fmt in ("csv", "parquet")],
]


def command(case: Case) -> list[str]:
    if case.inject is not None:
        prefix = [PYTHON, "-c", INJECTED.format(code=case.inject)]
    else:
        prefix = [PYTHON, "-m", "replay"]
    if case.unprivileged and os.geteuid() == 0:
        prefix = DROP_CAPABILITIES + prefix
    return prefix + list(case.args)


@dataclasses.dataclass
class Outcome:
    done: subprocess.CompletedProcess | None = None
    before: dict | None = None
    after: dict | None = None
    skipped: str | None = None


def prepare(case: Case, world: Path, root: Path, mounts: list[Path]) -> tuple[Path, Outcome]:
    folder = root / case.name
    shutil.copytree(world, folder)
    (folder / "tmp").mkdir()
    outcome = Outcome()
    if case.unprivileged and os.geteuid() == 0 and shutil.which("setpriv") is None:
        outcome.skipped = "running as root without setpriv to drop the capabilities"
        return folder, outcome
    try:
        if case.setup is not None:
            case.setup(folder)
    except CannotMount as err:
        outcome.skipped = f"cannot mount a tmpfs here ({err})"
        return folder, outcome
    finally:
        if (folder / "full").is_mount():
            mounts.append(folder / "full")
    outcome.before = snapshot(folder)
    return folder, outcome


def execute(case: Case, folder: Path, outcome: Outcome) -> Outcome:
    if outcome.skipped is None:
        env = {**os.environ, "TMPDIR": str(folder / "tmp")}
        try:
            outcome.done = subprocess.run(command(case), cwd=folder, env=env,
                                          capture_output=True, text=True, errors="replace",
                                          timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            outcome.done = subprocess.CompletedProcess(case.args, None, "",
                                                       f"timed out after {TIMEOUT} s")
        outcome.after = snapshot(folder)
        for path in [folder, *folder.rglob("*")]:  # so that the folder can be removed
            if path.is_dir() and not path.is_symlink() and not path.is_mount():
                with contextlib.suppress(OSError):  # a read-only mount's: removed unmounted
                    path.chmod(0o755)
    return outcome


@pytest.fixture(scope="module")
def outcomes(world, tmp_path_factory, request) -> dict[str, Outcome]:
    """Every selected case run, several at a time."""
    root = tmp_path_factory.mktemp("cases")
    selected = {item.callspec.params["case"].name for item in request.session.items
                if "case" in getattr(getattr(item, "callspec", None), "params", {})}
    cases = [case for case in CASES if case.name in selected]
    mounts: list[Path] = []
    try:
        prepared = {case.name: prepare(case, world, root, mounts) for case in cases}
        with concurrent.futures.ThreadPoolExecutor((os.cpu_count() or 2) + 1) as pool:
            futures = {case.name: pool.submit(execute, case, *prepared[case.name])
                       for case in cases}
            yield {name: future.result() for name, future in futures.items()}
    finally:
        for mount in mounts:
            subprocess.run(["umount", str(mount)], capture_output=True)


def test_the_suite_is_large_enough():
    assert len({case.name for case in CASES}) == len(CASES) >= 40
    assert {case.args[0] for case in CASES} == {"synth", "ingest", "import", "validate", "run",
                                                "derive", "query"}


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_fault(case: Case, outcomes):
    outcome = outcomes[case.name]
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    done = outcome.done
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == case.status, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("replay: error: "), done.stderr
    assert case.message in done.stderr
    assert done.stdout == ""
    after = {path: kind for path, kind in outcome.after.items() if path not in case.appears}
    assert after == outcome.before  # inputs byte for byte, no output, no temporary left


# --- kill -9 and Ctrl-C ---------------------------------------------------------------------------

def audit_stream(megabytes: int) -> bytes:
    """About ``megabytes`` MiB of audit events (one event, repeated: duplicates are cheap)."""
    line = json.dumps(event(audit_id="same", second=1)).encode() + b"\n"
    return line * ((megabytes << 20) // len(line) + 1)


def children(pid: int) -> set[int]:
    """Every descendant of ``pid`` still alive (zombies excluded)."""
    found, queue = set(), [pid]
    while queue:
        parent = queue.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                if kid not in found and alive(kid):
                    found.add(kid)
                    queue.append(kid)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(condition: Callable[[], object], seconds: float = 120, what: str = "it") -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f"waited {seconds} s for {what}")


def temporaries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.name.endswith(".replay-tmp"))


def replay(*args: str, folder: Path, inject: str | None = None, **kwargs) -> subprocess.Popen:
    """``replay ARGS`` in ``folder``, in a session of its own; ``process.diagnosis`` is the file
    where ``DIAGNOSABLE`` code, if injected, writes (``interrupted`` keeps it only when needed)."""
    DIAGNOSES.mkdir(exist_ok=True)
    diagnosis = DIAGNOSES / f"{os.getpid()}-{time.time_ns()}.txt"
    env = {**os.environ, "TMPDIR": str(folder / "tmp"), "REPLAY_TEST_DIAGNOSIS": str(diagnosis)}
    (folder / "tmp").mkdir(exist_ok=True)
    prefix = ["-m", "replay"] if inject is None else ["-c", INJECTED.format(code=inject)]
    process = subprocess.Popen([PYTHON, *prefix, *args], cwd=folder, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               start_new_session=True, **kwargs)
    process.diagnosis = diagnosis  # type: ignore[attr-defined]
    return process


needs_proc = pytest.mark.skipif(not Path("/proc/self/task").exists(),
                                reason="needs /proc to find worker processes")


@pytest.fixture
def ingesting(tmp_path):
    """``replay ingest - --out t.parquet`` with its two workers running, reading a pipe that
    stays open after three blocks."""
    process = replay("ingest", "-", "--out", "t.parquet", folder=tmp_path,
                     stdin=subprocess.PIPE)
    process.stdin.write(audit_stream(56))
    process.stdin.flush()
    workers = wait_for(lambda: len(children(process.pid)) >= 2 and children(process.pid),
                       what="the ingest's workers")
    yield process, workers
    for pid in [process.pid, *children(process.pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@needs_proc
def test_kill_9_of_ingest_leaves_no_process_and_the_next_ingest_cleans_up(ingesting, tmp_path):
    process, workers = ingesting
    assert temporaries(tmp_path)  # the spill folder
    os.kill(process.pid, signal.SIGKILL)
    process.wait(TIMEOUT)
    wait_for(lambda: not any(alive(pid) for pid in workers), seconds=5,
             what="the workers to die with their parent")
    assert not (tmp_path / "t.parquet").exists()
    assert temporaries(tmp_path)  # left by the killed process: the next write removes it
    (tmp_path / "a.log").write_bytes(audit_stream(1))
    again = replay("ingest", "a.log", "--out", "t.parquet", folder=tmp_path)
    assert again.wait(TIMEOUT) == 0, again.stderr.read()
    assert (tmp_path / "t.parquet").exists() and temporaries(tmp_path) == []


@needs_proc
def test_ctrl_c_of_ingest_with_workers(ingesting, tmp_path):
    process, workers = ingesting
    os.killpg(process.pid, signal.SIGINT)  # as a terminal does: every process of the command
    process.stdin.close()
    assert process.wait(TIMEOUT) == 130
    err = process.stderr.read().decode()
    assert err == "replay: interrupted\n"  # and no traceback from a worker either
    wait_for(lambda: not any(alive(pid) for pid in workers), seconds=5, what="the workers")
    assert not (tmp_path / "t.parquet").exists() and temporaries(tmp_path) == []


@pytest.fixture(scope="module")
def medium(tmp_path_factory) -> Path:
    """A trace whose replay and derivation take a second or two."""
    root = tmp_path_factory.mktemp("medium")
    synthesize(SynthSpec(nodes=50, pods=3000, bind="least-allocated"), root / "m.parquet")
    return root / "m.parquet"


# Injected into a command whose Ctrl-C is tested: it waits for the signal before it renames its
# first temporary into place.  A small run renames its run directory 0.6 s after making it; a
# loaded CI machine once let the test signal it only after that, and the command exited 0.
# Injected before a command whose Ctrl-C is tested, for ``interrupted`` to diagnose one that is not
# acted on: into the file REPLAY_TEST_DIAGNOSIS names, the SIGINT disposition and mask the process
# started with, every thread's stack on SIGUSR2 (written by C, whatever the main thread does), and
# ``replay.interrupts``' state on SIGUSR1 (written when the main thread runs Python).  The file is
# outside the test's temporary folder, so that one written by a CI run can be read after it.
DIAGNOSES = Path(tempfile.gettempdir()) / "replay-test-diagnoses"
DIAGNOSABLE = """import faulthandler, os, signal
_diagnosis = open(os.environ["REPLAY_TEST_DIAGNOSIS"], "a", buffering=1)
_diagnosis.write(f"started with SIGINT {signal.getsignal(signal.SIGINT)!r}, blocked "
                 f"{sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))}\\n")
faulthandler.register(signal.SIGUSR2, file=_diagnosis, all_threads=True)
def _interrupts_state(signum, frame):
    from replay import interrupts
    _diagnosis.write(f"interrupts: holding {interrupts._holding}, held {interrupts._held}, "
                     f"received {interrupts.received()}, SIGINT {signal.getsignal(signal.SIGINT)!r}, "
                     f"blocked {sorted(signal.pthread_sigmask(signal.SIG_BLOCK, []))}\\n")
signal.signal(signal.SIGUSR1, _interrupts_state)
"""
WAITS_FOR_THE_SIGNAL = DIAGNOSABLE + ("import os, time\n"
                        "def waiting(rename):\n"
                        "    def renaming(source, dest, *args, **kwargs):\n"
                        "        if str(source).endswith('.replay-tmp'):\n"
                        "            time.sleep(60)  # the signal lands here at the latest\n"
                        "        return rename(source, dest, *args, **kwargs)\n"
                        "    return renaming\n"
                        "os.rename, os.replace = waiting(os.rename), waiting(os.replace)")


def interrupted(process: subprocess.Popen, folder: Path, how: int, later: float = 0) -> str:
    """Signal ``process`` (the whole group, for SIGINT) once it has a temporary in ``folder``
    (and ``later`` seconds more); its stderr.

    A SIGINT not acted on within ``ACTED_ON`` seconds is diagnosed (``diagnose``) and sent
    again, with a warning that names the diagnosis.  One that pyarrow swallowed did that twice
    in four CI runs (``SWALLOWED_BY_A_LIBRARY``); one that another thread receives while the
    main thread sleeps in an injected rename is acted on only when the sleep ends.  What the
    command does once a Ctrl-C reaches it is still checked."""
    wait_for(lambda: temporaries(folder), what="the command to start writing")
    time.sleep(later)
    if how != signal.SIGINT:
        os.kill(process.pid, how)
        process.wait(TIMEOUT)
        process.diagnosis.unlink(missing_ok=True)
        return process.stderr.read().decode()
    os.killpg(process.pid, how)
    try:
        process.wait(ACTED_ON)
    except subprocess.TimeoutExpired:
        diagnose(process)
        os.killpg(process.pid, how)
        process.wait(TIMEOUT)
        warnings.warn(f"a SIGINT was not acted on in {ACTED_ON} s and was sent again; what the "
                      f"process showed of its signal state is in {process.diagnosis}",
                      stacklevel=2)
    else:
        process.diagnosis.unlink(missing_ok=True)
    return process.stderr.read().decode()


def diagnose(process: subprocess.Popen) -> None:
    """Add to ``process.diagnosis`` each thread's signal masks; and, where ``DIAGNOSABLE`` runs
    in it (it made the file), each thread's stack and the state of ``replay.interrupts`` once
    the main thread has written it."""
    injected = process.diagnosis.exists()  # then SIGUSR1 and SIGUSR2 do not end it
    with process.diagnosis.open("a") as diagnosis:
        diagnosis.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}: a SIGINT not acted on in "
                        f"{ACTED_ON} s; the threads' signal state: {signal_state(process.pid)}\n")
    if injected:
        os.kill(process.pid, signal.SIGUSR2)
        os.kill(process.pid, signal.SIGUSR1)
        time.sleep(1)


def signal_state(pid: int) -> dict[str, str]:
    """The signal masks of process ``pid`` and of each of its threads (``/proc``)."""
    state = {}
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        with contextlib.suppress(OSError):
            lines = (task / "status").read_text().splitlines()
            state[f"{task.name} {(task / 'comm').read_text().strip()}"] = " ".join(
                line.replace(":\t", "=") for line in lines
                if line.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")))
    return state


# A Ctrl-C that stops ``replay.cli.main``'s import (its modules take a second or so to load)
# inside an ``exec`` of a string, as one that lands in a namedtuple's or a dataclass's making
# does.  It used to print the traceback of the import; caught, it still ended ``python -m``
# with SIGINT instead of 130.  Seen in half the Ctrl-Cs of ``replay ingest`` at random moments
# of its first 1.5 s.
INTERRUPTED_IMPORT = """import importlib.abc, sys
class Interrupted(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "replay.cli.main":
            exec("raise KeyboardInterrupt")
sys.meta_path.insert(0, Interrupted())
"""


def test_a_ctrl_c_while_the_command_line_loads_exits_130(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(INTERRUPTED_IMPORT)
    done = subprocess.run([PYTHON, "-m", "replay", "--help"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=TIMEOUT)
    assert (done.returncode, done.stderr) == (130, "replay: interrupted\n")


HALF_A_RESULT = """import os, struct
from replay.workers import worker_pool
try:
    with worker_pool(2) as pool:
        # what a worker ended while it wrote a result leaves: a length, a tenth of the bytes
        os.write(pool._result_queue._writer.fileno(), struct.pack("!i", 1000) + bytes(100))
        raise RuntimeError("the block fails")
except RuntimeError:
    pass
"""


def test_a_worker_ended_while_it_wrote_a_result_does_not_hang_the_exit():
    """The pool's thread waited for the rest of the result for ever, and the process with it
    as it exited (``concurrent.futures`` joins that thread)."""
    done = subprocess.run([PYTHON, "-c", HALF_A_RESULT], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
def test_on_end_of_a_process_is_told_at_once_or_within_the_watchdogs_period(monkeypatch,
                                                                             pidfd):
    """How a worker or a sweep's point learns that the command it serves has ended, even
    killed outright: Linux wakes the watchdog through a pidfd; without one it looks every
    ``WATCHDOG_SECONDS``.  A process already gone is told at once."""
    if not pidfd:
        monkeypatch.delattr(os, "pidfd_open", raising=False)
    elif not hasattr(os, "pidfd_open"):
        pytest.skip("no pidfd_open here")
    ended = threading.Event()
    process = subprocess.Popen([PYTHON, "-c", "import time; time.sleep(60)"])
    workers.on_end_of(process.pid, ended.set)
    assert not ended.wait(0.3)
    process.kill()
    process.wait()
    killed = time.monotonic()
    assert ended.wait(workers.WATCHDOG_SECONDS + 1)
    assert time.monotonic() - killed < (0.2 if pidfd else workers.WATCHDOG_SECONDS + 0.2)
    told = []
    workers.on_end_of(process.pid, lambda: told.append(threading.current_thread()))
    assert told == [threading.current_thread()]


def test_a_stopped_pool_leaves_no_thread_for_the_exit_hook_to_race():
    """Python 3.11's exit hook wakes the pool's thread without the lock under which the thread
    closes its wake-up pipe: once, a Ctrl-C of ingest printed "Exception ignored ... Bad file
    descriptor" after "replay: interrupted".  The pool's thread has ended when ``_stop`` has."""
    with pytest.raises(KeyboardInterrupt), worker_pool(2) as pool:
        manager = pool._executor_manager_thread
        raise KeyboardInterrupt
    assert manager is not None and not manager.is_alive()


def test_a_ctrl_c_while_the_workers_start_is_not_lost(monkeypatch):
    """The workers start with Ctrl-C held from them; it used to be ignored by the whole
    process meanwhile, so a Ctrl-C then was lost and ``replay ingest`` went on to its end."""
    submit = concurrent.futures.ProcessPoolExecutor.submit

    def interrupting_submit(self, *args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)
        return submit(self, *args, **kwargs)

    monkeypatch.setattr(concurrent.futures.ProcessPoolExecutor, "submit", interrupting_submit)
    with pytest.raises(KeyboardInterrupt), worker_pool(2):
        pass


@pytest.mark.parametrize("later", [0, 0.4])
def test_ctrl_c_of_run(medium, tmp_path, later):
    """Ctrl-C as soon as the run directory is in the making, or during its derivation."""
    (tmp_path / "runs").mkdir()
    process = replay("run", str(medium), "--out", "runs/m", folder=tmp_path,
                     inject=WAITS_FOR_THE_SIGNAL)
    err = interrupted(process, tmp_path / "runs", signal.SIGINT, later)
    assert process.returncode == 130 and err == "replay: interrupted\n", err
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("later", [0, 0.4])
def test_sigterm_and_sighup_of_run_are_taken_as_ctrl_c(medium, tmp_path, later, how):
    """SIGTERM (timeout, kill, a batch system) or SIGHUP (a closed terminal) ended the run where
    it stood, and its partial run directory stayed until the next command wrote into the same
    folder."""
    (tmp_path / "runs").mkdir()
    process = replay("run", str(medium), "--out", "runs/m", folder=tmp_path,
                     inject=WAITS_FOR_THE_SIGNAL)
    err = interrupted(process, tmp_path / "runs", how, later)
    assert process.returncode == 130 and err == "replay: interrupted\n", err
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_run_started_under_nohup_keeps_ignoring_sighup(medium, tmp_path):
    (tmp_path / "runs").mkdir()
    process = replay("run", str(medium), "--out", "runs/m", folder=tmp_path,
                     preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    wait_for(lambda: temporaries(tmp_path / "runs"), what="the run to start writing")
    os.kill(process.pid, signal.SIGHUP)
    assert process.wait(TIMEOUT) == 0, process.stderr.read().decode()
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["m"]


# pyarrow's ``pa.array`` of a Python list tries to import ``dateutil`` on every call and drops the
# import's error: a Ctrl-C whose KeyboardInterrupt Python raised while that import searched
# ``sys.path`` vanished, and ``replay run`` went on and exited 0 (one Ctrl-C in about a hundred as
# the run directory was made; twice in four CI runs).  Injected: the first ``pa.array`` after
# ``interrupts.install`` gets a Ctrl-C and drops it the same way.
SWALLOWED_BY_A_LIBRARY = """import os, signal
import pyarrow as pa
from replay import interrupts
array = pa.array
def swallowing(*args, **kwargs):
    if interrupts._installed and not swallowing.done:
        swallowing.done = True
        try:
            os.kill(os.getpid(), signal.SIGINT)
            while not interrupts.received():
                pass
        except KeyboardInterrupt:
            pass
    return array(*args, **kwargs)
swallowing.done = False
pa.array = swallowing
"""


def test_a_ctrl_c_that_a_library_swallowed_stops_the_run_still(medium, tmp_path):
    (tmp_path / "runs").mkdir()
    process = replay("run", str(medium), "--out", "runs/m", folder=tmp_path,
                     inject=SWALLOWED_BY_A_LIBRARY)
    process.wait(TIMEOUT)
    assert (process.returncode, process.stderr.read().decode()) == (130, "replay: interrupted\n")
    assert list((tmp_path / "runs").iterdir()) == []


@pytest.fixture
def swallowed_ctrl_c(monkeypatch):
    """``replay.interrupts`` as after a Ctrl-C whose KeyboardInterrupt something swallowed."""
    received = threading.Event()
    received.set()
    monkeypatch.setattr(interrupts, "_received", received)


def test_a_swallowed_ctrl_c_is_raised_at_the_next_step(swallowed_ctrl_c):
    with pytest.raises(KeyboardInterrupt), interrupts.deferred():
        pass


def test_a_swallowed_ctrl_c_does_not_interrupt_the_cleanup_of_another(swallowed_ctrl_c):
    """While an exception is handled (the KeyboardInterrupt itself, or DuckDB's
    ``RuntimeError`` for it), its cleanup runs whole: it may wait for a writer thread."""
    cleaned = False
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("Query interrupted")
        except RuntimeError:
            with interrupts.deferred():
                cleaned = True
            raise
    assert cleaned


def test_a_swallowed_ctrl_c_is_not_raised_in_another_thread(swallowed_ctrl_c):
    raised = []

    def step():
        try:
            interrupts.checkpoint()
        except KeyboardInterrupt:
            raised.append(True)

    thread = threading.Thread(target=step)
    thread.start()
    thread.join()
    assert raised == []


def test_a_swallowed_ctrl_c_keeps_the_result_from_its_place(swallowed_ctrl_c, tmp_path):
    with pytest.raises(KeyboardInterrupt), atomic.atomic_file(tmp_path / "out.csv") as tmp:
        tmp.write_text("an answer\n")
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_tables_are_written_waits_for_their_threads(tmp_path, monkeypatch):
    """A Ctrl-C that lands while ``write_run`` waits for its writer threads used to leave them
    writing while the process unwound, freed memory under them and exited: a segmentation
    fault or Parquet columns of different lengths, one Ctrl-C of ``replay run`` in six."""
    write = TableFile._write

    def interrupting_write(self, part):
        os.kill(os.getpid(), signal.SIGINT)  # while the main thread waits for this one
        time.sleep(0.5)
        write(self, part)

    monkeypatch.setattr(TableFile, "_write", interrupting_write)
    table = TABLES["pods"].empty_table()
    with pytest.raises(KeyboardInterrupt):
        try:
            write_run(tmp_path / "run", [("pods", table), ("pods", table)], {})
        finally:
            writing = [t.name for t in threading.enumerate()
                       if t.name.startswith("replay-table-file")]
    assert writing == []
    assert list(tmp_path.iterdir()) == []


def test_a_ctrl_c_while_the_tables_are_abandoned_waits_for_every_file(tmp_path, monkeypatch):
    """A Ctrl-C that lands while ``write_run`` abandons its files after an error is delivered
    once every file is abandoned: raised as the first file's ended, it left the others'
    threads running."""
    abandon = TableFile.abandon

    def interrupted_abandon(self):
        os.kill(os.getpid(), signal.SIGINT)
        abandon(self)

    monkeypatch.setattr(TableFile, "abandon", interrupted_abandon)
    table = TABLES["pods"].empty_table()
    with pytest.raises(KeyboardInterrupt):
        try:
            write_run(tmp_path / "run", [("pods", table), ("events", TABLES["events"]
                                         .empty_table()), ("no-such-table", table)], {})
        finally:
            writing = [t.name for t in threading.enumerate()
                       if t.name.startswith("replay-table-file")]
    assert writing == []
    assert list(tmp_path.iterdir()) == []


def test_an_interrupt_python_could_not_raise_is_not_printed(monkeypatch):
    """A signal landing in a finaliser printed "Exception ignored in: ..." and a traceback;
    checkpoint raises it again, so it is dropped; any other unraisable error is still told."""
    told = []
    quiet = interrupts._quiet_about_interrupts(told.append)
    event = threading.Event()
    monkeypatch.setattr(interrupts, "_received", event)
    landed = types.SimpleNamespace(exc_value=KeyboardInterrupt())
    quiet(landed)
    assert told == [landed]  # no signal arrived: not replay's to hide
    event.set()
    quiet(landed)
    other = types.SimpleNamespace(exc_value=ValueError("a finaliser's own error"))
    quiet(other)
    assert told == [landed, other]


def test_a_ctrl_c_deferred_arrives_when_the_block_ends():
    with pytest.raises(KeyboardInterrupt):
        with interrupts.deferred():
            signal.raise_signal(signal.SIGINT)
            time.sleep(0.01)  # Python's handler would have run by now
            finished = True
    assert finished


def test_a_ctrl_c_while_numba_compiles_arrives_when_it_has_compiled():
    """Raised inside numba's compilation, a Ctrl-C was dropped in llvmlite's callbacks or broke
    numba's records (``replay.jit``): 8 of 30 Ctrl-Cs of ``replay run`` with an empty cache."""
    from numba.core import event

    from replay.jit import njit

    def doubled(x):
        return 2 * x

    kernel = njit(doubled)  # no cache: compiled at its first call

    class CtrlC(event.Listener):
        def on_start(self, _):
            signal.raise_signal(signal.SIGINT)  # as numba starts to compile

        def on_end(self, _):
            pass

    with pytest.raises(KeyboardInterrupt), event.install_listener("numba:compile", CtrlC()):
        kernel(1)
    assert len(kernel.signatures) == 1 and kernel(2) == 4


def test_a_kernel_numba_cannot_cache_is_compiled_without_its_cache(cli, monkeypatch):
    """Installed read-only (a container's read-only root file system) with no writable user
    cache either, numba's ``cache=True`` failed every command's import with a traceback.  Code
    with no source file has no cache locator either: the same failure, without a mount."""
    import numba

    from replay import jit

    generated: dict = {"__name__": "generated"}
    exec(compile("def add_one(x):\n    return x + 1\n", "<generated>", "exec"), generated)
    with pytest.raises(RuntimeError, match="no locator available"):
        numba.njit(cache=True)(generated["add_one"])
    monkeypatch.setattr(jit, "UNCACHED", [])
    assert jit.njit(cache=True, nogil=True)(generated["add_one"])(1) == 2
    assert jit.UNCACHED == ["generated.add_one"]
    result = cli("models")
    assert result.code == 0 and result.err.startswith(
        "replay: warning: numba has no writable folder to cache its compiled kernels in")
    assert "set NUMBA_CACHE_DIR to a writable folder\n" in result.err


MAKING_TEMPORARIES = {"atomic_file": lambda folder: atomic.atomic_file(folder / "out.csv"),
                      "atomic_dir": lambda folder: atomic.atomic_dir(folder / "run"),
                      "temporary_dir": lambda folder: atomic.temporary_dir(folder, "spill")}


@pytest.mark.parametrize("making", sorted(MAKING_TEMPORARIES))
def test_a_ctrl_c_as_a_temporary_is_made_leaves_nothing(making, tmp_path, monkeypatch):
    """Python raises a Ctrl-C that arrives during ``os.mkdir`` or ``os.open`` as the call
    returns: once in CI, ``test_ctrl_c_of_run`` found its run directory's temporary left."""
    ctrl_c = [KeyboardInterrupt()]  # one, at the first temporary made

    def interrupting(call):
        def interrupted(path, *args, **kwargs):
            made = call(path, *args, **kwargs)
            if os.fspath(path).endswith(atomic.TEMPORARY_SUFFIX) and ctrl_c:
                raise ctrl_c.pop()
            return made
        return interrupted

    monkeypatch.setattr(os, "mkdir", interrupting(os.mkdir))
    monkeypatch.setattr(os, "open", interrupting(os.open))
    with pytest.raises(KeyboardInterrupt), MAKING_TEMPORARIES[making](tmp_path):
        pass
    assert list(tmp_path.iterdir()) == []


def test_kill_9_of_run_then_a_rerun(medium, tmp_path):
    (tmp_path / "runs").mkdir()
    process = replay("run", str(medium), "--out", "runs/m", folder=tmp_path,
                     inject=WAITS_FOR_THE_SIGNAL)
    interrupted(process, tmp_path / "runs", signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    assert not (tmp_path / "runs" / "m").exists() and temporaries(tmp_path / "runs")
    again = replay("run", str(medium), "--out", "runs/m", folder=tmp_path)
    assert again.wait(TIMEOUT) == 0, again.stderr.read()
    assert temporaries(tmp_path / "runs") == []


@pytest.fixture(scope="module")
def medium_run(medium, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("medium-run") / "m"
    run_replay(medium, load_config(), out=out)
    return out


SLOW_SQL = "SELECT count(*) AS n FROM range(1000000000000)"  # minutes of DuckDB


@pytest.mark.parametrize("phase", ["anywhere", "in DuckDB"])
def test_ctrl_c_of_derive_keeps_the_run(medium_run, tmp_path, phase):
    """Ctrl-C as soon as derive starts writing, or a second into a derivation that DuckDB would
    compute for minutes (its SQL replaced)."""
    run = tmp_path / "m"
    shutil.copytree(medium_run, run)
    before = snapshot(run)
    slow = f"import replay.analysis.derive as d\nd.derived_sql = lambda name: {SLOW_SQL!r}"
    process = replay("derive", "m", folder=tmp_path,
                     inject=slow if phase == "in DuckDB" else WAITS_FOR_THE_SIGNAL)
    err = interrupted(process, run, signal.SIGINT, later=1.0 if phase == "in DuckDB" else 0)
    assert process.returncode == 130 and err == "replay: interrupted\n", err
    assert snapshot(run) == before


@pytest.mark.parametrize("output", [[], ["--format", "csv"], ["--format", "json"]])
def test_ctrl_c_of_a_query(medium_run, tmp_path, output):
    """Ctrl-C a second into a query that would run for minutes in DuckDB."""
    (tmp_path / "slow.sql").write_text(SLOW_SQL)
    process = replay("query", str(medium_run), "slow.sql", *output, folder=tmp_path)
    err = interrupted(process, tmp_path / "tmp", signal.SIGINT, later=1.0)
    assert process.returncode == 130 and err == "replay: interrupted\n", err
    assert process.stdout.read() == b"" and temporaries(tmp_path) == []


def test_sigterm_of_a_query_stops_duckdb(medium_run, tmp_path):
    (tmp_path / "slow.sql").write_text(SLOW_SQL)
    process = replay("query", str(medium_run), "slow.sql", folder=tmp_path)
    err = interrupted(process, tmp_path / "tmp", signal.SIGTERM, later=1.0)
    assert process.returncode == 130 and err == "replay: interrupted\n", err
    assert process.stdout.read() == b"" and temporaries(tmp_path) == []


def test_skip_bad_lines_counts_a_line_over_the_limit(tmp_path):
    log = tmp_path / "long.log"
    log.write_bytes(GOOD + b"\n" + b'{"kind": "' + b"x" * (65 << 20) + b'"}\n' + audit() + b"\n")
    done = subprocess.run([PYTHON, "-m", "replay", "ingest", str(log), "--skip-bad-lines",
                           "--out", str(tmp_path / "t.parquet")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "bad lines skipped: 1 (first: " in done.stderr and "long.log:2: a line longer" in \
        done.stderr
    assert "2 rows" in done.stdout


def test_what_ingest_writes_validate_accepts(tmp_path):
    """A bad line skipped, not written: validate accepts the result."""
    log = tmp_path / "mixed.log"
    log.write_bytes(b"\n".join([GOOD, audit(responseStatus={"code": 999}),
                                audit(audit_id="y", received="2026-03-01T10:00:30Z"),
                                audit(audit_id="z")]) + b"\n")
    out = tmp_path / "t.parquet"
    done = subprocess.run([PYTHON, "-m", "replay", "ingest", str(log), "--skip-bad-lines",
                           "--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0 and "bad lines skipped: 2" in done.stderr, done.stderr
    checked = subprocess.run([PYTHON, "-m", "replay", "validate", str(out)], capture_output=True,
                             text=True)
    assert checked.returncode == 0 and "valid trace v1, 2 rows" in checked.stdout


def test_errno_is_told_as_path_and_cause():
    from replay.errors import os_error_message

    assert os_error_message(PermissionError(errno.EACCES, "x", "out/t")) == \
        "out/t: Permission denied"
    pyarrow_style = OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No "
                                          "space left on device")
    assert os_error_message(pyarrow_style) == "No space left on device"


def test_a_libraries_io_error_is_told_by_its_errno():
    from replay.errors import os_error_in

    assert os_error_in('IO Error: Async write failed for range [offset=0, size=1]: {"exception_'
                       'type":"IO","exception_message":"Could not write file \\"/dev/full\\": No '
                       'space left on device","errno":"28"}') == errno.ENOSPC
    assert os_error_in('IO Error: Cannot open file "out/x.csv": Permission denied') == errno.EACCES
    assert os_error_in("Binder Error: Referenced column \"x\" not found: candidates") is None
