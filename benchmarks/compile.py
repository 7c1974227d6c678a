"""numba's compilation: what a user's first commands on a fresh machine pay, kernel by kernel.

    python benchmarks/compile.py [TRACE] [--models observe,godel,kube,omega,peer,oracle]

Replays TRACE (the bundled sample without one) through each model, then runs ``replay check``
on the first what-if run, each command a process of its own and all of them sharing one empty
numba cache (``NUMBA_CACHE_DIR``, a temporary folder): as on a fresh machine, the first command
that calls a kernel compiles it and caches it for the others.  Each command then runs again,
the cache filled.  A kernel compiled again there (its cache did not work: a user would pay it
at every command) fails the script, as does a cold pass that compiled nothing (the compile
events not seen).

Prints each command's wall time cold and warm and its seconds of compilation; the kernels by
their compile time (each with what it compiled for itself: the numpy functions it calls, the
kernels it calls not compiled before); and the result line: ``compile_s`` (all the
compilation, summed over the commands), ``cold_s`` and ``warm_s`` (the commands' wall times,
summed), ``kernels`` (how many kernels were compiled).  The figures do not depend on
``run_all.py``'s scale: the work is the kernels, not the trace.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from common import emit

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "traces" / "sample.parquet"
MODELS = ("observe", "godel", "kube", "omega", "peer", "oracle")
# The child: ``replay`` itself, with a listener on numba's compile events (a cache miss; loads
# from the cache are not compiles) that times each outermost one, and writes the times to
# REPLAY_COMPILE_TIMES as the process exits.
CHILD = """import atexit, json, os, sys, time
from numba.core import event
times, started = {}, []
class Timer(event.Listener):
    def on_start(self, ev):
        started.append(time.perf_counter())
    def on_end(self, ev):
        seconds = time.perf_counter() - started.pop()
        if not started:
            f = ev.data["dispatcher"].py_func
            key = f"{f.__module__}.{f.__qualname__}"
            times[key] = times.get(key, 0.0) + seconds
event.register("numba:compile", Timer())
atexit.register(lambda: open(os.environ["REPLAY_COMPILE_TIMES"], "w").write(json.dumps(times)))
from replay.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def commands(trace: Path, models: list[str], out: Path) -> list[tuple[str, list[str]]]:
    """Each model's replay of ``trace``, then a check of the first what-if run."""
    runs = [(f"run {m}", ["run", str(trace), "--model", m, "--seed", "7", "--force", "--out",
                          str(out / m)]) for m in models]
    checked = next((m for m in models if m != "observe"), models[0])
    return [*runs, (f"check {checked}", ["check", str(out / checked)])]


def timed(args: list[str], cache: Path, times: Path) -> tuple[float, dict[str, float]]:
    """One command's wall time and its compilations, with ``cache`` as numba's cache."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "REPLAY_COMPILE_TIMES": str(times),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, cwd=REPO,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"replay {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return wall, json.loads(times.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=SAMPLE)
    parser.add_argument("--models", default=",".join(MODELS),
                        help="comma-separated, in the order to run them")
    args = parser.parse_args()
    models = args.models.split(",")
    kernels: Counter[str] = Counter()
    cold_s = warm_s = 0.0
    with tempfile.TemporaryDirectory(prefix="replay-compile-") as work:
        work_dir = Path(work)
        for name, argv in commands(args.trace.resolve(), models, work_dir / "runs"):
            cold, compiled = timed(argv, work_dir / "numba", work_dir / "times.json")
            warm, again = timed(argv, work_dir / "numba", work_dir / "times.json")
            if again:  # the cache failed: a user would pay this at every command
                sys.exit(f"replay {name}: with numba's cache filled, compiled "
                         f"{', '.join(sorted(again))} again")
            kernels.update(compiled)
            cold_s, warm_s = cold_s + cold, warm_s + warm
            print(f"{name:14} cold {cold:6.2f} s, warm {warm:5.2f} s; compiled "
                  f"{sum(compiled.values()):5.2f} s in {len(compiled)} kernels", flush=True)
    if not kernels:
        sys.exit("no kernel was compiled with numba's cache empty: the compile events were "
                 "not seen")
    print("\nkernels by compile time (s):")
    for kernel, seconds in kernels.most_common():
        print(f"  {seconds:6.2f}  {kernel}")
    compile_s = sum(kernels.values())
    print(f"\ncompiled {compile_s:.2f} s in all; the commands took {cold_s:.2f} s cold and "
          f"{warm_s:.2f} s warm")
    emit(compile_s=compile_s, cold_s=cold_s, warm_s=warm_s, kernels=len(kernels))


if __name__ == "__main__":
    main()
