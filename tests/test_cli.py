"""The command line's conventions: --help everywhere, one-line errors, python -m replay."""

from __future__ import annotations

import subprocess
import sys

import pytest

from replay.cli.main import build_parser


def subcommands() -> list[str]:
    actions = [a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sorted(actions[0].choices)


@pytest.mark.parametrize("command", subcommands())
def test_every_command_has_help(cli, command):
    result = cli(command, "--help")
    assert result.code == 0
    assert f"usage: replay {command}" in result.out


def test_python_dash_m_runs_the_cli():
    done = subprocess.run([sys.executable, "-m", "replay", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "synth" in done.stdout


def test_bad_input_is_one_line_without_traceback(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_text("hello")
    done = subprocess.run([sys.executable, "-m", "replay", "validate", str(junk)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "not a readable Parquet file" in done.stderr
    assert "Traceback" not in done.stderr


def test_validate_exit_status_follows_the_verdict(cli, tmp_path):
    from test_trace_format import rows, write

    good = write(tmp_path / "good.parquet", rows())
    bad = write(tmp_path / "bad.parquet", rows(cpu_milli=[-1, -1, -1]))
    assert cli("validate", good).code == 0
    result = cli("validate", bad)
    assert result.code == 1 and "negative cpu_milli" in result.out
