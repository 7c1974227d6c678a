"""``replay ingest``: audit log files -> one trace file, and a summary of what was kept.

Blocks of lines are scanned (``scan.py``) in input order; on inputs larger than a few blocks, two
worker processes scan them while this process reads ahead and spills their rows (``order.py``).
Any bad line stops the ingest with its file and line number, and no output file appears, unless
``skip_bad_lines`` is set: then bad lines are counted and the first is quoted in the summary.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import tempfile
from collections import Counter, deque
from pathlib import Path
from typing import Iterator

import duckdb

from replay.errors import ReplayError
from replay.progress import progress
from replay.trace.audit.order import RowSpill
from replay.trace.audit.reader import STDIN, Truncated, read_blocks
from replay.trace.audit.scan import ITEM_BITS, Options, Scanned, scan
from replay.trace.audit.summary import Summary
from replay.trace.io import trace_writer

SOURCE = "audit"
IN_PROCESS_BLOCKS = 4  # inputs of up to this many blocks (16 MiB) are scanned without workers
WORKERS = 2
AHEAD = 2  # blocks queued per worker


def ingest(sources: list[str], out: str | os.PathLike, *, keep_reads: bool = False,
           skip_bad_lines: bool = False, workers: int = WORKERS) -> Summary:
    """Read the audit logs ``sources`` (paths or ``-``, in time order) into the trace ``out``."""
    out = Path(out)
    options = Options(keep_reads, skip_bad_lines)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.", dir=out.parent) as folder:
        spill = RowSpill(Path(folder))
        summary = Summary()
        with progress(None, "ingest", "lines") as bar:
            for scanned in _scanned(sources, options, workers):
                _take(scanned, summary, spill)
                bar.update(scanned.summary.events)
        if summary.events == 0:
            raise ReplayError(_no_events(sources, summary))
        args = {"files": [STDIN if s == STDIN else Path(s).name for s in sources],
                "keep_reads": keep_reads, "skip_bad_lines": skip_bad_lines}
        with trace_writer(out, source=SOURCE, source_args=args) as writer:
            summary.duplicates = spill.drain(writer)
    summary.rows = writer.rows
    summary.by_verb_resource = _kept_by_verb_resource(out)
    return summary


def _take(scanned: Scanned, summary: Summary, spill: RowSpill) -> None:
    if scanned.error:
        raise ReplayError(scanned.error)
    summary.add(scanned.summary)
    if scanned.table is not None:
        spill.add(scanned.table)


def _scanned(sources: list[str], options: Options, workers: int) -> Iterator[Scanned]:
    """The scans of all blocks in input order; workers join in once the input proves large."""
    tasks = _tasks(sources, options)
    for _ in range(IN_PROCESS_BLOCKS):
        task = next(tasks, None)
        if task is None:
            return
        yield _run(task)
    if workers < 2:
        yield from map(_run, tasks)
        return
    context = multiprocessing.get_context("spawn")  # no fork: DuckDB and Arrow keep threads
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        pending: deque = deque()
        for task in tasks:
            pending.append(pool.submit(_run, task))
            if len(pending) >= workers * AHEAD:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _tasks(sources: list[str], options: Options) -> Iterator[tuple | Scanned]:
    """(block, first seq, options) for every block, in input order.

    A gzip file cut short becomes a ready result holding one bad line, so that it is reported
    (or counted) in its place in the input.
    """
    lines = 0  # lines before the current block, over all files
    for source in sources:
        try:
            for block in read_blocks([source]):
                yield block, lines << ITEM_BITS, options
                lines += block.record_count
        except Truncated as err:
            yield Scanned(summary=Summary(bad_lines=1, first_bad=str(err)),
                          error=None if options.skip_bad_lines else str(err))


def _run(task: tuple | Scanned) -> Scanned:
    return task if isinstance(task, Scanned) else scan(*task)


def _kept_by_verb_resource(path: Path) -> Counter:
    """Rows of the written trace by verb and resource (``pods/binding`` for subresources)."""
    rows = duckdb.sql("SELECT verb, resource || coalesce('/' || subresource, ''), count(*) "
                      "FROM read_parquet($p) GROUP BY ALL", params={"p": str(path)}).fetchall()
    return Counter({(verb, resource): n for verb, resource, n in rows})


def _no_events(sources: list[str], summary: Summary) -> str:
    names = ", ".join("stdin" if s == STDIN else s for s in sources)
    if summary.bad_lines:
        return f"no audit events in {names}: all {summary.bad_lines:,} lines were bad"
    return f"no audit events in {names}: the input is empty"
