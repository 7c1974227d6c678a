"""One block of records -> its rows (an Arrow table) and its counts: the hot loop of an ingest.

A block is scanned on its own, so blocks can be scanned in worker processes and their results
taken in input order.  A block's lines are decoded in one call when they allow it, and one by
one otherwise (see ``event.py``).  Errors are reported in input order: the scan stops at the first
bad record (unless bad records are skipped), and a row error before it wins over it.

Each record gets a ``seq`` that orders all records of the input: its block's number in the input
times 2^45, plus its number in the block times 2^20, plus its item number inside an ``EventList``
line.  A block does not know where its lines are in the file: it reports a bad record by its
number in the block, and the ingest, which counts the records of the blocks before it, names the
line.
"""

from __future__ import annotations

import gc
from collections import Counter
from dataclasses import dataclass, field
from itertools import compress

import pyarrow as pa

from replay.trace import schema
from replay.trace.audit.body import BadBody
from replay.trace.audit.event import (
    COMPLETE,
    STAGE_TYPES,
    BadEvent,
    Event,
    decode_block,
    decode_event,
    decode_head,
    decode_items,
)
from replay.trace.audit.reader import Block
from replay.trace.audit.row import Skip, rows_of, target_of
from replay.trace.audit.summary import Summary
from replay.trace.audit.uri import has_selector, is_dry_run

ITEM_BITS = 20
RECORD_BITS = 25  # records of a block: at most a 16 MiB range's lines, or 2^20 document items
MAX_BLOCKS = 1 << (63 - ITEM_BITS - RECORD_BITS)
DRY_RUN = "dry-run writes: ?dryRun=All stores nothing"
SELECTED = "pod deletecollections with a selector: which pods they deleted is unknown"


@dataclass(frozen=True)
class Options:
    keep_reads: bool = False
    skip_bad_lines: bool = False

    @property
    def kept_verbs(self) -> tuple[str, ...]:
        return schema.VERBS if self.keep_reads else schema.WRITE_VERBS


@dataclass
class Scanned:
    """What a block gave: rows (with ``seq``), counts, and its first bad record.

    ``first_bad`` is the bad record's number in the block and what is wrong with it, the text
    that follows its position (": not valid JSON ...").
    """

    table: pa.Table | None = None
    summary: Summary = field(default_factory=Summary)
    records: int = 0
    first_bad: tuple[int, str] | None = None


def first_seq(block_number: int) -> int:
    """The ``seq`` of the first record of the input's ``block_number``-th block."""
    return block_number << (RECORD_BITS + ITEM_BITS)


def scan(block: Block, first_seq: int, options: Options, seq_step: int = 1 << ITEM_BITS) -> Scanned:
    """Scan ``block``, whose first record has sequence number ``first_seq``.

    The garbage collector is paused meanwhile: a scan makes no reference cycles, and the
    collector's passes, prompted by the many objects a block allocates, took a sixth of the time.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _scan(block, first_seq, options, seq_step)
    finally:
        if collecting:
            gc.enable()


def _scan(block: Block, first_seq: int, options: Options, seq_step: int) -> Scanned:
    summary = Summary()
    bad: list[tuple[int, str]] = []
    tables: list[pa.Table] = []
    events = decode_block(block.text, block.record_count) if block.items is None else None
    if events is not None:
        kept = _kept_events(events, summary, options)
    else:
        kept = _kept_records(block, first_seq, seq_step, options, summary, bad, tables)
    tables += _rows(_stored(kept, summary), first_seq, seq_step, summary, bad, options)
    bad.sort()
    summary.bad_lines += len(bad)
    return Scanned(pa.concat_tables(tables) if tables else None, summary, block.record_count,
                   bad[0] if bad else None)


def _kept_events(events: list, summary: Summary, options: Options) -> list[tuple[int, Event]]:
    """The (index, event) of the events of a block decoded at once that can become rows."""
    summary.events += len(events)
    for stage_type, count in Counter(map(type, events)).items():
        if stage_type is not Event:
            summary.skipped_stages[STAGE_TYPES[stage_type]] += count
    _count_dropped_verbs(Counter([e.verb for e in events if e.__class__ is Event]), summary,
                         options)
    kept_verbs = options.kept_verbs
    kept = compress(range(len(events)), [e.__class__ is Event and e.verb in kept_verbs
                                         for e in events])
    return [(index, events[index]) for index in kept]


def _stored(kept: list[tuple[int, Event]], summary: Summary) -> list[tuple[int, Event]]:
    """The kept events but those whose effect on the stored objects a trace cannot hold: dry-run
    writes, which the API server answered without storing them (as rows they would be objects
    no watcher ever saw), and pod deletecollections with a selector, whose pods depend on labels
    and fields a trace does not keep (``collections.py``)."""
    stored = []
    for item in kept:
        why = _unstorable(item[1])
        if why is None:
            stored.append(item)
        else:
            summary.dropped[why] += 1
    return stored


def _unstorable(event: Event) -> str | None:
    uri = event.request_uri
    if uri is None or ("dryRun" not in uri and "Selector=" not in uri):  # the quick test
        return None
    if is_dry_run(uri):
        return DRY_RUN
    if event.verb == "deletecollection" and has_selector(uri) and _resource(event) == "pods":
        return SELECTED
    return None


def _resource(event: Event) -> str | None:
    try:
        return target_of(event).resource
    except Skip:  # a non-resource request
        return None


def _count_dropped_verbs(verbs: Counter, summary: Summary, options: Options) -> None:
    """Count the completed events (``verbs`` counts them by verb) whose verb makes no row."""
    for verb, count in verbs.items():
        if verb in options.kept_verbs:
            continue
        if verb in schema.READ_VERBS:
            summary.reads += count
        else:
            summary.other_verbs += count


def _kept_records(block: Block, first_seq: int, seq_step: int, options: Options,
                  summary: Summary, bad: list, tables: list) -> list[tuple[int, Event]]:
    """The (index, event) of a block's records that can become rows, read one by one.

    Blank lines are skipped; bad records are added to ``bad`` (the scan stops at the first unless
    skipping them); the rows of ``EventList`` lines are added to ``tables``.
    """
    kept: list[tuple[int, Event]] = []
    verbs: Counter[str | None] = Counter()  # a completed event may lack its verb
    for index, record in enumerate(block.records):
        try:
            if not record or record.isspace():
                continue
            head = decode_head(record)
            if head.stage is None:  # an EventList: its items are events
                tables += _items(head.items, first_seq + index * seq_step + 1, options, summary,
                                 bad, index)
                continue
            summary.events += 1
            if head.stage != COMPLETE:
                summary.skipped_stages[head.stage] += 1
            elif head.verb in options.kept_verbs:
                kept.append((index, decode_event(record)))
            else:
                verbs[head.verb] += 1
        except (BadEvent, BadBody) as err:
            bad.append((index, f": {err}"))
        if bad and not options.skip_bad_lines:
            break
    _count_dropped_verbs(verbs, summary, options)
    return kept


def _items(items, first_seq: int, options: Options, summary: Summary, bad: list, index: int
           ) -> list[pa.Table]:
    """The rows of an ``EventList`` line's items; their counts and errors join the block's."""
    inner = _scan(Block("", items=decode_items(items)), first_seq, options, seq_step=1)
    bad_items = inner.summary.bad_lines
    inner.summary.bad_lines = 0
    summary.add(inner.summary)
    if bad_items:  # each bad item counts as one bad record
        assert inner.first_bad is not None  # a scan with bad lines names its first
        item, problem = inner.first_bad
        bad += [(index, f" EventList (item {item + 1}){problem}")] * bad_items
    return [inner.table] if inner.table is not None else []


def _rows(kept: list[tuple[int, Event]], first_seq: int, seq_step: int, summary: Summary,
          bad: list, options: Options) -> list[pa.Table]:
    """The rows of the kept events; their errors join ``bad``.

    The events were kept before the scan stopped, so a row error is always the earlier one.
    """
    if not kept:
        return []
    rows = rows_of([event for _, event in kept], [first_seq + index * seq_step for index, _ in kept],
                   keep_going=options.skip_bad_lines)
    summary.dropped.update(rows.dropped)
    summary.lacking_bodies += rows.lacking_bodies
    bad += [(kept[position][0], f": {err}") for position, err in rows.errors]
    return rows.tables
