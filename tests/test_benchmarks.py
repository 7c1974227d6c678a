"""benchmarks/run_all.py's measurement of a child process, and its results file's sections.

The figures are only as good as the measurement: a child whose two workers hold 300 MiB each at
once must show their sum as its peak memory (no one process's peak is that large), and its CPU
time; a section written again replaces itself.
"""

from __future__ import annotations

import json
import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))
import run_all  # noqa: E402

# A child that starts two workers holding 300 MiB each for a second while it burns CPU itself,
# and prints a result line.
CHILD = """
import subprocess, sys, time
hold = [subprocess.Popen([sys.executable, "-c",
    "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(1.5)"])
    for _ in range(2)]
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
for worker in hold:
    worker.wait()
print('result: {"answer": 42}')
"""


def test_the_child_tree_is_measured(tmp_path):
    figures, log = tmp_path / "child.json", tmp_path / "child.log"
    assert run_all.watch(figures, log, [sys.executable, "-c", CHILD]) == 0
    result = json.loads(figures.read_text())
    assert result["answer"] == 42 and result["exit"] == 0
    assert result["peak_rss_mib"] >= 550  # the workers' memory together
    assert result["cpu_s"] >= 0.3 and result["wall_s"] >= 1.0


def test_a_failing_child_is_reported(tmp_path):
    figures, log = tmp_path / "child.json", tmp_path / "child.log"
    assert run_all.watch(figures, log, [sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert json.loads(figures.read_text())["exit"] == 3


def test_a_section_is_replaced_and_the_rest_kept(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\nWritten by hand.\n")
    for name, text in (("a", "first"), ("b", "second"), ("a", "third")):
        path.write_text(run_all._with_section(path, name, f"# Benchmark results\n\n{text}\n"))
    text = path.read_text()
    assert "Written by hand." in text and "second" in text and "third" in text
    assert "first" not in text and text.index("## a") < text.index("## b")
