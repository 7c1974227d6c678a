"""A change measured against a base within the same minutes: one benchmark command run in turn
on two commits of this repository, pair by pair.

    python benchmarks/pairs.py BASE [--head REV] [--pairs 3] [--warmup 1] [--logs DIR] -- COMMAND...
    python benchmarks/pairs.py main~2 -- python benchmarks/observe.py TRACE \\
        --config benchmarks/godel-watchers.toml --repeat 1

This machine's speed moves by up to a third from hour to hour for the same code, so figures
taken an hour apart (``run_all.py``'s sections) cannot show a change of a few percent; two
runs side by side can.  Each commit is checked out in a git worktree of its own (removed at the
end); ``--head`` defaults to this working tree as it is, uncommitted changes included.  The
command runs in the commit's tree (its directory the current one, its root first on
``PYTHONPATH``), watched as ``run_all.py`` watches a scenario: wall time, CPU time and peak
resident memory of the process tree, and the figures of the command's ``result:`` line.  The
pairs alternate which side runs first, so that a drift within the pairs does not favour one.
numba compiles the kernels a commit changed on their first call: each side first runs
``--warmup`` times, not counted.

Prints each pair as it ends, then per figure both sides' medians and ranges, the median of the
pairs' differences (head less base), and in how many pairs the head's figure was the lower.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from run_all import measure

SIDES = ("base", "head")


@dataclass(frozen=True)
class Side:
    name: str  # base or head
    root: Path  # the tree the command runs in


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser()
    split = argv.index("--") if "--" in argv else len(argv)
    args, command = parser.parse_args(argv[:split]), argv[split + 1:]
    if not command:
        parser.error("give the command to run after --")
    if args.pairs < 1 or args.warmup < 0:
        parser.error("--pairs must be >= 1 and --warmup >= 0")
    try:
        repo = _git(Path.cwd(), "rev-parse", "--show-toplevel")
        with tempfile.TemporaryDirectory() as tmp, \
                _trees(Path(repo), args.base, args.head, Path(tmp)) as sides:
            logs = args.logs or Path(tmp) / "logs"
            logs.mkdir(parents=True, exist_ok=True)
            return _measured(sides, command, args.pairs, args.warmup, logs)
    except (OSError, subprocess.CalledProcessError, Refused) as error:
        print(f"pairs: {_reason(error)}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="%(prog)s BASE [--head REV] [--pairs N] [--warmup N] [--logs DIR] -- COMMAND...")
    parser.add_argument("base", help="the commit measured against (any git revision)")
    parser.add_argument("--head", help="the commit measured (default: this working tree, "
                                       "uncommitted changes included)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (default 3)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="runs of each side first, not counted (default 1: numba's cache)")
    parser.add_argument("--logs", type=Path, help="keep each run's output here")
    return parser


class Refused(Exception):
    """What stops the pairs: a revision that names no commit, a run that fails."""


def _measured(sides: tuple[Side, Side], command: list[str], pairs: int, warmup: int,
              logs: Path) -> int:
    for side in sides:
        for number in range(warmup):
            _run(side, command, logs / f"{side.name}-warmup-{number + 1}.log")
    runs: dict[str, list[dict]] = {side.name: [] for side in sides}
    for number in range(pairs):
        order = sides if number % 2 == 0 else sides[::-1]
        for side in order:
            runs[side.name].append(_run(side, command, logs / f"{side.name}-{number + 1}.log"))
        print(f"pair {number + 1} ({order[0].name} first): "
              + "; ".join(f"{name} {_brief(runs[name][-1])}" for name in SIDES), flush=True)
    print(_table(runs))
    return 0


def _run(side: Side, command: list[str], log: Path) -> dict:
    """The command's figures in ``side``'s tree (only the command imports the side's
    ``replay``: the watcher is this tree's); Refused if it fails."""
    path = os.pathsep.join(filter(None, [str(side.root), os.environ.get("PYTHONPATH")]))
    figures = measure(["env", f"PYTHONPATH={path}", *command], log, cwd=side.root)
    if figures["exit"] != 0:
        raise Refused(f"the {side.name} run exited with {figures['exit']}: see {log}")
    return figures


def _brief(figures: dict) -> str:
    """A run's seconds (the figures named ``*_s``)."""
    return ", ".join(f"{key} {_figure(value)}" for key, value in _numbers(figures).items()
                     if key.endswith("_s"))


def _figure(value: float, sign: str = "") -> str:
    """Four significant digits, or a whole number with thousands separated from 10,000 on."""
    return f"{value:{sign},.0f}" if abs(value) >= 10_000 else f"{value:{sign}.4g}"


def _numbers(figures: dict) -> dict[str, float]:
    return {key: value for key, value in figures.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "exit"}


def _table(runs: dict[str, list[dict]]) -> str:
    """Per figure both sides share: each side's median (range), the median of the pairs'
    differences, head less base, and in how many pairs the head's figure was the lower.

    The count is the evidence on this machine, whose speed drifts within minutes: a median of
    a few differences can be one pair's, a count says whether the pairs agree (a change that
    does nothing is lower in about half of them, and in all of six by chance once in 64)."""
    base, head = (runs[name] for name in SIDES)
    keys = [key for key in _numbers(base[0]) if all(key in run for run in base + head)]
    lines = ["| figure | base | head | head - base (median of the pairs) | pairs with head lower |",
             "| --- | --- | --- | --- | --- |"]
    for key in keys:
        differences = [h[key] - b[key] for b, h in zip(base, head)]
        lower = sum(difference < 0 for difference in differences)
        lines.append(f"| {key} | {_spread([r[key] for r in base])} | "
                     f"{_spread([r[key] for r in head])} | "
                     f"{_figure(statistics.median(differences), '+')} | "
                     f"{lower} of {len(differences)} |")
    return "\n".join(lines)


def _spread(values: list[float]) -> str:
    return f"{_figure(statistics.median(values))} ({_figure(min(values))}-{_figure(max(values))})"


@contextlib.contextmanager
def _trees(repo: Path, base: str, head: str | None, tmp: Path) -> Iterator[tuple[Side, Side]]:
    """The two sides' trees: a worktree of each commit given (removed afterwards), the
    repository's own working tree for a head not given."""
    added: list[Path] = []
    try:
        roots = []
        for name, revision in zip(SIDES, (base, head)):
            if revision is None:
                roots.append(repo)
                continue
            try:
                commit = _git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
            except subprocess.CalledProcessError:
                raise Refused(f"{revision!r} names no commit of {repo}") from None
            root = tmp / name
            _git(repo, "worktree", "add", "--detach", "--quiet", str(root), commit)
            added.append(root)
            roots.append(root)
        yield Side(SIDES[0], roots[0]), Side(SIDES[1], roots[1])
    finally:
        for root in added:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(root)],
                           capture_output=True)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def _reason(error: Exception) -> str:
    if isinstance(error, subprocess.CalledProcessError):
        said = (error.stderr or "").strip().splitlines()
        return f"{' '.join(map(str, error.cmd))} failed" + (f": {said[-1]}" if said else "")
    return str(error)


if __name__ == "__main__":
    sys.exit(main())
