"""Where the whole ``replay run`` command spends its wall time: a timeline of its phases (the
imports, the trace's read, the replay's tables as they come, the writers' tail, the manifest,
each step of the derivation, the rename), with the process's CPU and each thread's in each.

    python benchmarks/timeline.py TRACE --config benchmarks/godel-watchers.toml --out /tmp/run

Runs ``replay run TRACE ... --force`` in this process (the command line's own ``main``), the
phases marked by wrapping the functions that begin and end them; a thread samples every
thread's CPU (``/proc/self/task``) every ``--every`` seconds, so that a thread that has ended
still counts.  Linux only.  Prints one line per phase: its start and length in wall seconds
since the interpreter started, the process's user and system CPU in it, and the threads that
used at least a tenth of a second of CPU in it.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def since_boot_start() -> float:
    """Wall seconds from this process's start to ``STARTED``: the interpreter's own start-up."""
    with open("/proc/self/stat") as stat:
        start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/uptime") as uptime:
        up = float(uptime.read().split()[0])
    return up - start_ticks / TICK - (time.perf_counter() - STARTED)


def rss_mib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def threads() -> dict[int, tuple[str, float, float]]:
    """Each live thread's name, user and system CPU seconds."""
    found = {}
    named = {thread.native_id: thread.name for thread in threading.enumerate()}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                text = stat.read()
        except OSError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        found[int(tid)] = (named.get(int(tid), f"{name}-{tid}"), int(fields[11]) / TICK,
                           int(fields[12]) / TICK)
    return found


class Timeline:
    def __init__(self, every: float):
        self.marks: list[tuple[str, float, float, float, int, int, dict]] = []
        self.seen: dict[int, tuple[str, float, float]] = {}
        self.lock = threading.Lock()
        self.every = every
        self.stopped = threading.Event()
        threading.Thread(target=self._sample, daemon=True, name="timeline").start()

    def _sample(self) -> None:
        while not self.stopped.wait(self.every):
            self._update()

    def _update(self) -> dict[int, tuple[str, float, float]]:
        with self.lock:
            self.seen.update(threads())
            return dict(self.seen)

    def mark(self, name: str) -> None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        self.marks.append((name, time.perf_counter() - STARTED, usage.ru_utime, usage.ru_stime,
                           usage.ru_minflt, rss_mib(), self._update()))

    def report(self, offset: float) -> None:
        self.stopped.set()
        print(f"interpreter start-up before the first line: {offset:.2f} s")
        print(f"{'phase (ends at the mark)':<36}{'start':>7}{'wall':>7}{'user':>7}{'sys':>7}"
              f"{'faults':>8}{'RSS':>6}  threads (user+sys)")
        for (_, t0, u0, s0, f0, _, th0), (name, t1, u1, s1, f1, rss, th1) in zip(
                self.marks, self.marks[1:]):
            busy = []
            for tid, (tname, u, s) in th1.items():
                _, pu, ps = th0.get(tid, (tname, 0.0, 0.0))
                if u + s - pu - ps >= 0.1:
                    busy.append(f"{tname}:{u - pu:.1f}+{s - ps:.1f}")
            print(f"{name:<36}{t0 + offset:7.2f}{t1 - t0:7.2f}{u1 - u0:7.2f}{s1 - s0:7.2f}"
                  f"{f1 - f0:8}{rss:6}  " + " ".join(busy))
        _, t, u, s, f, _, _ = self.marks[-1]
        print(f"{'total':<36}{0:7.2f}{t + offset:7.2f}{u:7.2f}{s:7.2f}{f:8}")


def wrap(owner: object, name: str, before: Callable[[], None] | None,
         after: Callable[[], None] | None) -> None:
    function = getattr(owner, name)

    def wrapped(*args, **kwargs):
        if before:
            before()
        try:
            return function(*args, **kwargs)
        finally:
            if after:
                after()
    setattr(owner, name, wrapped)


def instrument(line: Timeline) -> None:
    """Marks at each phase's end, by wrapping the functions of the modules ``replay run`` uses
    (imported here, after the imports' own mark)."""
    import replay.analysis.derive as derive
    import replay.analysis.steps as steps
    import replay.api as api
    import replay.engine.rundir as rundir
    import replay.models.observe as observe

    wrap(api, "_read", None, lambda: line.mark("trace read"))
    tables = observe.ObserveModel.tables

    def marked_tables(self, *args, **kwargs) -> Iterator:
        for name, table in tables(self, *args, **kwargs):
            line.mark(f"table {name} computed")
            yield name, table
    observe.ObserveModel.tables = marked_tables  # type: ignore[method-assign]
    wrap(rundir, "_close_all", lambda: line.mark("last table handed over"),
         lambda: line.mark("writers' tail (close)"))
    wrap(rundir, "write_manifest", None, lambda: line.mark("manifest"))
    wrap(derive, "open_runs", None, lambda: line.mark("derive: views opened"))
    run_steps = steps.run_steps

    def marked_steps(con, step_list, done=lambda n: None, replace=lambda n: False):
        names = iter(step.name for step in step_list[:-1])

        def tick(count: int) -> None:
            line.mark(f"derive step {next(names)}")
            done(count)
        return run_steps(con, step_list, done=tick, replace=replace)
    derive.run_steps = marked_steps  # type: ignore[assignment]
    wrap(derive, "_record", lambda: line.mark("derive: final rows written"),
         lambda: line.mark("derive: manifest"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--config")
    parser.add_argument("--out", required=True)
    parser.add_argument("--every", type=float, default=0.05, help="sampling period (s)")
    args = parser.parse_args()
    offset = since_boot_start()
    line = Timeline(args.every)
    line.mark("start")
    from replay.cli.main import main as replay_main
    line.mark("imports")
    instrument(line)
    argv = ["run", args.trace, "--out", args.out, "--force",
            *(["--config", args.config] if args.config else [])]
    status = replay_main(argv)
    line.mark("rename, summary")
    line.report(offset)
    sys.exit(status)


if __name__ == "__main__":
    main()
