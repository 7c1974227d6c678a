"""Run every benchmark scenario at one scale and write the results table.

    python benchmarks/run_all.py [--scale 1.0] [--repeat 3] [--only SCENARIO ...]
        [--work DIR] [--markdown benchmarks/RESULTS.md] [--json benchmarks/results.json]

Scale 1.0 is production: 1M pods on 20k nodes and a 2 GiB audit log; 0.05 is a twentieth (50k
pods on 1,000 nodes, a 102 MiB log).  Pods arrive proportionally slower at a smaller scale (2,400
a second for observe, 800 for the what-if models at 1.0), so that every scale has the same load
per node and the same span of time: a smaller run is a smaller cluster, not a more crowded one.  The
scenarios, in order: ``machine`` (``machine.py``: how fast the machine itself is now, to tell
its changes from the code's; the same at every scale); ``synth``; ``ingest`` (of a log
``make_audit_log.py`` writes first, not timed); ``observe`` (Gödel's five watchers,
``godel-watchers.toml``); the what-if models ``whatif-godel``, ``whatif-kube``,
``whatif-omega``, ``whatif-peer``; ``derive-observe`` and ``derive-godel`` (``replay derive``
on the observe run and on the Gödel what-if run); ``check-observe`` and ``check-godel``
(``replay check`` of each, every invariant); ``queries`` (every shipped query, on both runs);
``report`` (``replay report`` of the Gödel what-if run, the page's bytes as ``page_bytes``);
``compile`` (``compile.py``: numba's compilation of every kernel, as a user's first commands on
a fresh machine pay it; the bundled sample at every scale); ``simpy`` (the SimPy baseline,
checked equal to replay on the observe trace, then timed, and the ratio).  The traces are
synthesized before the first repetition, not timed.

Each scenario runs as its own child process (``python benchmarks/X.py``), watched by a small
process of its own, so that its figures are its alone: wall time; CPU time (user + system of the
whole tree, ``getrusage(RUSAGE_CHILDREN)``), and of it the system's time and the page faults
(on this project's virtual machine a page touched for the first time since it was freed costs
up to 30 µs of system time, against 0.5 µs for one in use, and most of the spread of wall times
from one hour to the next is there); peak resident memory of the tree (the larger of the
biggest process's ``ru_maxrss`` and the sum over the tree sampled every 0.1 s, for ingest's
workers); and the scenario's own figures, which its script prints (the seconds of the work it
measures, e.g. the replay without the interpreter's start, and its throughput).  Repetitions run
the whole list again; the table gives the median and the range of each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from common import (OBSERVE_RATE, WHAT_IF_RATE, TreeMemory, big_trace, rate_for, read_result,
                    scaled, whatif_trace)

HERE = Path(__file__).resolve().parent
GODEL_WATCHERS = HERE / "godel-watchers.toml"
AUDIT_LOG_BYTES = 2 * 2**30  # at scale 1.0
WHAT_IF_MODELS = ("godel", "kube", "omega", "peer")


@dataclass
class Scenario:
    """One benchmark: the command to run, and which of its figures are the work and the rate."""

    name: str
    what: str
    command: Callable[[Path], list[str]]
    seconds: str  # the figure (from the script's result line) that times the work
    rate: str | None = None  # the figure that is its throughput
    unit: str = ""
    after: Callable[[Path, dict], dict] | None = None  # more figures once it ran


@dataclass
class Outcome:
    scenario: str
    runs: list[dict] = field(default_factory=list)


def script(name: str, *args: object) -> list[str]:
    return [sys.executable, str(HERE / name), *map(str, args)]


def scenarios(scale: float) -> list[Scenario]:
    pods, nodes = scaled(scale)
    observe_rate, what_if_rate = rate_for(pods, OBSERVE_RATE), rate_for(pods, WHAT_IF_RATE)
    log_size = max(round(AUDIT_LOG_BYTES * scale), 2**20)
    out = [Scenario(
        "machine", "the machine itself (benchmarks/machine.py): a Python event loop of 1M "
        "timers, 512 MiB of fresh memory taken and copied (the same at every scale)",
        lambda w: script("machine.py"), "loop_s", "timers_per_s", "timers/s")]
    out.append(Scenario(
        "synth", f"replay synth: {pods:,} pods on {nodes:,} nodes, {observe_rate:g} pods/s, "
        "least-allocated bindings",
        lambda w: script("synth.py", "--pods", pods, "--nodes", nodes, "--arrival-rate",
                         observe_rate, "--out", w / "synth.parquet"),
        "seconds", "rows_per_s", "rows/s"))
    out.append(Scenario(
        "ingest", f"replay ingest of a {log_size / 2**20:,.0f} MiB audit log, two workers",
        lambda w: script("ingest.py", "--log", w / "audit.log", "--repeat", 1),
        "seconds", "events_per_s", "events/s"))
    out.append(Scenario(
        "observe", "replay run (observe) of that trace, Gödel's five watchers",
        lambda w: script("observe.py", big_trace(pods, nodes), "--config", GODEL_WATCHERS,
                         "--repeat", 1, "--out", w / "observe-run"),
        "replay_s", "deliveries_per_s", "deliveries/s"))
    for model in WHAT_IF_MODELS:
        out.append(Scenario(
            f"whatif-{model}", f"replay run --model {model}: {pods:,} pods on {nodes:,} nodes, "
            f"{what_if_rate:g} pods/s",
            lambda w, model=model: script("whatif.py", "--pods", pods, "--nodes", nodes,
                                          "--arrival-rate", what_if_rate, "--model", model,
                                          "--out", w / f"whatif-{model}"),
            "replay_s", "pods_per_s", "pods/s"))
    for run in ("observe-run", "whatif-godel"):
        out.append(Scenario(
            f"derive-{run.split('-')[0] if run == 'observe-run' else 'godel'}",
            f"replay derive: the capacity windows of the {run.replace('-run', '')} run",
            lambda w, run=run: [sys.executable, "-m", "replay", "derive", str(w / run)],
            "wall_s", "windows_per_s", "windows/s", after=windows_per_second(run)))
    for name, run, what in (("observe", "observe-run", "observe"),
                            ("godel", "whatif-godel", "Gödel what-if")):
        out.append(Scenario(
            f"check-{name}", f"replay check: every invariant of the {what} run",
            lambda w, run=run: [sys.executable, "-m", "replay", "check", str(w / run)],
            "wall_s"))
    out.append(Scenario(
        "queries", "every shipped query on the observe run and on the Gödel what-if run",
        lambda w: script("queries.py", w / "observe-run", w / "whatif-godel"),
        "wall_s"))
    out.append(Scenario(
        "report", "replay report of the Gödel what-if run: its ten queries, then the page",
        lambda w: [sys.executable, "-m", "replay", "report", str(w / "whatif-godel"), "--out",
                   str(w / "report.html")],
        "wall_s", after=lambda w, figures: {"page_bytes": (w / "report.html").stat().st_size}))
    out.append(Scenario(
        "compile", "numba's compilation of replay's kernels, as on a fresh machine: the bundled "
        "sample replayed through every model and checked, with an empty numba cache (its "
        "seconds of compilation; the same at every scale)",
        lambda w: script("compile.py"), "compile_s"))
    out.append(Scenario(
        "sweep", "replay sweep examples/sweep.toml: 24 points of the bundled sample, two at a "
        "time (the same at every scale; no process CPU: the points are its fork server's "
        "children, see the script's machine_cpu_s)",
        lambda w: script("sweep.py"), "seconds", "points_per_min", "points/min",
        after=lambda w, figures: dict.fromkeys(("cpu_s", "system_s", "page_faults"))))
    out.append(Scenario(
        "simpy", "the observe pipeline in SimPy, checked equal to replay, then both timed",
        lambda w: script("simpy_baseline.py", big_trace(pods, nodes), "--config",
                         GODEL_WATCHERS),
        "simpy_s", "simpy_deliveries_per_s", "deliveries/s"))
    return out


def windows_per_second(run: str) -> Callable[[Path, dict], dict]:
    def count(work: Path, figures: dict) -> dict:
        import pyarrow.parquet as pq

        windows = pq.ParquetFile(work / run / "capacity_windows.parquet").metadata.num_rows
        return {"capacity_windows": windows, "windows_per_s": windows / figures["wall_s"]}
    return count


def prepare(scale: float, work: Path, names: set[str]) -> None:
    """The inputs, made before any timing: the traces and the audit log."""
    pods, nodes = scaled(scale)
    if names & {"observe", "simpy", "derive-observe", "queries"}:
        big_trace(pods, nodes)
    if names & ({f"whatif-{m}" for m in WHAT_IF_MODELS} | {"derive-godel", "queries"}):
        whatif_trace(pods, nodes, rate_for(pods, WHAT_IF_RATE))
    if "ingest" in names and not (work / "audit.log").exists():
        size = max(round(AUDIT_LOG_BYTES * scale), 2**20)
        subprocess.run(script("make_audit_log.py", "--size", size, "--out", work / "audit.log"),
                       check=True)


def measure(command: list[str], log: Path, cwd: Path = HERE.parent) -> dict:
    """Run ``command`` in ``cwd`` (this repository's root), in a child process that watches
    it (``--measure``), and return its figures."""
    figures = log.with_suffix(".json")
    figures.unlink(missing_ok=True)
    # its exit status is the command's, which the figures hold ("exit")
    subprocess.run([sys.executable, __file__, "--measure", str(figures), str(log), str(cwd),
                    "--", *command], check=False)
    return json.loads(figures.read_text())


def watch(figures: Path, log: Path, cwd: Path, command: list[str]) -> int:
    """``--measure``: run ``command`` in ``cwd``, write its figures to ``figures`` and its
    output to ``log``; the same exit status."""
    started = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
        with TreeMemory(child.pid) as memory:
            code = child.wait()
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {**read_result(log.read_text()),  # the script's own figures, then the tree's
              "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
              "system_s": usage.ru_stime, "page_faults": usage.ru_minflt + usage.ru_majflt,
              "peak_rss_mib": max(usage.ru_maxrss / 1024, memory.peak / 2**20), "exit": code}
    figures.write_text(json.dumps(result))
    return code


def summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def aggregate(scenario: Scenario, runs: list[dict]) -> dict:
    """Median and range of every number the runs share (the queries' per query)."""
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and k != "exit"]
    out = {k: summary([r[k] for r in runs]) for k in keys if all(k in r for r in runs)}
    if "queries" in runs[0]:
        out["queries"] = {q: summary([r["queries"][q]["seconds"] for r in runs])
                          for q in runs[0]["queries"]}
    return out


def fmt(figure: dict | None, digits: int = 2, scale: float = 1.0) -> str:
    if not figure:
        return ""
    median, low, high = (figure[k] / scale for k in ("median", "min", "max"))
    if low == high:
        return f"{median:,.{digits}f}"
    return f"{median:,.{digits}f} ({low:,.{digits}f}–{high:,.{digits}f})"


def rate(figure: dict | None, unit: str) -> str:
    if not figure:
        return ""
    m = figure["median"]
    return (f"{m / 1e6:,.2f}M {unit}" if m >= 1e6 else f"{m / 1e3:,.1f}k {unit}" if m >= 1e3
            else f"{m:,.0f} {unit}")


def markdown(meta: dict, chosen: list[Scenario], results: dict[str, dict]) -> str:
    lines = [
        "# Benchmark results",
        "",
        f"Written by `{meta['command']}` on {meta['date']}: scale {meta['scale']:g} "
        f"({meta['pods']:,} pods on {meta['nodes']:,} nodes), {meta['repeat']} repetition(s), "
        f"commit {meta['commit']}, Python {meta['python']}, {meta['cpus']} cores, "
        f"{meta['memory_gib']:.0f} GiB, load average {meta['load']:.1f} at the start.",
        "",
        "Median (and range) over the repetitions.  *work*: the seconds the script measures of the "
        "work itself (for a replay: reading the trace, replaying, writing the tables; the "
        "derivation is its own row); *process*: the child process's wall and CPU time "
        "(interpreter start and imports included, CPU summed over its threads and workers), "
        "and of the CPU time the system's, with the page faults that are most of it; "
        "*peak RSS*: of its process tree; *load*: the machine's load average when it started "
        "(on 2 cores, a load above 2 means the scenario got a share of a core, and wall times "
        "grow accordingly; CPU times much less).",
        "",
        "| scenario | what | work s | throughput | process wall s | process CPU s | of it system s "
        "| page faults (M) | peak RSS MiB | load |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for s in chosen:
        r = results.get(s.name)
        if not r:
            continue
        lines.append(f"| {s.name} | {s.what} | {fmt(r.get(s.seconds))} | "
                     f"{rate(r.get(s.rate), s.unit) if s.rate else ''} | {fmt(r.get('wall_s'))} | "
                     f"{fmt(r.get('cpu_s'))} | {fmt(r.get('system_s'))} | "
                     f"{fmt(r.get('page_faults'), 2, 1e6)} | {fmt(r.get('peak_rss_mib'), 0)} | "
                     f"{fmt(r.get('load'), 1)} |")
    if "queries" in results and "queries" in results["queries"]:
        lines += ["", "Each shipped query on both runs together (`benchmarks/queries.py`: a "
                  "fresh connection each, the whole result fetched), seconds:", "",
                  "| query | seconds |", "| --- | --- |"]
        lines += [f"| {q} | {fmt(f)} |" for q, f in results["queries"]["queries"].items()]
    if "machine" in results:
        r = results["machine"]
        lines += ["", f"The machine (`benchmarks/machine.py`, run first in each repetition): a "
                  f"Python event loop {rate(r.get('timers_per_s'), 'timers/s')}, fresh memory "
                  f"{fmt(r.get('fault_us'))} µs a page fault, copies "
                  f"{fmt(r.get('copy_gib_per_s'), 1)} GiB/s. Compare these before comparing "
                  "another table's figures with this one's: a what-if replay moves with the "
                  "event loop's rate, an observe run and a derivation with the page faults' "
                  "cost as well."]
    if "simpy" in results:
        r = results["simpy"]
        lines += ["", f"SimPy baseline (`benchmarks/simpy_baseline.py`, equal delivery times "
                  f"checked first): replay {rate(r.get('replay_deliveries_per_s'), 'deliveries/s')}"
                  f", SimPy {rate(r.get('simpy_deliveries_per_s'), 'deliveries/s')}: replay is "
                  f"{fmt(r.get('ratio'), 1)}x as fast on the same "
                  f"{r['deliveries']['median']:,.0f} deliveries."]
    return "\n".join(lines) + "\n"


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--measure"]:
        return watch(Path(argv[1]), Path(argv[2]), Path(argv[3]), argv[5:])
    names = [s.name for s in scenarios(1.0)]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     epilog=f"scenarios: {', '.join(names)}")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="of production (1M pods on 20k nodes, a 2 GiB audit log)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="run the whole list this many times (default 3): median and range")
    parser.add_argument("--only", nargs="+", choices=names, metavar="SCENARIO",
                        help="these scenarios only (queries need observe and whatif-godel, "
                             "report whatif-godel)")
    parser.add_argument("--work", type=Path, help="keep inputs, runs and logs here")
    parser.add_argument("--markdown", type=Path, default=HERE / "RESULTS.md",
                        help="the results table (default benchmarks/RESULTS.md)")
    parser.add_argument("--json", type=Path, default=HERE / "results.json",
                        help="every run's figures (default benchmarks/results.json)")
    parser.add_argument("--section", metavar="NAME",
                        help="replace only this named section of --markdown and --json, "
                             "keeping the others (several runs, e.g. scales, in one file)")
    args = parser.parse_args(argv)
    if args.scale <= 0 or args.repeat < 1:
        parser.error("--scale must be > 0 and --repeat >= 1")
    chosen = [s for s in scenarios(args.scale) if not args.only or s.name in args.only]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        (work / "logs").mkdir(parents=True, exist_ok=True)
        prepare(args.scale, work, {s.name for s in chosen})
        pods, nodes = scaled(args.scale)
        meta = {"command": "python benchmarks/run_all.py " + shlex.join(argv),
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "scale": args.scale, "pods": pods, "nodes": nodes, "repeat": args.repeat,
                "commit": git_commit(), "python": platform.python_version(),
                "cpus": os.cpu_count(), "load": os.getloadavg()[0],
                "memory_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30}
        runs: dict[str, list[dict]] = {s.name: [] for s in chosen}
        for repeat in range(args.repeat):
            for s in chosen:
                log = work / "logs" / f"{s.name}-{repeat + 1}.log"
                print(f"run_all: {s.name} ({repeat + 1}/{args.repeat}) ...", end=" ",
                      file=sys.stderr, flush=True)
                load = os.getloadavg()[0]
                figures = {**measure(s.command(work), log), "load": load}
                if figures["exit"] != 0:
                    print(f"failed (exit {figures['exit']}), see {log}:", file=sys.stderr)
                    print(log.read_text()[-3000:], file=sys.stderr)
                    return 1
                if s.after:
                    figures.update(s.after(work, figures))
                runs[s.name].append(figures)
                print(f"{figures['wall_s']:.1f} s, peak RSS {figures['peak_rss_mib']:,.0f} MiB",
                      file=sys.stderr, flush=True)
        results = {s.name: aggregate(s, runs[s.name]) for s in chosen}
    record = {"meta": meta, "results": results, "runs": runs}
    table = markdown(meta, chosen, results)
    if args.section:
        record = {**_read_json(args.json), args.section: record}
        table = _with_section(args.markdown, args.section, table)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    args.markdown.write_text(table)
    print(table)
    return 0


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if "meta" not in data else {}  # a whole file of one run: replaced


def _with_section(path: Path, name: str, table: str) -> str:
    """``path``'s text with section ``name`` (between its two markers) replaced by ``table``,
    or added at the end; the heading of ``table`` becomes a level-2 one."""
    begin, end = f"<!-- run_all section {name} -->", f"<!-- end of section {name} -->"
    body = f"{begin}\n{table.replace('# Benchmark results', f'## {name}', 1)}{end}\n"
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        rest = rest.split(end, 1)[1].lstrip("\n")
        return head + body + ("\n" + rest if rest else "")
    return text.rstrip("\n") + "\n\n" + body


if __name__ == "__main__":
    sys.exit(main())
