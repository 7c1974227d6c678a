"""``replay ingest``: audit log files -> one trace file, and a summary of what was kept.

Blocks of lines are scanned (``scan.py``) in input order; on inputs larger than a few blocks, two
worker processes scan them (reading plain files themselves, see ``reader.py``) while this process
hands out blocks, numbers their lines and spills their rows (``order.py``).  Any bad line stops
the ingest with its file and line number, and no output file appears, unless ``skip_bad_lines``
is set: then bad lines are counted and the first is quoted in the summary.  The workers die with
this process (``replay.workers``); the spill folder is a temporary of the output's folder, which
the next write there removes if this process was killed (``replay.atomic``).
"""

from __future__ import annotations

import itertools
import os
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from replay.atomic import make_folder, temporary_dir
from replay.errors import ReplayError
from replay.outputs import check_output
from replay.progress import progress
from replay.trace.audit.order import RowSpill, in_order
from replay.trace.audit.reader import STDIN, Block, LongLine, Range, Truncated, read_blocks
from replay.trace.audit.scan import MAX_BLOCKS, Options, Scanned, first_seq, scan
from replay.trace.audit.summary import Summary
from replay.trace.io import trace_writer
from replay.workers import worker_pool

SOURCE = "audit"
IN_PROCESS_BLOCKS = 2  # inputs of up to this many blocks (32 MiB) are scanned without workers
WORKERS = 2
AHEAD = 2  # blocks queued per worker


@dataclass(frozen=True)
class Task:
    """A block of the input to scan, or (``ready``) the result of a gzip stream's cut-off end."""

    file: int  # the position of its file among the inputs
    piece: Block | Range | LongLine
    first_seq: int
    options: Options
    ready: Scanned | None = None


def ingest(sources: list[str], out: str | os.PathLike, *, keep_reads: bool = False,
           skip_bad_lines: bool = False, workers: int = WORKERS) -> Summary:
    """Read the audit logs ``sources`` (paths or ``-``, in time order) into the trace ``out``."""
    out = Path(out)
    for source in sources:
        if source != STDIN and Path(source).is_dir():
            raise ReplayError(f"{source}: is a directory, not an audit log")
    check_output(out, sources)
    options = Options(keep_reads, skip_bad_lines)
    make_folder(out.parent)
    with temporary_dir(out.parent, out.name) as folder:
        spill = RowSpill(folder)
        summary, records = Summary(), Counter[int]()
        with progress(None, "ingest", "lines") as bar:
            for task, scanned in _scanned(sources, options, workers):
                _take(task, scanned, records, summary, spill)
                bar.update(scanned.summary.events)
        if summary.events == 0:
            raise ReplayError(_no_events(sources, summary))
        args = {"files": [STDIN if s == STDIN else Path(s).name for s in sources],
                "keep_reads": keep_reads, "skip_bad_lines": skip_bad_lines}
        with trace_writer(out, source=SOURCE, source_args=args) as writer:
            summary.by_verb_resource = spill.drain(writer)
    collections = spill.collections  # each became as many rows as the pods it deleted
    summary.collections, summary.collected = collections.events, collections.deletes
    summary.rows = writer.rows
    summary.duplicates = spill.rows - (writer.rows - collections.deletes + collections.events)
    return summary


def _take(task: Task, scanned: Scanned, records: Counter, summary: Summary,
          spill: RowSpill) -> None:
    """Add a block's result; ``records`` counts the records of each file's blocks so far."""
    if scanned.first_bad is not None:
        record, problem = scanned.first_bad
        message = task.piece.where(records[task.file] + record) + problem
        if not task.options.skip_bad_lines:
            raise ReplayError(message)
        scanned.summary.first_bad = message
    records[task.file] += scanned.records
    summary.add(scanned.summary)
    if scanned.table is not None:
        spill.add(scanned.table)


def _scanned(sources: list[str], options: Options, workers: int
             ) -> Iterator[tuple[Task, Scanned]]:
    """The scans of all blocks in input order, by workers when the input has more than a few."""
    tasks = _tasks(sources, options)
    first, scans = [], 0
    for task in tasks:  # until more blocks to scan than this process scans alone
        first.append(task)
        scans += task.ready is None and not isinstance(task.piece, LongLine)
        if scans > IN_PROCESS_BLOCKS:
            break
    tasks = itertools.chain(first, tasks)
    if scans <= IN_PROCESS_BLOCKS or workers < 2:
        yield from ((task, _run(task)) for task in tasks)
        return
    with worker_pool(workers) as pool:
        pending: deque = deque()
        for task in tasks:
            pending.append((task, pool.submit(_run, task)))
            if len(pending) >= workers * AHEAD:
                task, future = pending.popleft()
                yield task, future.result()
        while pending:
            task, future = pending.popleft()
            yield task, future.result()


def _tasks(sources: list[str], options: Options) -> Iterator[Task]:
    """Every block of the input, in order.

    A gzip file cut short ends with a ready result holding one bad line, so that it is reported
    (or counted) in its place in the input.
    """
    blocks = 0
    for file, source in enumerate(sources):
        try:
            for piece in read_blocks(source):
                if blocks == MAX_BLOCKS:
                    raise ReplayError(f"the input is too large (more than {MAX_BLOCKS:,} blocks)")
                yield Task(file, piece, first_seq(blocks), options)
                blocks += 1
        except Truncated as err:
            cut = Scanned(summary=Summary(bad_lines=1), first_bad=(0, f": {err.problem}"))
            yield Task(file, Block(source), 0, options, cut)


def _run(task: Task) -> Scanned:
    """Scan a task's block (reading it first if it is a range of a file), rows sorted."""
    if task.ready is not None:
        return task.ready
    if isinstance(task.piece, LongLine):
        return Scanned(summary=Summary(bad_lines=1), records=1,
                       first_bad=(0, f": {task.piece.problem}"))
    block = task.piece.block() if isinstance(task.piece, Range) else task.piece
    scanned = scan(block, task.first_seq, task.options)
    if scanned.table is not None:
        scanned.table = in_order(scanned.table)
    return scanned


def _no_events(sources: list[str], summary: Summary) -> str:
    names = ", ".join("stdin" if s == STDIN else s for s in sources)
    if summary.bad_lines:
        return f"no audit events in {names}: all {summary.bad_lines:,} lines were bad"
    return f"no audit events in {names}: the input is empty"
