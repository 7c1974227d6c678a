"""CPU time of a what-if replay's event loop alone: the model's tables made, nothing written or
derived (what a change to the engine changes; writing and deriving add their own noise).

    python benchmarks/whatif_loop.py [--pods 20000] [--nodes 400] [--arrival-rate 16]
        [--model godel] [--timed _send] [--timed View._catch_up ...]

Prints the CPU seconds (user + system) from the replay's start to its last table, the rows of
each table and a digest of their contents (sha256 of each table's Arrow IPC stream, in the
order they come), so that two checkouts run back to back can be compared on CPU and on their
results without writing a run directory.  The loop runs under ``replay run``'s memory settings
(``replay.memory``: freed memory kept for the next arrays, no huge pages), and the CPU time of
the digest, taken as each table comes, is left out of the figure; before both, the 100k-pod
Gödel loop's figure was 19.1 CPU s, of which 1.3 s went to making the deliveries' parts from
fresh pages (0.14 s under the settings) and about 2 s to the digest, costs ``replay run`` does not
have.  ``--timed NAME`` also prints the thread CPU time spent inside ``Simulation.NAME``
(``_send``: a write's pipeline step, its deliveries logged and handed over), or ``View.NAME``
(``View._catch_up``: the views applying their deliveries), in its outermost calls: a part of the
loop that a change touches, measured without the rest's noise (the wrapper adds about 0.3 µs a
call to both).
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable
from typing import Any

import polars as pl
import pyarrow as pa

from common import cpu_seconds, emit, whatif_trace
from replay import memory, models
from replay.engine import selectkernel  # noqa: F401  (numba's kernels loaded before timing)
from replay.engine.simulation import Simulation
from replay.engine.view import View
from replay.engine.config import load_config
from replay.trace.validate import read_trace


def _digest(table: pa.Table, into: hashlib._Hash) -> None:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    into.update(sink.getvalue())


def _timed(name: str) -> list[int]:
    """``Simulation.name`` (or ``View.name`` for ``View.name``) wrapped to add its thread CPU
    nanoseconds and calls to the list, but for the calls made inside another (a catch-up's
    callbacks may read their view again)."""
    spent, inside = [0, 0], [False]
    owner, _, name = name.rpartition(".")
    cls = View if owner == "View" else Simulation
    method: Callable[..., Any] = getattr(cls, name)

    def timed(self: Any, *args: Any) -> Any:
        if inside[0]:
            return method(self, *args)
        inside[0] = True
        start = time.thread_time_ns()
        try:
            return method(self, *args)
        finally:
            spent[0] += time.thread_time_ns() - start
            spent[1] += 1
            inside[0] = False

    setattr(cls, name, timed)
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=20_000)
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--arrival-rate", type=float, default=16.0)
    parser.add_argument("--model", default="godel")
    parser.add_argument("--timed", action="append", default=[],
                        help="a Simulation method to time alone, such as _send, or a View "
                             "method, such as View._catch_up (may be given again)")
    args = parser.parse_args()
    spent = {name: _timed(name) for name in args.timed}
    path = whatif_trace(args.pods, args.nodes, args.arrival_rate)
    config = load_config(model=args.model)
    trace = read_trace(path)
    model = models.load(args.model)(config.model_params)
    watchers = model.default_watchers(trace)
    digest, rows = hashlib.sha256(), dict[str, int]()
    digesting = 0.0
    with memory.keeping_freed_memory(), memory.without_huge_pages():
        cpu = cpu_seconds()
        for name, table in model.tables(trace, config, watchers):
            digesting -= cpu_seconds()
            arrow = table.to_arrow() if isinstance(table, pl.DataFrame) else table
            rows[name] = rows.get(name, 0) + arrow.num_rows
            _digest(arrow, digest)
            digesting += cpu_seconds()
        cpu = cpu_seconds() - cpu - digesting
    print(f"{args.model}: {args.pods:,} pods, {args.nodes:,} nodes: replay loop cpu {cpu:.2f} s "
          f"(the digest's {digesting:.2f} s left out), digest {digest.hexdigest()[:16]}, "
          f"rows {rows}")
    for name, (ns, calls) in spent.items():
        print(f"{name}: thread cpu {ns / 1e9:.2f} s in {calls:,} calls, "
              f"{ns / max(calls, 1) / 1000:.2f} us a call")
    emit(cpu_s=cpu, digest=digest.hexdigest(), **rows)


if __name__ == "__main__":
    main()
