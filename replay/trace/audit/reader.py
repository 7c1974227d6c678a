"""Stream the records of audit log files (plain or gzip, or ``-`` for stdin) in blocks of lines.

A file is read in blocks of a few MiB, cut at the last newline, and split into lines, so memory
stays bounded whatever the file's size and every line keeps its number for error messages.
Compression is recognised by the gzip magic bytes, not the file name, so it works on stdin too;
a stream cut short (a log copied while being written) is reported as truncated rather than
silently losing its end.

The API server's log backend writes JSON lines, but exported logs are sometimes one JSON document
per file (pretty-printed, a JSON array of events, or an ``EventList``).  A file is read as one
document when its first line is not a complete JSON value and the whole file is; such a file is
read into memory at once, and its records are numbered by item rather than by line.
"""

from __future__ import annotations

import io
import sys
import zlib
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional

from replay.errors import ReplayError
from replay.trace.audit.event import BadEvent, decode_document

BLOCK = 4 << 20
GZIP_MAGIC = b"\x1f\x8b"
STDIN = "-"


@dataclass
class Block:
    """Whole lines of one file from line ``first_line`` on, or the items of a JSON document."""

    source: str
    first_line: int
    text: bytes = b""  # complete lines, newline-separated
    items: Optional[list] = None  # a document's records (msgspec.Raw), numbered by item
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
            self.record_count = self.text.count(b"\n") + (not self.text.endswith(b"\n"))

    def where(self, index: int) -> str:
        """The position of ``records[index]`` in words: ``FILE:LINE`` or ``FILE (item N)``."""
        if self.items is not None:
            return f"{self.source} (item {index + 1})"
        return f"{self.source}:{self.first_line + index}"


class Truncated(ReplayError):
    """A gzip stream that ends before its end marker; ``block`` holds its cut-off last line."""

    def __init__(self, message: str, block: Block):
        super().__init__(message)
        self.block = block


class _Cut(Exception):
    """Raised by ``_decompressed`` at the end of a gzip stream that lacks its end marker."""


def read_blocks(sources: list[str]) -> Iterator[Block]:
    """The blocks of every source, in the order given."""
    for source in sources:
        with _open(source) as stream:
            yield from _blocks(source, stream)


def _open(source: str) -> BinaryIO:
    if source == STDIN:
        return io.BufferedReader(io.FileIO(sys.stdin.fileno(), closefd=False))
    try:
        return open(source, "rb")
    except IsADirectoryError:
        raise ReplayError(f"{source}: is a directory, not an audit log") from None
    except OSError as err:
        raise ReplayError(f"{source}: cannot read ({err.strerror or err})") from None


def _blocks(source: str, stream: BinaryIO) -> Iterator[Block]:
    gzipped = stream.peek(2)[:2] == GZIP_MAGIC
    data = _decompressed(source, stream) if gzipped else _raw(source, stream)
    line, rest = 1, b""
    try:
        for piece in data:
            if line == 1 and _is_document(rest + piece):
                yield from _document(source, rest + piece, data)
                return
            cut = piece.rfind(b"\n") + 1
            if cut:
                block = Block(source, line, rest + piece[:cut])
                rest = piece[cut:]
                yield block
                line += block.record_count
            else:
                rest += piece
    except _Cut:
        raise Truncated(f"{source}:{line}: truncated gzip stream (the file ends inside line "
                        f"{line})", Block(source, line, rest)) from None
    if rest:
        yield Block(source, line, rest)


def _is_document(start: bytes) -> bool:
    """Whether a file starting with ``start`` holds one pretty-printed document, not JSON lines.

    Only a first line of ``{`` alone or one starting with ``[`` counts, so a JSON-lines log whose
    first line is broken is reported by line instead of being read whole.
    """
    first_line = start.lstrip().split(b"\n", 1)[0].strip()
    return first_line == b"{" or first_line[:1] == b"["


def _document(source: str, start: bytes, data: Iterator[bytes]) -> Iterator[Block]:
    text = start + b"".join(data)
    try:
        records = decode_document(text)
    except BadEvent as err:
        raise ReplayError(f"{source}: {err}") from None
    yield Block(source, 1, items=records)


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
