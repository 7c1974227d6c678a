"""benchmarks/run_all.py's measurement of a child process, and its results file's sections;
benchmarks/timeline.py's phases.

The figures are only as good as the measurement: a child whose two workers hold 300 MiB each at
once must show their sum as its peak memory (no one process's peak is that large), and its CPU
time; a section written again replaces itself.
"""

from __future__ import annotations

import json
import subprocess
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


def test_the_timeline_marks_each_phase_of_a_run_in_order(tmp_path):
    """benchmarks/timeline.py runs ``replay run`` and prints a line per phase, in the order
    the run goes through them, then the total; the run directory is complete."""
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "timeline.py"),
         str(REPO / "traces" / "sample.parquet"), "--out", str(tmp_path / "run")],
        capture_output=True, text=True, check=True)
    phases = [line[:36].strip() for line in done.stdout.splitlines()]
    expected = ["imports", "trace read", "table deliveries computed", "last table handed over",
                "writers' tail (close)", "manifest", "derive: views opened",
                "derive step every_change", "derive step received", "derive step inverted",
                "derive: final rows written", "derive: manifest", "rename, summary", "total"]
    places = [phases.index(phase) for phase in expected]
    assert places == sorted(places)
    assert (tmp_path / "run" / "capacity_windows.parquet").is_file()
