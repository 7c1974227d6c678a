"""Shared test helpers: run the command line in-process, find the shared real data."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from replay.cli.main import main

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("REPLAY_SHARED_DATA", REPO.parent / "shared" / "data"))
SAMPLE_TRACE = REPO / "traces" / "sample.parquet"


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``replay ARGS...`` in this process and return its exit code, stdout and stderr."""

    def run(*args: str) -> Result:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse usage errors and --help
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def shared_data(*parts: str) -> Path:
    """A path under the shared real data, or skip the test when that data is not here."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"shared data not available: {path}")
    return path
