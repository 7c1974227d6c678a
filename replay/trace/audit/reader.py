"""Cut audit log files (plain or gzip, or ``-`` for stdin) into blocks of whole lines.

A plain file is cut into ``Range``s of about ``RANGE`` bytes, each ending at a newline: whoever
scans a range reads it, so worker processes read the file themselves and the process handing out
ranges reads only a little around each cut.  Gzip input and stdin are streams: they are read
here in ``Block``s of ``BLOCK`` bytes cut at the last newline.  Either way memory stays bounded
whatever the file's size.  A block does not know its first line's number (that would take
counting every line before it); it knows how many records it holds, and the ingest, which takes
blocks in input order, numbers their lines (``where``).

Compression is recognised by the gzip magic bytes, not the file name, so it works on stdin too;
a stream cut short (a log copied while being written) is reported as truncated rather than
silently losing its end.  A UTF-8 byte order mark at the start (which Windows' editors write)
is skipped.

A line longer than ``MAX_LINE_BYTES`` becomes a ``LongLine``, a bad record in its place (reported
by its line number, or skipped and counted), and is never held whole in memory.

The API server's log backend writes JSON lines, but exported logs are sometimes one JSON document
per file (pretty-printed, a JSON array of events, or an ``EventList``).  A file is read as one
document when its first line is ``{`` alone or starts with ``[``; such a file is read into memory
at once, and its records are numbered by item rather than by line.
"""

from __future__ import annotations

import io
import os
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, cast, overload

import numpy as np

from replay.errors import ReplayError
from replay.limits import MAX_LINE_BYTES
from replay.trace.audit.event import BadEvent, decode_document

RANGE = 16 << 20
BLOCK = 16 << 20
DOCUMENT_ITEMS = 1 << 20  # a document's items per block
PEEK = 1 << 16  # bytes read to tell gzip, a JSON document and JSON lines apart
GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"  # a trace, or a run's table, given where a log was meant
BOM = b"\xef\xbb\xbf"  # UTF-8's byte order mark, skipped where a log starts with one
STDIN = "-"


@dataclass
class Block:
    """Whole lines of one file, or some items of a JSON document."""

    source: str
    text: bytes = b""  # complete lines, newline-separated
    items: list | None = None  # a document's records (bytes), numbered by item
    record_count: int = 0

    @property
    def records(self) -> list:
        if self.items is not None:
            return self.items
        lines = self.text.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        return lines

    def __post_init__(self):
        if self.items is not None:
            self.record_count = len(self.items)
        elif not self.record_count:
            self.record_count = _lines(self.text)

    def where(self, record: int) -> str:
        """The position of the file's ``record``-th record (from 0) in words."""
        if self.items is not None:
            return f"{self.source} (item {record + 1})"
        return f"{self.source}:{record + 1}"


def _lines(text: bytes) -> int:
    """The number of lines in ``text``.

    numpy counts newlines faster than ``bytes.count``, a MiB at a time so as not to allocate
    (and fault in) a mask as large as the block.
    """
    data = np.frombuffer(text, np.uint8)
    newlines = sum(int(np.count_nonzero(data[start:start + (1 << 20)] == ord("\n")))
                   for start in range(0, len(data), 1 << 20))
    return newlines + (not text.endswith(b"\n"))


@dataclass(frozen=True)
class Range:
    """Bytes ``start`` to ``end`` of the plain file ``source``: whole lines, read by ``block``."""

    source: str
    start: int
    end: int

    def block(self) -> Block:
        try:
            with open(self.source, "rb") as stream:
                stream.seek(self.start)
                text = stream.read(self.end - self.start)
        except OSError as err:
            raise ReplayError(f"{self.source}: cannot read ({err.strerror or err})") from None
        return Block(self.source, text)

    def where(self, record: int) -> str:
        return f"{self.source}:{record + 1}"


@dataclass(frozen=True)
class LongLine:
    """A line of ``source`` longer than ``MAX_LINE_BYTES``: one bad record, read no further."""

    source: str
    record_count: int = 1
    problem: str = (f"a line longer than {MAX_LINE_BYTES >> 20} MiB, the limit (the API server "
                    f"writes no audit event that long)")

    def where(self, record: int) -> str:
        return f"{self.source}:{record + 1}"


class Truncated(ReplayError):
    """A gzip stream that ends before its end marker, inside line ``line``."""

    def __init__(self, source: str, line: int):
        self.problem = f"truncated gzip stream (the file ends inside line {line})"
        super().__init__(f"{source}:{line}: {self.problem}")


class _Cut(Exception):
    """Raised by ``_decompressed`` at the end of a gzip stream that lacks its end marker."""


def read_blocks(source: str) -> Iterator[Block | Range | LongLine]:
    """The ranges of a plain file, or the blocks of a gzip file, stdin or a JSON document."""
    with _open(source) as stream:
        start = stream.peek(PEEK)
        if start[:4] == PARQUET_MAGIC:
            raise ReplayError(f"{source}: a Parquet file (a trace?), not an audit log")
        if source == STDIN or start[:2] == GZIP_MAGIC:
            yield from _blocks(source, stream)
        elif _is_document(start.removeprefix(BOM)):
            yield from _document(source, stream.read().removeprefix(BOM))
        else:
            yield from _ranges(source, stream, first=len(BOM) * start.startswith(BOM))


def _open(source: str) -> io.BufferedReader:
    if source == STDIN:
        return io.BufferedReader(io.FileIO(sys.stdin.fileno(), closefd=False), PEEK)
    try:
        # a buffered binary read (typeshed types open() with a computed buffer size as BinaryIO)
        return cast(io.BufferedReader, open(source, "rb", buffering=PEEK))
    except IsADirectoryError:
        raise ReplayError(f"{source}: is a directory, not an audit log") from None
    except OSError as err:
        raise ReplayError(f"{source}: cannot read ({err.strerror or err})") from None


def _ranges(source: str, stream: BinaryIO, first: int = 0) -> Iterator[Range | LongLine]:
    """``source`` from byte ``first`` on, cut into ranges of at least ``RANGE`` bytes that end
    at a newline, and the lines too long to read."""
    file = stream.fileno()
    size = os.fstat(file).st_size
    start = first
    while start < size:
        at = min(start + RANGE, size)
        end = _line_end(file, at, size, limit=MAX_LINE_BYTES)
        if end is not None and (end - start <= MAX_LINE_BYTES
                                or end - _line_start(file, start, at) <= MAX_LINE_BYTES):
            yield Range(source, start, end)
            start = end
            continue
        line_start = _line_start(file, start, at)
        if line_start > start:
            yield Range(source, start, line_start)
        yield LongLine(source)
        start = _line_end(file, at, size)


@overload
def _line_end(file: int, at: int, size: int) -> int: ...


@overload
def _line_end(file: int, at: int, size: int, limit: int | None) -> int | None: ...


def _line_end(file: int, at: int, size: int, limit: int | None = None) -> int | None:
    """Where the line holding byte ``at - 1`` of the open ``file`` ends (past its newline);
    None if that is more than ``limit`` bytes further."""
    at -= 1
    searched = 0
    while piece := os.pread(file, 1 << 16, at):
        newline = piece.find(b"\n")
        if newline >= 0:
            return at + newline + 1
        at += len(piece)
        searched += len(piece)
        if limit is not None and searched > limit:
            return None
    return size


def _line_start(file: int, start: int, at: int) -> int:
    """Where the line holding byte ``at - 1`` starts (at ``start`` or after a newline)."""
    at -= 1
    while at > start:
        low = max(start, at - (1 << 20))
        newline = os.pread(file, at - low, low).rfind(b"\n")
        if newline >= 0:
            return low + newline + 1
        at = low
    return start


def _blocks(source: str, stream: io.BufferedReader) -> Iterator[Block | LongLine]:
    gzipped = stream.peek(2)[:2] == GZIP_MAGIC
    data = _without_bom(_decompressed(source, stream) if gzipped else _raw(source, stream))
    line, rest, skipping = 1, b"", False
    try:
        for piece in data:
            if skipping:  # the rest of a line too long to read
                newline = piece.find(b"\n")
                if newline < 0:
                    continue
                piece, skipping = piece[newline + 1:], False
            if line == 1 and _is_document(rest + piece):
                yield from _document(source, rest + piece + b"".join(data))
                return
            newline = piece.find(b"\n")
            if newline >= 0 and len(rest) + newline > MAX_LINE_BYTES:
                yield LongLine(source)
                line, rest, piece = line + 1, b"", piece[newline + 1:]
            cut = piece.rfind(b"\n") + 1
            if cut:
                block = Block(source, rest + piece[:cut])
                rest = piece[cut:]
                yield block
                line += block.record_count
            else:
                rest += piece
            if len(rest) > MAX_LINE_BYTES:
                yield LongLine(source)
                line, rest, skipping = line + 1, b"", True
    except _Cut:
        raise Truncated(source, line) from None
    if rest:
        yield Block(source, rest)


def _without_bom(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """``pieces`` without the UTF-8 byte order mark that a Windows editor may put first."""
    head = b""
    for piece in pieces:
        head += piece
        if len(head) >= len(BOM):
            break
    if head:
        yield head.removeprefix(BOM)
    yield from pieces


def _is_document(start: bytes) -> bool:
    """Whether a file starting with ``start`` holds one pretty-printed document, not JSON lines.

    Only a first line of ``{`` alone or one starting with ``[`` counts, so a JSON-lines log whose
    first line is broken is reported by line instead of being read whole.
    """
    first_line = start.lstrip().split(b"\n", 1)[0].strip()
    return first_line == b"{" or first_line[:1] == b"["


def _document(source: str, text: bytes) -> Iterator[Block]:
    try:
        records = decode_document(text)
    except BadEvent as err:
        raise ReplayError(f"{source}: {err}") from None
    for first in range(0, len(records), DOCUMENT_ITEMS):
        yield Block(source, items=records[first:first + DOCUMENT_ITEMS])


def _raw(source: str, stream: BinaryIO) -> Iterator[bytes]:
    try:
        while piece := stream.read(BLOCK):
            yield piece
    except OSError as err:
        raise ReplayError(f"{source}: cannot read ({err.strerror or err})") from None


def _decompressed(source: str, stream: BinaryIO) -> Iterator[bytes]:
    """The bytes of a gzip stream of one or more members (``cat a.gz b.gz`` is valid gzip).

    Output comes in pieces of at most ``BLOCK`` bytes however well the input compresses.
    """
    inflate, fed = zlib.decompressobj(wbits=31), False
    for piece in _raw(source, stream):
        while piece:
            fed = True
            try:
                out = inflate.decompress(piece, BLOCK)
            except zlib.error as err:
                raise ReplayError(f"{source}: corrupt gzip data ({err})") from None
            if out:
                yield out
            if not inflate.eof:
                piece = inflate.unconsumed_tail
                continue
            piece = inflate.unused_data
            if piece and piece[:2] != GZIP_MAGIC[:len(piece[:2])]:
                raise ReplayError(f"{source}: data after the end of the gzip stream is not gzip")
            inflate, fed = zlib.decompressobj(wbits=31), False
    if fed:
        tail = inflate.flush()  # output held back when the last piece filled BLOCK exactly
        if tail:
            yield tail
        if not inflate.eof:
            raise _Cut()
