"""What the benchmark scripts share: the production-scale traces, CPU time, the memory of a
process tree, and the machine-readable last line that ``run_all.py`` reads.

The scripts run from this folder (``python benchmarks/X.py``), so they import this as
``common``.
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import threading
from pathlib import Path

from replay.trace.synth import SynthSpec, synthesize

RESULT_PREFIX = "result: "
PODS, NODES = 1_000_000, 20_000  # production scale: Gödel's 1M pods on 20k nodes
OBSERVE_RATE, WHAT_IF_RATE = 2_400.0, 800.0  # pods a second arriving, at production scale


def scaled(scale: float) -> tuple[int, int]:
    """Pods and nodes at ``scale`` of production (1.0: 1M pods on 20k nodes)."""
    return max(round(PODS * scale), 1), max(round(NODES * scale), 1)


def rate_for(pods: int, production_rate: float) -> float:
    """The arrival rate that keeps a smaller workload's load per node, and its duration, those
    of production: pods arrive over the same span of time onto proportionally fewer nodes."""
    return production_rate * pods / PODS


def observe_spec(pods: int = PODS, nodes: int = NODES) -> SynthSpec:
    """The observe benchmarks' workload: recorded bindings, 2,400 pods a second arriving at
    production scale (proportionally fewer at a smaller one)."""
    return SynthSpec(nodes=nodes, pods=pods, arrival_rate=rate_for(pods, OBSERVE_RATE),
                     bind="least-allocated", seed=1)


def big_trace(pods: int = PODS, nodes: int = NODES) -> Path:
    """The observe workload's trace, synthesized once into the system's temporary folder (about
    25 s at production scale) and reused by later runs."""
    name = ("replay-bench-1M-pods.parquet" if (pods, nodes) == (PODS, NODES)
            else f"replay-bench-observe-{pods}-pods-{nodes}-nodes-scaled-rate.parquet")
    path = Path(tempfile.gettempdir()) / name
    if not path.exists():
        print(f"synthesizing {path} ...", flush=True)
        partial = path.with_suffix(".partial.parquet")
        synthesize(observe_spec(pods, nodes), partial)
        partial.replace(path)
    return path


def whatif_trace(pods: int = PODS, nodes: int = NODES, arrival_rate: float = WHAT_IF_RATE,
                 mean_lifetime: float = 300.0) -> Path:
    """The what-if benchmarks' workload (no bindings: the model makes them), synthesized once
    into the system's temporary folder and reused."""
    path = Path(tempfile.gettempdir()) / (
        f"replay-bench-{pods}-pods-{nodes}-nodes-{arrival_rate:g}.parquet")
    if not path.exists():
        print(f"synthesizing {path} ...", flush=True)
        partial = path.with_suffix(".partial.parquet")
        synthesize(SynthSpec(nodes=nodes, pods=pods, arrival_rate=arrival_rate,
                             mean_lifetime=mean_lifetime, seed=1), partial)
        partial.replace(path)
    return path


def cpu_seconds() -> float:
    """User + system time of this process (all threads) and of its finished child processes."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def peak_rss_mib() -> float:
    """This process's peak resident memory."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def emit(**figures: object) -> None:
    """Print the script's figures as one JSON line (``run_all.py`` reads the last one)."""
    print(RESULT_PREFIX + json.dumps(figures), flush=True)


def read_result(output: str) -> dict:
    """The figures a script emitted (its last result line), or none."""
    lines = [line for line in output.splitlines() if line.startswith(RESULT_PREFIX)]
    return json.loads(lines[-1][len(RESULT_PREFIX):]) if lines else {}


class TreeMemory(threading.Thread):
    """Samples the resident memory of a process and all its descendants every ``every``
    seconds; ``peak`` is the largest sum seen, in bytes.

    A worker's own peak (``ru_maxrss``) does not add up: a forked worker starts with its parent's
    pages and counts them as its own, and the peaks of two processes need not coincide."""

    def __init__(self, root: int | None = None, every: float = 0.1):
        super().__init__(daemon=True)
        self.root = root or os.getpid()
        self.every, self.peak, self._done = every, 0, threading.Event()

    def __enter__(self) -> TreeMemory:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.peak = max(self.peak, sum(map(_resident, descendants(self.root))))


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (from /proc)."""
    parent_of: dict[int, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                parent_of[int(pid)] = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    tree, frontier = [root], [root]
    while frontier:
        below = set(frontier)
        frontier = [pid for pid, parent in parent_of.items() if parent in below]
        tree += frontier
    return tree


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0
