"""``replay models``: every registered model, its parameters and their defaults."""

from __future__ import annotations

import argparse

from replay.errors import ReplayError


def add_parser(commands) -> None:
    parser = commands.add_parser(
        "models", help="list the registered models and their parameters",
        description="List every model registered in the replay.models entry-point group (the "
                    "built-ins and any installed plugin), with a one-line description and its "
                    "parameters (set them with [model] in --config or -p KEY=VALUE).")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from replay import models  # (cli/main.py: imported when run)

    for name in models.registered():
        try:
            model = models.load(name)
        except ReplayError as err:
            print(f"{name}: cannot be loaded: {err}")
            continue
        print(f"{name}: {model.description}")
        for param in model.params:
            choices = f" ({' | '.join(map(str, param.choices))})" if param.choices else ""
            print(f"    {param.name} = {param.default!r}{choices}: {param.help}")
    return 0
