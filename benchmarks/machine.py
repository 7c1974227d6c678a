"""How fast this machine is now: three reference figures that do not depend on replay's code.

    python benchmarks/machine.py [--timers 1000000] [--size-mib 512]

The same commit's figures differ from one machine, and one hour, to the next. Issue 17's rounds
saw the 100k-pod Gödel what-if replay take 14.5 s on one machine and 26 s on another three hours
later, and the 1M-pod observe run's system time double within an hour (its page faults costing
more: the thirty-fourth round). Without a figure of the machine itself, a results table cannot
say whether the code or the machine changed. These figures measure the machine only, each the
way one part of replay spends its time:

- ``loop_s``: a discrete-event loop in plain Python firing ``--timers`` timers (a heap of
  timers, each a callback that counts in a dict and sets the next), the shape of the what-if
  replay's loop (``replay.engine.core``), written out here so that it never changes with
  replay's code; ``timers_per_s`` is its rate. The loop runs in five rounds of a fifth of the
  timers each, and ``loop_s`` is five times their median: on this project's virtual machine
  the same round takes up to 1.7 times as long from one second to the next, in one process,
  with no steal time in ``/proc/stat``. ``loop_min_s`` and ``loop_max_s`` are the fastest and
  slowest rounds, times five;
- ``fault_us``: the wall time a page fault takes when the process takes fresh memory (an
  anonymous mapping of ``--size-mib`` written once per page), what the observe run and the
  derivation pay for their arrays; ``faults`` counts them (fewer, larger ones where the kernel
  gives transparent huge pages), ``fresh_gib_per_s`` is the same as a rate;
- ``copy_gib_per_s``: memory bandwidth, the best of three copies between two arrays of
  ``--size-mib`` already in memory.

``run_all.py`` runs this first in each repetition (the scenario ``machine``), so that its
table shows the machine's state next to the figures it explains.
"""

from __future__ import annotations

import argparse
import heapq
import mmap
import resource
import sys
import time

import numpy as np

from common import emit

PAGE = mmap.PAGESIZE
KEYS = 1024  # timers pending at once, and the keys they count under


def event_loop(timers: int) -> float:
    """Seconds to fire ``timers`` timers, each setting the next one: KEYS pending at a time,
    each due 1 to 1,000 µs after the one that set it."""
    counts = dict.fromkeys(range(KEYS), 0)

    def fired(key: int) -> None:
        counts[key] += 1

    queue = [(key, key, fired, key) for key in range(KEYS)]  # (due, order, callback, argument)
    order = KEYS
    start = time.perf_counter()
    for _ in range(timers):
        due, _, callback, key = heapq.heappop(queue)
        callback(key)
        order += 1
        heapq.heappush(queue, (due + 1 + order * 7919 % 1000, order, callback, key))
    elapsed = time.perf_counter() - start
    assert sum(counts.values()) == timers
    return elapsed


def fresh_memory(size: int) -> tuple[float, int]:
    """Seconds to write one byte to each page of ``size`` bytes of fresh memory, and the page
    faults that took."""
    with mmap.mmap(-1, size) as memory:
        pages = np.frombuffer(memory, dtype=np.uint8)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        pages[::PAGE] = 1
        elapsed = time.perf_counter() - start
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        del pages  # (the mapping cannot close while an array holds it)
    return elapsed, faults


def copy_seconds(size: int, tries: int = 3) -> float:
    """The fastest of ``tries`` copies of ``size`` bytes between two arrays in memory."""
    source = np.ones(size // 8, dtype=np.int64)
    target = np.zeros_like(source)
    best = float("inf")
    for _ in range(tries):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=1_000_000,
                        help="timers the event loop fires (default 1,000,000)")
    parser.add_argument("--size-mib", type=int, default=512,
                        help="MiB of fresh memory taken, and copied (default 512)")
    args = parser.parse_args(argv)
    if args.timers < 1 or args.size_mib < 1:
        parser.error("--timers and --size-mib must be at least 1")
    size = args.size_mib << 20
    rounds = sorted(5 * event_loop(max(args.timers // 5, 1)) for _ in range(5))
    loop_s = rounds[2]
    fresh_s, faults = fresh_memory(size)
    copy_s = copy_seconds(size)
    figures = {"loop_s": loop_s, "loop_min_s": rounds[0], "loop_max_s": rounds[-1],
               "timers_per_s": args.timers / loop_s, "faults": faults,
               "fault_us": fresh_s / max(faults, 1) * 1e6,
               "fresh_gib_per_s": size / fresh_s / 2**30, "copy_gib_per_s": size / copy_s / 2**30}
    print(f"event loop: {args.timers:,} timers in {loop_s:.3f} s ({rounds[0]:.3f}-"
          f"{rounds[-1]:.3f} s; {figures['timers_per_s'] / 1e6:.2f}M timers/s)")
    print(f"fresh memory: {args.size_mib:,} MiB in {fresh_s:.3f} s, {faults:,} page faults "
          f"({figures['fault_us']:.2f} µs each)")
    print(f"copy: {args.size_mib:,} MiB in {copy_s:.3f} s ({figures['copy_gib_per_s']:.1f} GiB/s)")
    emit(**figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
