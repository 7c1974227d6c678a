"""``replay TRACE``: the usage the tool was designed around, ``replay run`` and ``replay query``
in one step.

The trace is replayed with the default model (or ``--model``) into the default run directory,
which replaces a previous run there (only a run directory, as ``--force`` does), and the headline
answers are printed.
"""

from __future__ import annotations

import argparse

from replay.cli.query import print_headline
from replay.cli.run import add_run_options, print_summary, replay_from

USAGE = "replay TRACE [--model NAME] [--config FILE.toml] [-p KEY=VALUE] [--seed N] [--out RUN_DIR]"


def parser() -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(
        prog="replay", usage=USAGE,
        description="Replay TRACE through a model of the watch pipeline into its run directory "
                    "(runs/<trace stem>-<model>, replacing an earlier run there) and print the "
                    "headline answers: `replay run TRACE --force` then `replay query RUN_DIR`.")
    add_run_options(out)
    return out


def main(argv: list[str]) -> int:
    result = replay_from(parser().parse_args(argv), force=True)
    print_summary(result)
    print()
    print_headline([str(result.out)])
    return 0
