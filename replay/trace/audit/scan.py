"""One block of records -> its rows (an Arrow table) and its counts: the hot loop of an ingest.

A block is scanned on its own, so blocks can be scanned in worker processes and their results
taken in input order.  A block's lines are decoded in one call when they allow it, and one by
one otherwise (see ``event.py``).  Errors are reported in input order: the scan stops at the first
bad record (unless bad records are skipped), and a row error before it wins over it.

Each record gets a ``seq`` that orders all records of the input: the record's global line number
times 2^20, plus the item number inside an ``EventList`` line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pyarrow as pa

from replay.trace import schema
from replay.trace.audit.body import BadBody
from replay.trace.audit.event import (COMPLETE, BadEvent, Event, decode_event, decode_head,
                                      decode_events, decode_items, is_plain)
from replay.trace.audit.reader import Block
from replay.trace.audit.row import Skip, table_of, to_row
from replay.trace.audit.summary import Summary

ITEM_BITS = 20


@dataclass(frozen=True)
class Options:
    keep_reads: bool = False
    skip_bad_lines: bool = False


@dataclass
class Scanned:
    """What a block gave: rows (with ``seq``), counts, and the first error when not skipping."""

    table: Optional[pa.Table] = None
    summary: Summary = field(default_factory=Summary)
    error: Optional[str] = None


def scan(block: Block, first_seq: int, options: Options, seq_step: int = 1 << ITEM_BITS) -> Scanned:
    """Scan ``block``, whose first record has sequence number ``first_seq``."""
    summary, kept, bad = Summary(), [], []
    kept_verbs = schema.VERBS if options.keep_reads else schema.WRITE_VERBS
    events = decode_events(block.text, block.record_count) if block.items is None else None
    records = block.records if events is None else None
    for index in range(block.record_count):
        seq = first_seq + index * seq_step
        try:
            head = events[index] if events is not None else None
            if head is None or not is_plain(head):
                records = records or block.records
                record = records[index]
                if not record or record.isspace():
                    continue
                head = decode_head(record)
                if head.stage is None:  # an EventList: its items are events
                    kept.append((index, _items(head.items, block.where(index), seq + 1, options,
                                               summary, bad, index)))
                    continue
            summary.events += 1
            if head.stage != COMPLETE:
                summary.skipped_stages[head.stage] += 1
            elif head.verb in kept_verbs:
                kept.append((index, head if events is not None else records[index], seq))
            elif head.verb in schema.READ_VERBS:
                summary.reads += 1
            else:
                summary.other_verbs += 1
        except (BadEvent, BadBody) as err:
            bad.append((index, f"{block.where(index)}: {err}"))
        if bad and not options.skip_bad_lines:
            break
    table = _rows(kept, block, summary, bad, options)
    bad.sort()
    summary.bad_lines += len(bad)
    summary.first_bad = bad[0][1] if bad else None
    error = summary.first_bad if bad and not options.skip_bad_lines else None
    return Scanned(table, summary, error)


def _items(items, where: str, first_seq: int, options: Options, summary: Summary,
           bad: list, index: int) -> Optional[pa.Table]:
    """The rows of an ``EventList`` line's items; their counts and errors join the block's."""
    inner = scan(Block(f"{where} EventList", 0, items=decode_items(items)), first_seq, options,
                 seq_step=1)
    bad_items, first_bad = inner.summary.bad_lines, inner.summary.first_bad
    inner.summary.bad_lines, inner.summary.first_bad = 0, None
    summary.add(inner.summary)
    bad += [(index, first_bad)] * bad_items  # each bad item counts as one bad record
    return inner.table


def _rows(kept: list, block: Block, summary: Summary, bad: list, options: Options
          ) -> Optional[pa.Table]:
    """The rows of the kept records, in input order, as one table (None when there are none).

    The records were kept before the scan stopped, so a row error is always the earlier one.
    """
    rows, tables = [], []
    for entry in kept:
        if len(entry) == 2:  # an EventList's rows, already a table (or None)
            tables += [table_of(rows)] if rows else []
            tables += [entry[1]] if entry[1] is not None else []
            rows = []
            continue
        index, event, seq = entry
        try:
            row, lacks_body = to_row(event if isinstance(event, Event) else decode_event(event), seq)
        except Skip as why:
            summary.dropped[str(why)] += 1
            continue
        except (BadEvent, BadBody) as err:
            bad.append((index, f"{block.where(index)}: {err}"))
            if not options.skip_bad_lines:
                break
            continue
        summary.lacking_bodies += lacks_body
        rows.append(row)
    tables += [table_of(rows)] if rows else []
    return pa.concat_tables(tables) if tables else None
