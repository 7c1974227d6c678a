"""benchmarks/run_all.py's measurement of a child process, and its results file's sections;
benchmarks/pairs.py's runs of two commits in turn; benchmarks/timeline.py's phases;
benchmarks/machine.py's figures of the machine itself.

The figures are only as good as the measurement: a child whose two workers hold 300 MiB each at
once must show their sum as its peak memory (no one process's peak is that large), and its CPU
time; a section written again replaces itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from conftest import REPO, SAMPLE_TRACE, budget, settings

sys.path.insert(0, str(REPO / "benchmarks"))
import lookahead  # noqa: E402
import machine  # noqa: E402
import pairs  # noqa: E402
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
    assert run_all.watch(figures, log, tmp_path, [sys.executable, "-c", CHILD]) == 0
    result = json.loads(figures.read_text())
    assert result["answer"] == 42 and result["exit"] == 0
    assert result["peak_rss_mib"] >= 550  # the workers' memory together
    assert result["cpu_s"] >= 0.3 and result["wall_s"] >= 1.0
    # the workers' pages, each faulted in once, and the system's time that took
    assert result["page_faults"] >= 2 * (300 << 20) // 4096
    assert 0 < result["system_s"] < result["cpu_s"]


def test_a_failing_child_is_reported(tmp_path):
    figures, log = tmp_path / "child.json", tmp_path / "child.log"
    assert run_all.watch(figures, log, tmp_path, [sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert json.loads(figures.read_text())["exit"] == 3


# A benchmark that reports the value.txt of the tree first on its PYTHONPATH, and notes it in
# the file named by its argument, so that the order of the runs shows.
BENCH = """
import json, os, pathlib, sys
value = float((pathlib.Path(os.environ["PYTHONPATH"].split(os.pathsep)[0]) / "value.txt").read_text())
with open(sys.argv[1], "a") as order:
    order.write(f"{value:g} ")
print("result: " + json.dumps({"value": value}))
"""


def test_pairs_run_the_base_and_the_head_in_turn(tmp_path, monkeypatch, capsys):
    """The base commit in a worktree of its own, the head as the working tree is (uncommitted
    change included), each side's warm-up first, then pairs alternating which side runs first;
    the table's medians, the pairs' difference and how many pairs have the head lower; no
    worktree left behind."""
    repo, order = tmp_path / "repo", tmp_path / "order.txt"
    repo.mkdir()
    (repo / "bench.py").write_text(BENCH)
    (repo / "value.txt").write_text("1")
    for command in (["init", "-q"], ["add", "."],
                    ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base"]):
        subprocess.run(["git", "-C", str(repo), *command], check=True)
    (repo / "value.txt").write_text("3")  # the head: this working tree, not committed
    monkeypatch.chdir(repo)
    assert pairs.main(["HEAD", "--pairs", "3", "--", sys.executable, "bench.py",
                       str(order)]) == 0
    assert order.read_text().split() == ["1", "3", "1", "3", "3", "1", "1", "3"]
    table = capsys.readouterr().out
    assert "| value | 1 (1-1) | 3 (3-3) | +2 | 0 of 3 |" in table
    worktrees = subprocess.run(["git", "-C", str(repo), "worktree", "list"], check=True,
                               capture_output=True, text=True).stdout.splitlines()
    assert len(worktrees) == 1


def test_pairs_refuse_a_revision_that_is_none(tmp_path, monkeypatch, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
    monkeypatch.chdir(repo)
    assert pairs.main(["no-such-revision", "--", sys.executable, "-c", "pass"]) == 1
    said = capsys.readouterr().err.strip().splitlines()
    assert said == [f"pairs: 'no-such-revision' names no commit of {repo}"]


def huge_page() -> int | None:
    """The size of the pages the kernel gives fresh anonymous memory unasked, if huge."""
    try:
        enabled = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return 2 << 20 if "[always]" in enabled else None


def test_the_machine_figures_are_measured_and_tabled(capsys):
    """machine.py's loop fires its timers in five rounds whose median is its figure; taking 4
    MiB of fresh memory faults at least once per page (per huge page, where the kernel gives
    them); the results table says the machine's figures."""
    assert machine.main(["--timers", "5000", "--size-mib", "4"]) == 0
    figures = run_all.read_result(capsys.readouterr().out)
    assert 0 < figures["loop_min_s"] <= figures["loop_s"] <= figures["loop_max_s"]
    assert figures["timers_per_s"] == 5000 / figures["loop_s"]
    assert figures["faults"] >= (4 << 20) // (huge_page() or machine.PAGE)
    assert figures["fault_us"] > 0
    assert figures["copy_gib_per_s"] > 0
    chosen = [s for s in run_all.scenarios(0.01) if s.name == "machine"]
    results = {"machine": run_all.aggregate(chosen[0], [{**figures, "wall_s": 1.0}])}
    meta = {"command": "run_all.py", "date": "today", "scale": 0.01, "pods": 1, "nodes": 1,
            "repeat": 1, "commit": "c", "python": "3", "cpus": 2, "memory_gib": 1, "load": 0}
    table = run_all.markdown(meta, chosen, results)
    assert f"fresh memory {figures['fault_us']:,.2f} µs a page fault" in table
    assert "| machine | the machine itself" in table


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


def test_lookahead_cuts_the_writes_greedily():
    """Hand-worked: with 1 ms, the first batch holds what commits before 1,000 µs, the next
    starts at 1,000 µs; with none, each write is alone, even at the same instant."""
    commits = np.array([0, 500, 999, 1000, 1000, 3000])
    assert lookahead.batch_sizes(commits, 1000).tolist() == [3, 2, 1]
    assert lookahead.batch_sizes(commits, 0).tolist() == [1] * 6


@settings(max_examples=budget(50))
@given(st.lists(st.integers(0, 10_000), max_size=60), st.integers(0, 3_000))
def test_lookahead_batches_are_the_greedy_cut(times, lookahead_us):
    """Every write is in one batch; a batch spans less than the lookahead (or holds one write),
    and the write after it commits at least the lookahead after the batch's first."""
    commits = np.sort(np.asarray(times, dtype=np.int64))
    sizes = lookahead.batch_sizes(commits, lookahead_us)
    assert sizes.sum() == len(commits) and (sizes > 0).all()
    starts = np.r_[0, np.cumsum(sizes)]
    for lo, hi in zip(starts[:-1], starts[1:]):
        assert hi - lo == 1 or commits[hi - 1] - commits[lo] < lookahead_us
        assert hi == len(commits) or commits[hi] - commits[lo] >= lookahead_us


def test_lookahead_reads_a_run_and_refuses_a_directory_that_is_not_one(tmp_path, cli, capsys):
    assert cli("run", SAMPLE_TRACE, "--model", "kube", "--seed", "7",
               "--out", tmp_path / "run").code == 0
    assert lookahead.main([str(tmp_path / "run"), "--lookahead-ms", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("the run's smallest delay (")
    assert "writes alone (100.0%)" in lines[1]
    assert lookahead.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no events.parquet (not a run directory)" in err
